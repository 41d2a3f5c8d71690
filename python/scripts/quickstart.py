"""Run the Python blocks of README.md's "Quick start" against a server.

Usage: python quickstart.py README.md HOST:PORT. The snippets name the
default address; it is replaced by the given one.
"""

import re
import sys
from pathlib import Path

readme, address = sys.argv[1], sys.argv[2]
text = Path(readme).read_text(encoding="utf-8")
section = text.split("## Quick start", 1)[1].split("\n## ", 1)[0]
blocks = re.findall(r"```python\n(.*?)```", section, re.S)
assert len(blocks) >= 2, "quick start has no python blocks"
for code in blocks:
    exec(compile(code.replace("127.0.0.1:7117", address), "README.md", "exec"), {})
print(f"[python] quick start ok ({len(blocks)} blocks)")
