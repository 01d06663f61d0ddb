"""Every runnable exercise at a chapter's end runs: its one-cell change, applied to a copy of the
chapter, executes in fast mode (issue 18, item 5).

The changes live in the exercises cell's metadata (`andrea_lab.chapter_exercises`); each check
executes only the prefix of the chapter the change can reach (`needed_cells`), in a fresh kernel
with ANDREA_FAST=1, and fails naming the chapter, the exercise and the cell that failed.
"""
from __future__ import annotations

import nbformat
import pytest

from andrea_lab import chapter_exercises as E
from book_toc import REPO, toc_notebooks

TIMEOUT_S = 300  # per cell; fast mode needs seconds


def _nb(docname):
    return nbformat.read(REPO / (docname + ".ipynb"), as_version=4)


def _runnable():
    """(chapter, exercise numbers checked in one kernel run), every runnable exercise once."""
    return [(d, nums) for d in toc_notebooks() for nums in E.batches(_nb(d))]


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
    assert len({d for d, _ in _runnable()}) >= 10  # chapters whose exercises have a runnable change


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


def test_needed_cells_follows_names_both_ways():
    nb = _toy(["import os", "a = 1", "b = a + 1", "c = 5", "print(b)", "print(c)", "d = 7"])
    # forward: b reads a, print(b) reads b; backward: print is a builtin, nothing needs os
    assert E.needed_cells(nb, 1) == [1, 2, 4]
    assert E.needed_cells(nb, 3) == [3, 5]
    assert E.needed_cells(nb, 6) == [6]            # nothing reads d: only the edited cell
    nb.cells[0].source = "import os\nx = os.sep"
    nb.cells[1].source = "a = x * 2"              # now the edit needs cell 0, through x
    assert E.needed_cells(nb, 1) == [0, 1, 2, 4]
    nb.cells[5].source = "%timeit c"               # a magic does not parse: it is run, to be safe,
    assert E.needed_cells(nb, 1) == [0, 1, 2, 3, 4, 5]  # with every cell before it (c = 5 here)
    assert E.needed_cells(nb, 5) == [0, 1, 2, 3, 4, 5, 6]  # an edited cell that does not parse: all


def test_needed_cells_keeps_in_place_changes_and_functions():
    nb = _toy(["cfg = {}", "cfg['n'] = 2", "def f():\n    return cfg['n']", "a = 1",
               "y = f() + a", "show(y)"])
    # y reads f and a; f reads cfg, changed in place by cell 1, assigned by cell 0
    assert E.needed_cells(nb, 3) == [0, 1, 2, 3, 4, 5]
    nb.cells[1].source = "n = 2"                  # no longer touches cfg: skipped
    assert E.needed_cells(nb, 3) == [0, 2, 3, 4, 5]


def test_exercise_notebook_changes_and_cuts():
    ch = {"exercise": 1, "cell_tag": "t", "replace": "a = 1", "with": "a = 2"}
    nb = _toy(["x = 0", "a = 1", "b = a", "z = 3"], [ch])
    nb.cells[1].metadata["tags"] = ["t"]
    ex = E.exercise_notebook(nb, ch)
    assert [c.source for c in ex.cells] == ["a = 2", "b = a"]
    assert nb.cells[1].source == "a = 1"  # the chapter itself is untouched


def test_batches_group_only_changes_that_do_not_reach_each_other():
    table = [{"exercise": n, "cell_tag": f"t{n}", "replace": r, "with": r}
             for n, r in ((1, "a = 1"), (2, "b = a"), (3, "z = 3"))]
    nb = _toy(["a = 1", "b = a", "z = 3"], table)
    for n in range(3):
        nb.cells[n].metadata["tags"] = [f"t{n + 1}"]
    assert E.batches(nb) == [[1, 3], [2]]  # 2's cell reads a: exercise 1's edit reaches it


