"""tests/gpu_only_lines.md stays honest: every GPU site in andrea_edu/, andrea_lab/ and in the chapters is
either reached on the CPU by a named test, or listed as GPU-only with its reason, and every
listed place still exists and still holds a GPU call.

A GPU site (found with ast, so docstrings and comments do not count): an attribute of
torch.cuda other than is_available/device_count (those two run everywhere and answer False on a
CPU), a `.cuda()` call, a `device="cuda"` keyword, `.synchronize()`, `.cuda_stream`, and a
call of a CUDA driver function (`drv.cuXxx(...)`). A place is a function, named
`path::qualname` (`<module>` for top-level code), or for a notebook `path::<text>`, the cell
that contains the text. The checks follow names; the list's lines column is checked too (it
must be what the code says today: the lines of the place's GPU calls, or for a notebook the
index of its cell, counting every cell from 0), and when an edit moves them

    python tests/test_gpu_only_lines.py --write

rewrites that column from the code (a note after the numbers, in parentheses, is kept).
"""
from __future__ import annotations

import ast
import json
import re
import sys
from typing import TypeGuard
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LIST = ROOT / "tests" / "gpu_only_lines.md"
RUNS_EVERYWHERE = {"is_available", "device_count"}


def _is_site(node: ast.AST) -> TypeGuard[ast.expr]:  # True only for an Attribute or a Call
    if isinstance(node, ast.Attribute):
        v = node.value
        if isinstance(v, ast.Attribute) and v.attr == "cuda" and \
                isinstance(v.value, ast.Name) and v.value.id == "torch":
            return node.attr not in RUNS_EVERYWHERE
        if node.attr == "cuda_stream":
            return True
    if isinstance(node, ast.Call):
        f = node.func
        if isinstance(f, ast.Attribute) and f.attr in ("cuda", "synchronize") and \
                not (isinstance(f.value, ast.Attribute) and f.value.attr == "cuda"):
            return True
        if isinstance(f, ast.Attribute) and re.fullmatch(r"cu[A-Z]\w+", f.attr) and \
                isinstance(f.value, ast.Name) and f.value.id in ("drv", "driver"):
            return True
        for kw in node.keywords:
            if kw.arg == "device" and isinstance(kw.value, ast.Constant) and \
                    kw.value.value == "cuda":
                return True
    return False


def python_sites() -> dict[str, list[int]]:
    """'path::qualname' -> line numbers of its GPU sites, over andrea_edu/**/*.py and the
    laboratory's andrea_lab/**/*.py."""
    out: dict[str, list[int]] = {}
    for path in sorted([*(ROOT / "andrea_edu").rglob("*.py"), *(ROOT / "andrea_lab").rglob("*.py")]):
        rel = path.relative_to(ROOT).as_posix()
        tree = ast.parse(path.read_text())

        def visit(node: ast.AST, qual: str) -> None:
            for child in ast.iter_child_nodes(node):
                if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    visit(child, child.name if qual == "<module>" else f"{qual}.{child.name}")
                    continue
                if _is_site(child):
                    out.setdefault(f"{rel}::{qual}", []).append(getattr(child, "lineno", 0))
                visit(child, qual)

        visit(tree, "<module>")
    return out


def notebook_cells() -> list[tuple[str, str]]:
    """(path, code) of every code cell of the chapters, IPython magics dropped."""
    cells = []
    for nb in sorted((ROOT / "book").glob("*.ipynb")):
        for c in json.loads(nb.read_text())["cells"]:
            if c["cell_type"] == "code":
                src = "".join(c["source"])
                code = "\n".join(ln for ln in src.splitlines()
                                 if not ln.lstrip().startswith(("%", "!")))
                cells.append((nb.relative_to(ROOT).as_posix(), code))
    return cells


