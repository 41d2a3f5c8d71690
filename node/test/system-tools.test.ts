// The helper every test uses to find a program from outside the toolchains.
import assert from "node:assert/strict";
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import { requireTool } from "./helpers/system-tools.js";

test("a listed, installed program is found", () => {
  assert.match(requireTool("openssl"), /\/openssl$/);
});

test("a program that is not on the list is refused even when it is installed", () => {
  assert.throws(() => requireTool("sh"), /sh is not on .*system-tools\.tsv: declare it there/);
});

test("a listed program that is missing names its package and the install command", () => {
  const list = join(mkdtempSync(join(tmpdir(), "monolock-tools-")), "tools.tsv");
  writeFileSync(
    list,
    "# comment\nname\tpackage\tpath\tgroup\tused by\nmonolock-no-such-program\tmonolock-test-package\t-\ttest\tthis test\n",
  );
  assert.throws(() => requireTool("monolock-no-such-program", list), {
    message:
      "monolock-no-such-program is not installed (Debian package monolock-test-package): run go run mage.go deps (apt-get install monolock-test-package)",
  });
});
