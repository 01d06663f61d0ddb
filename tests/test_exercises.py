"""Every runnable exercise at a chapter's end runs: its one-cell change, applied to a copy of the
chapter, executes in fast mode (issue 18, item 5).

The changes live in the exercises cell's metadata (`andrea_edu.notebook.exercises`); each check
executes only the prefix of the chapter the change can reach (`needed_cells`), in a fresh kernel
with ANDREA_FAST=1, and fails naming the chapter, the exercise and the cell that failed.
"""
from __future__ import annotations

import nbformat
import pytest

from andrea_edu.notebook import exercises as E
from book_toc import REPO, toc_notebooks

TIMEOUT_S = 300  # per cell; fast mode needs seconds


def _nb(docname):
    return nbformat.read(REPO / (docname + ".ipynb"), as_version=4)


def _runnable():
    return [(d, ch["exercise"]) for d in toc_notebooks() for ch in E.changes(_nb(d))]


def _toy(cells, table=None):
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(src) for src in cells]
    nb.cells.append(nbformat.v4.new_markdown_cell(
        "## Exercises\n\n1. In the cell that sets `a = 1`, set `a = 2`.\n2. Think.\n\n**After.**"))
    nb.cells[-1].metadata[E.KEY] = table or []
    return nb


def test_every_exercise_table_is_sound():
    """Each entry names an item of the list, whose text shows the change; its tag marks exactly
    one code cell, in which the replaced text occurs exactly once."""
    bad = [f"{d}: {p}" for d in toc_notebooks() for p in E.problems(_nb(d))]
    assert not bad, "\n".join(bad)
    assert len({d for d, _ in _runnable()}) >= 8  # chapters whose exercises have a runnable change


def test_problems_name_each_fault():
    ok = {"exercise": 1, "cell_tag": "t", "replace": "a = 1", "with": "a = 2"}
    nb = _toy(["a = 1"], [ok])
    nb.cells[0].metadata["tags"] = ["t"]
    assert E.problems(nb) == []
    no_with = {k: v for k, v in ok.items() if k != "with"}
    assert "missing with" in E.problems(_toy(["a = 1"], [no_with]))[0]
    assert "no such item" in E.problems(_toy(["a = 1"], [{**ok, "exercise": 3}]))[0]
    assert "does not show" in E.problems(_toy(["a = 1"], [{**ok, "with": "a = 3"}]))[0]
    assert "0 cells tagged" in E.problems(_toy(["a = 1"], [ok]))[0]
    twice = _toy(["a = 1; a = 1"], [ok])
    twice.cells[0].metadata["tags"] = ["t"]
    assert "occurs 2 times" in E.problems(twice)[0]
    with pytest.raises(ValueError, match="occurs 2 times"):
        E.apply_change(twice, ok)


def test_needed_cells_follows_names_transitively():
    nb = _toy(["import os", "a = 1", "b = a + 1", "c = 5", "print(b)", "print(c)", "d = 7"])
    assert E.needed_cells(nb, 1) == 4   # b reads a, print(b) reads b; c, d do not depend on a
    assert E.needed_cells(nb, 3) == 5
    assert E.needed_cells(nb, 6) == 6   # nothing reads d: stop at the edited cell
    nb.cells[5].source = "%timeit c"     # a magic does not parse: it is run, to be safe
    assert E.needed_cells(nb, 1) == 5
    nb.cells[2].source = "def f():\n    return a"  # a function that reads a, then a reader of f
    nb.cells[4].source = "f()"
    assert E.needed_cells(nb, 1) == 5


def test_exercise_notebook_changes_and_cuts():
    ch = {"exercise": 1, "cell_tag": "t", "replace": "a = 1", "with": "a = 2"}
    nb = _toy(["x = 0", "a = 1", "b = a", "z = 3"], [ch])
    nb.cells[1].metadata["tags"] = ["t"]
    ex = E.exercise_notebook(nb, ch)
    assert [c.source for c in ex.cells] == ["x = 0", "a = 2", "b = a"]
    assert nb.cells[1].source == "a = 1"  # the chapter itself is untouched


@pytest.mark.parametrize("docname,number", _runnable())
def test_exercise_runs(docname, number, monkeypatch):
    monkeypatch.setenv("ANDREA_FAST", "1")
    monkeypatch.delenv("ANDREA_BOOK_BUILD", raising=False)
    r = E.run_exercise(REPO / (docname + ".ipynb"), number, timeout=TIMEOUT_S)
    assert r["ok"], f"{docname}, exercise {number}: {r['error']}"


def test_worklog_unprecomputed_head_dim_is_one_line(monkeypatch):
    """The reader's edit `hs = 80` stops in the setup cell with one line naming the allowed values."""
    monkeypatch.setenv("ANDREA_FAST", "1")
    from andrea_edu.notebook.execute import execute_nb

    nb = _nb("book/kernel_worklog")
    ch = next(c for c in E.changes(nb) if c["cell_tag"] == "exercise-design-case")
    new, idx = E.apply_change(nb, ch)
    new.cells[idx].source = nb.cells[idx].source.replace(ch["replace"],
                                                         ch["with"].replace("128", "80"))
    new.cells = new.cells[: idx + 1]
    r = execute_nb(new, REPO / "book", TIMEOUT_S)
    assert not r["ok"]
    assert r["error"].startswith(f"cell {idx}: ValueError: hs=80:") and "64" in r["error"], r["error"]
    out = next(o for o in new.cells[idx].outputs if o.output_type == "error")
    assert out.evalue.count("\n") == 0