def notebook_sites() -> list[tuple[str, str]]:
    """(path, cell code) of each chapter cell holding a GPU site."""
    out = []
    for path, code in notebook_cells():
        try:
            tree = ast.parse(code)
        except SyntaxError:
            continue
        if any(_is_site(n) for n in ast.walk(tree)):
            out.append((path, code))
    return out


def listed() -> list[dict]:
    """The rows of the list: place, lines, kind (gpu-only | reached), reason or test."""
    rows = []
    for ln in LIST.read_text().splitlines():
        cells = [c.strip() for c in ln.strip().strip("|").split("|")]
        if len(cells) == 4 and "::" in cells[0]:
            rows.append(dict(place=cells[0].strip("`"), lines=cells[1], kind=cells[2],
                             why=cells[3]))
    return rows


def test_the_list_parses_and_says_why():
    rows = listed()
    assert len(rows) >= 10
    for r in rows:
        assert r["kind"] in ("gpu-only", "reached"), r
        assert len(r["why"]) > 20, f"{r['place']}: a reason, in words"
        if r["kind"] == "reached":
            m = re.search(r"tests/test_\w+\.py", r["why"])
            assert m, f"{r['place']}: which test?"
            test_file = m.group(0)
            assert (ROOT / test_file).is_file(), f"{r['place']}: {test_file} does not exist"


def test_every_listed_place_still_holds_a_gpu_call():
    py = python_sites()
    cells = notebook_cells()
    for r in listed():
        path, _, what = r["place"].partition("::")
        if path.endswith(".ipynb"):
            hits = [code for p, code in cells if p == path and what in code]
            assert hits, f"{r['place']}: no cell of {path} contains {what!r} any more"
            assert any(any(_is_site(n) for n in ast.walk(ast.parse(c))) for c in hits), \
                f"{r['place']}: the cell holds no GPU call any more: take it off the list"
        else:
            assert (ROOT / path).is_file(), f"{r['place']}: {path} does not exist"
            assert r["place"] in py, f"{r['place']}: no such function with a GPU call " \
                                     f"any more (renamed, moved, or no longer GPU-only)"


def test_every_gpu_site_is_reached_or_listed():
    places = {r["place"] for r in listed()}
    missing = [f"{place} (lines {lines})" for place, lines in python_sites().items()
               if place not in places]
    nb_listed = [(p.partition("::")[0], p.partition("::")[2]) for p in places
                 if ".ipynb::" in p]
    for path, code in notebook_sites():
        if not any(path == lp and text in code for lp, text in nb_listed):
            first = next(ln for ln in code.splitlines() if "cuda" in ln)
            missing.append(f"{path}: cell with {first.strip()!r}")
    assert not missing, "GPU sites neither listed in tests/gpu_only_lines.md nor reached: " + \
        "; ".join(missing)


def test_the_site_finder_finds_what_it_should():
    src = """
import torch
def a(): return torch.cuda.is_available()
def b(x): return x.cuda()
def c(): torch.cuda.synchronize()
def d(): return torch.zeros(1, device="cuda")
def e(drv): return drv.cuLaunchKernel(1)
def f(): '''torch.cuda.synchronize() in a docstring'''
"""
    tree = ast.parse(src)
    found = {fn.name for fn in tree.body if isinstance(fn, ast.FunctionDef)
             and any(_is_site(n) for n in ast.walk(fn))}
    assert found == {"b", "c", "d", "e"}


@pytest.mark.parametrize("place", ["andrea_edu/kernels/launch.py::prepare_attention",
                                   "andrea_edu/bench/timing.py::_time_fns"])
def test_the_launcher_is_reached_by_the_wiring_tests(place):
    row = next(r for r in listed() if r["place"] == place)
    assert row["kind"] == "reached" and "tests/test_gpu_wiring.py" in row["why"]


