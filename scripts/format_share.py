"""How much of the code a reader sees in the book only formats output.

Counts, per chapter notebook in book/, the visible code lines (code cells not tagged
hide-input, remove-input or remove-cell; blank and comment-only lines not counted) and, among
them, the lines of top-level statements whose only job is to format output:
- a call to display, Markdown, HTML, box or a table helper (``table``, ``*_table``), or to print
  with only strings (a label printed beside a tensor shows the tensor: not counted);
- an assignment or ``+=`` whose value is built only of strings (literals, f-strings, joins,
  conditionals or lists/comprehensions of them), or a ``.append`` of such a value;
- a loop or ``if`` that contains such a statement and otherwise only assignments that prepare
  its values (no other call, assert or plot), a ``try`` made of such statements, or a ``def``
  whose body is;
- a list or tuple that is at least two thirds text (rows of a table or of a verdict box), or a
  call whose arguments are all text (a helper that turns text into text).
Everything else (computing, plotting, showing library source, asserting) is teaching code.

    python scripts/format_share.py            # table per chapter and for the whole book
    python scripts/format_share.py --json     # the same as JSON
"""
from __future__ import annotations

import ast
import json
import sys
from pathlib import Path

BOOK = Path(__file__).resolve().parents[1] / "book"
HIDDEN = {"hide-input", "remove-input", "remove-cell"}
FORMAT_CALLS = {"display", "Markdown", "HTML", "box", "table"}


def _stringy(node) -> bool:
    """True when `node` only builds text out of strings."""
    if isinstance(node, ast.Constant):
        return isinstance(node.value, str)
    if isinstance(node, ast.JoinedStr):
        return True
    if isinstance(node, ast.BinOp):
        return _stringy(node.left) or _stringy(node.right)
    if isinstance(node, ast.IfExp):
        return _stringy(node.body) and _stringy(node.orelse)
    if isinstance(node, (ast.List, ast.Tuple)):  # rows of text: mostly strings
        return bool(node.elts) and sum(map(_stringy, node.elts)) * 3 >= 2 * len(node.elts)
    if isinstance(node, (ast.ListComp, ast.GeneratorExp)):
        return _stringy(node.elt)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        if node.func.attr in {"join", "format", "replace", "strip"}:
            return _stringy(node.func.value) or any(_stringy(a) for a in node.args)
    if isinstance(node, ast.Call) and node.args and not node.keywords:
        # a helper that turns text into text, e.g. p("step", f"...")
        return all(_stringy(a) for a in node.args) and any(
            isinstance(a, ast.JoinedStr) for a in node.args)
    return False


def _name(func) -> str:
    return func.id if isinstance(func, ast.Name) else (
        func.attr if isinstance(func, ast.Attribute) else "")


def _formats(stmt) -> bool:
    if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
        call = stmt.value
        name = _name(call.func)
        if name in FORMAT_CALLS or name.endswith("_table"):
            return True
        if name == "print":  # a label printed beside data is showing the data
            return bool(call.args) and all(_stringy(a) for a in call.args)
        if name in {"append", "extend"}:
            return bool(call.args) and all(_stringy(a) for a in call.args)
        return False
    if isinstance(stmt, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
        return stmt.value is not None and _stringy(stmt.value)
    if isinstance(stmt, (ast.For, ast.While, ast.If)):
        return _formats_block(stmt.body + stmt.orelse)
    if isinstance(stmt, ast.Try):
        return all(_formats(s) for s in stmt.body) and all(
            _formats(s) for h in stmt.handlers for s in h.body)
    if isinstance(stmt, ast.FunctionDef):
        body = [s for s in stmt.body if not (isinstance(s, ast.Expr) and _stringy(s.value))]
        return bool(body) and all(_formats(s) for s in body)
    return False


def _formats_block(body) -> bool:
    """A block that formats: at least one formatting statement, and the rest only prepares values
    for it (assignments, continue/break/pass), with no other call, assert or plot of its own."""
    def helper(stmt):
        if isinstance(stmt, (ast.Assign, ast.AnnAssign, ast.AugAssign, ast.Continue, ast.Break,
                             ast.Pass)):
            return True
        if isinstance(stmt, (ast.For, ast.While, ast.If)):
            return all(_formats(s) or helper(s) for s in stmt.body + stmt.orelse)
        return False
    return any(_formats(s) for s in body) and all(_formats(s) or helper(s) for s in body)


def _counted(lines, lo, hi) -> int:
    return sum(1 for ln in lines[lo - 1:hi] if ln.strip() and not ln.strip().startswith("#"))


def cell_counts(source: str) -> tuple[int, int]:
    """(visible code lines, formatting lines) of one code cell's source."""
    lines = source.splitlines()
    total = _counted(lines, 1, len(lines))
    clean = "\n".join("" if ln.lstrip().startswith(("%", "!")) else ln for ln in lines)
    try:
        tree = ast.parse(clean)
    except SyntaxError:
        return total, 0
    fmt = sum(_counted(lines, s.lineno, s.end_lineno) for s in tree.body if _formats(s))
    return total, fmt


def chapter_counts(path: Path) -> tuple[int, int]:
    nb = json.loads(path.read_text())
    total = fmt = 0
    for cell in nb["cells"]:
        if cell["cell_type"] != "code":
            continue
        if HIDDEN & set(cell.get("metadata", {}).get("tags", [])):
            continue
        t, f = cell_counts("".join(cell["source"]))
        total, fmt = total + t, fmt + f
    return total, fmt


def main(argv) -> int:
    if [a for a in argv if a != "--json"]:
        print(f"format_share.py: error: unknown argument(s) {' '.join(a for a in argv if a != '--json')}; "
              f"usage: python scripts/format_share.py [--json]", file=sys.stderr)
        return 2
    rows = {p.stem: chapter_counts(p) for p in sorted(BOOK.glob("*.ipynb"))}
    total = sum(t for t, _ in rows.values())
    fmt = sum(f for _, f in rows.values())
    if "--json" in argv:
        print(json.dumps({"chapters": {k: {"visible": t, "formatting": f} for k, (t, f) in
                                       rows.items()}, "book": {"visible": total, "formatting": fmt}},
                         indent=1))
        return 0
    print(f"{'chapter':32s} {'visible':>8s} {'format':>7s} {'share':>6s}")
    for name, (t, f) in rows.items():
        print(f"{name:32s} {t:8d} {f:7d} {f / t if t else 0:6.1%}")
    print(f"{'book':32s} {total:8d} {fmt:7d} {fmt / total if total else 0:6.1%}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