@pytest.mark.parametrize("docname,numbers", _runnable(),
                         ids=lambda v: "+".join(map(str, v)) if isinstance(v, list) else v)
def test_exercise_runs(docname, numbers, monkeypatch):
    monkeypatch.setenv("ANDREA_FAST", "1")
    monkeypatch.delenv("ANDREA_BOOK_BUILD", raising=False)
    r = E.run_exercise(REPO / (docname + ".ipynb"), numbers, timeout=TIMEOUT_S)
    assert r["ok"], f"{docname}, exercise {' and '.join(map(str, numbers))}: {r['error']}"


def test_worklog_unprecomputed_head_dim_is_one_line(monkeypatch):
    """The reader's edit `hs = 80` stops in the setup cell with one line naming the allowed values."""
    monkeypatch.setenv("ANDREA_FAST", "1")
    from andrea_lab.execute_chapters import execute_nb

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


def _bad_model_backend():
    from andrea_edu.config import ANDREA_12M
    from andrea_edu.dispatch import Backend
    from andrea_edu.model import AndreaModel

    AndreaModel(ANDREA_12M, attn=Backend("sdp"), device="meta")


def _bad_set_backend():
    from andrea_edu.config import ANDREA_12M
    from andrea_edu.dispatch import Backend
    from andrea_edu.model import AndreaModel

    AndreaModel(ANDREA_12M, device="meta").set_attention(Backend("flash"))


def _bad_kernel_facts_gpu():
    from andrea_edu.bench.dispatched import kernel_facts

    kernel_facts(64, gpu="H300")


@pytest.mark.parametrize("make,allowed", [
    (_bad_model_backend, "'reference', 'sdpa'"), (_bad_set_backend, "'reference', 'sdpa'"),
    (_bad_kernel_facts_gpu, "'H200', 'A100', 'RTX 4090'")])
def test_edited_values_outside_the_allowed_give_one_line(make, allowed):
    """Values an exercise's cell could be edited to, outside what exists: one line naming the
    allowed ones, before any weight is allocated or kernel compiled."""
    with pytest.raises(ValueError) as e:
        make()
    msg = str(e.value)
    assert "\n" not in msg and allowed in msg, msg


def test_comprehension_variables_are_not_the_cells_names():
    """`[h for h in hs]` neither assigns nor reads the chapter's `h` (Python 3 scoping), so an
    edit of the cell that sets `h` does not reach it; the first iterable and a walrus do count."""
    nb = _toy(["h = 1", "ys = [h * 2 for h in range(3)]", "zs = [h for _ in range(2)]",
               "w = [x for x in [h]]", "v = [(k := h) for _ in [0]]", "k2 = k"])
    assert E.needed_cells(nb, 0) == [0, 2, 3, 4, 5]
    assert E._names("d = {h: v for h, v in pairs if v}") == ({"d"}, set(), {"pairs"})
    assert E._names("g = [a for a in xs for b in a]") == ({"g"}, set(), {"xs"})


def test_a_cell_with_an_invalid_escape_still_parses_under_warnings_as_errors():
    """`"\\mid"` is a SyntaxWarning; pytest's -W error must not make the cell look unparsable."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert E._names('label = "$a \\mid b$"\nx = y') == ({"label", "x"}, set(), {"y"})


def test_every_exercise_is_a_one_cell_change():
    """Issue 18 item 5: every exercise at every chapter's end names one cell and one change, and
    carries it in the table, so that test_exercise_runs runs it."""
    missing = []
    for d in toc_notebooks():
        nb = _nb(d)
        texts, done = E.exercise_texts(nb), {c["exercise"] for c in E.changes(nb)}
        assert texts, f"{d}: no numbered list under '## Exercises'"
        missing += [f"{d}, exercise {n}: {t[:70]}" for n, t in texts.items() if n not in done]
    assert not missing, "exercises with no registered one-cell change:\n" + "\n".join(missing)