# ----------------------------------------------------------------- the lines column, checked
def _ranges(lines: list[int]) -> str:
    """[258, 259, 279, 281] -> '258-259, 279, 281'."""
    out: list[str] = []
    for n in sorted(set(lines)):
        if out and int(out[-1].rpartition("-")[2]) == n - 1:
            out[-1] = f"{out[-1].partition('-')[0]}-{n}"
        else:
            out.append(str(n))
    return ", ".join(out)


def expected_lines(place: str, py: dict[str, list[int]] | None = None) -> str | None:
    """What the lines column of `place` must say today: its GPU calls' lines (Python), or
    'cell N' for the first cell of the notebook that contains the text and holds a GPU call
    (N counts every cell from 0, Markdown included, as Jupyter shows them); None when the place
    is gone (the checks above say so)."""
    path, _, what = place.partition("::")
    if path.endswith(".ipynb"):
        nb = json.loads((ROOT / path).read_text())
        for i, c in enumerate(nb["cells"]):
            src = "".join(c["source"])
            code = "\n".join(ln for ln in src.splitlines()
                             if not ln.lstrip().startswith(("%", "!")))
            if c["cell_type"] == "code" and what in src:
                try:
                    if any(_is_site(n) for n in ast.walk(ast.parse(code))):
                        return f"cell {i}"
                except SyntaxError:
                    continue
        return None
    py = python_sites() if py is None else py
    return _ranges(py[place]) if place in py else None


def _numbers(cell: str) -> str:
    """The lines column without its note: 'cell 50 (exercise 5)' -> 'cell 50'."""
    return cell.partition(" (")[0].strip()


def test_the_listed_line_numbers_point_at_the_named_code():
    py = python_sites()
    stale = [f"{r['place']}: listed {r['lines']!r}, the code says {expected_lines(r['place'], py)!r}"
             for r in listed() if _numbers(r["lines"]) != expected_lines(r["place"], py)]
    assert not stale, ("tests/gpu_only_lines.md's lines column is stale (rewrite it with "
                       "python tests/test_gpu_only_lines.py --write): " + "; ".join(stale))


def test_the_lines_checker_sees_a_moved_call(tmp_path, monkeypatch):
    """A GPU call moved by one line, or a second one added, is not what the list says."""
    pkg = tmp_path / "andrea_edu"
    pkg.mkdir()
    (tmp_path / "andrea_lab").mkdir()
    src = "import torch\n\ndef f():\n    torch.cuda.synchronize()\n"
    (pkg / "m.py").write_text(src)
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    assert expected_lines("andrea_edu/m.py::f") == "4"
    (pkg / "m.py").write_text(src.replace("def f():\n", "def f():\n    x = 1\n")
                              + "    torch.cuda.synchronize()\n    y = torch.cuda.Event()\n")
    assert expected_lines("andrea_edu/m.py::f") == "5-7"
    assert _ranges([258, 259, 279, 281, 281]) == "258-259, 279, 281"
    assert _numbers("cell 50 (exercise 5)") == "cell 50"


def write_lines() -> list[str]:
    """Rewrite the lines column of tests/gpu_only_lines.md from the code; returns what changed."""
    py = python_sites()
    changed, out = [], []
    for ln in LIST.read_text().splitlines(keepends=True):
        cells = ln.rstrip("\n").split("|")
        if len(cells) == 6 and "::" in cells[1]:
            place = cells[1].strip().strip("`")
            want = expected_lines(place, py)
            old = cells[2].strip()
            if want is not None and _numbers(old) != want:
                note = old.partition(" (")[2]
                cells[2] = f" {want}{' (' + note if note else ''} "
                changed.append(f"{place}: {old} -> {cells[2].strip()}")
                ln = "|".join(cells) + "\n"
        out.append(ln)
    LIST.write_text("".join(out))
    return changed


if __name__ == "__main__":
    if sys.argv[1:] != ["--write"]:
        print("usage: python tests/test_gpu_only_lines.py --write", file=sys.stderr)
        sys.exit(2)
    print("\n".join(write_lines()) or "tests/gpu_only_lines.md: the lines column is current")
