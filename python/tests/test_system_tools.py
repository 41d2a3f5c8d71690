"""The helper every test uses to find a program from outside the toolchains."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from .support import require_tool


def test_a_listed_installed_program_is_found() -> None:
    assert require_tool("openssl").endswith("/openssl")


def test_a_program_not_on_the_list_is_refused_even_when_installed() -> None:
    not_listed = r"sh is not on .*system-tools\.tsv: declare it there"
    with pytest.raises(pytest.fail.Exception, match=not_listed):
        require_tool("sh")


def test_a_missing_program_names_its_package_and_the_install_command(tmp_path: Path) -> None:
    tools = tmp_path / "tools.tsv"
    tools.write_text(
        "# comment\nname\tpackage\tpath\tgroup\tused by\n"
        "monolock-no-such-program\tmonolock-test-package\t-\ttest\tthis test\n"
        "no-such.jar\tmonolock-bench-package\t/nonexistent/no-such.jar\tbench\tthis test\n",
        encoding="utf-8",
    )
    with pytest.raises(pytest.fail.Exception) as missing:
        require_tool("monolock-no-such-program", tools)
    assert str(missing.value) == (
        "monolock-no-such-program is not installed (Debian package monolock-test-package): "
        "run go run mage.go deps (apt-get install monolock-test-package)"
    )
    bench_hint = re.escape("run bash bench/scripts/peers.sh install")
    with pytest.raises(pytest.fail.Exception, match=bench_hint):
        require_tool("no-such.jar", tools)
