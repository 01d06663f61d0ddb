"""Run a chapter's exercises: each one is a change to one cell, written down where a test can apply it.

The exercises Markdown cell at a chapter's end carries, in its cell metadata, one entry per
exercise that is answered by editing one cell::

    {"andrea_exercises": [{"exercise": 1, "cell_tag": "exercise-setup",
                           "replace": "B, T = 1, pick(128, 32)", "with": "B, T = 1, pick(1024, 64)"}]}

The target cell carries the tag ``cell_tag`` (one cell per tag); ``replace`` occurs in it exactly
once. `apply_change` makes the edited copy; `needed_cells` finds how much of the notebook the
edit can reach (the cells before it, and every later code cell that reads a name the edited cell
or one of its readers assigns, transitively), so a check runs only that prefix; `run_exercise`
executes it in a fresh kernel with the same stall-free client as `andrea_edu.notebook.execute`.

    python -m andrea_edu.notebook.exercises book/three_matrices.ipynb 1   # fast mode
"""
from __future__ import annotations

import ast
import copy
import os
import re
import sys
from pathlib import Path

KEY = "andrea_exercises"
FIELDS = ("exercise", "cell_tag", "replace", "with")


def exercises_cell(nb) -> int | None:
    """Index of the Markdown cell holding the '## Exercises' heading, else None."""
    return next((i for i, c in enumerate(nb.cells) if c.cell_type == "markdown"
                 and re.search(r"^## Exercises\s*$", c.source, re.M)), None)


def exercise_texts(nb) -> dict[int, str]:
    """{number: text} of the numbered list under '## Exercises', whitespace collapsed."""
    i = exercises_cell(nb)
    if i is None:
        return {}
    body = nb.cells[i].source.split("## Exercises", 1)[1]
    body = re.split(r"\n\s*\n(?!\s|\d+\. )", body.strip("\n"))[0]  # stop at the first paragraph after the list
    items = re.split(r"(?m)^(\d+)\. ", body)
    return {int(n): " ".join(t.split()) for n, t in zip(items[1::2], items[2::2])}


def changes(nb) -> list[dict]:
    """The exercises cell's machine-readable changes (empty when it has none)."""
    i = exercises_cell(nb)
    return [] if i is None else list(nb.cells[i].metadata.get(KEY, []))


def problems(nb) -> list[str]:
    """What is wrong with the notebook's exercise table, one line each (empty: all sound)."""
    texts, out = exercise_texts(nb), []
    for ch in changes(nb):
        name = f"exercise {ch.get('exercise')}"
        missing = [f for f in FIELDS if f not in ch]
        if missing:
            out.append(f"{name}: missing {', '.join(missing)}")
            continue
        if ch["exercise"] not in texts:
            out.append(f"{name}: no such item in the Exercises list ({sorted(texts)})")
        elif " ".join(ch["with"].split()) not in texts[ch["exercise"]]:
            out.append(f"{name}: the text does not show the change `{ch['with']}`")
        tagged = [c for c in nb.cells if ch["cell_tag"] in c.metadata.get("tags", [])]
        if len(tagged) != 1 or tagged[0].cell_type != "code":
            out.append(f"{name}: {len(tagged)} cells tagged {ch['cell_tag']!r}; one code cell needed")
        elif tagged[0].source.count(ch["replace"]) != 1:
            out.append(f"{name}: {ch['replace']!r} occurs {tagged[0].source.count(ch['replace'])} "
                       f"times in the cell tagged {ch['cell_tag']!r}; once needed")
    return out


def apply_change(nb, change: dict):
    """(a copy of nb with the change made, index of the changed cell); ValueError if it cannot."""
    bad = problems(_only(nb, change))
    if bad:
        raise ValueError(bad[0])
    new = copy.deepcopy(nb)
    idx = next(i for i, c in enumerate(new.cells) if change["cell_tag"] in c.metadata.get("tags", []))
    new.cells[idx].source = new.cells[idx].source.replace(change["replace"], change["with"])
    return new, idx


def _only(nb, change):
    one = copy.deepcopy(nb)
    one.cells[exercises_cell(one)].metadata[KEY] = [change]
    return one


def _names(source: str) -> tuple[set[str], set[str]] | None:
    """(names the cell assigns, names it reads); None when it does not parse (a magic, say)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    stored, loaded = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            (stored if isinstance(node.ctx, (ast.Store, ast.Del)) else loaded).add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            stored.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            stored.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            stored.update(node.names)
    return stored, loaded


def needed_cells(nb, changed: int) -> int:
    """Index of the last cell a run must reach to show every effect of editing cell `changed`:
    the last later code cell that reads a name assigned by the edited cell or, transitively, by
    a cell that reads one. A cell that does not parse counts as a reader (run it to be safe)."""
    first = _names(nb.cells[changed].source)
    tainted = set(first[0]) if first else set()
    last = changed
    for i in range(changed + 1, len(nb.cells)):
        c = nb.cells[i]
        if c.cell_type != "code":
            continue
        names = _names(c.source)
        if first is None or names is None or names[1] & tainted:
            last = i
            if names is not None:
                tainted |= names[0]
    return last


def exercise_notebook(nb, change: dict):
    """The notebook a check executes: the change made, cut after the last cell it reaches."""
    new, idx = apply_change(nb, change)
    new.cells = new.cells[: needed_cells(new, idx) + 1]
    return new


def run_exercise(path, number: int, timeout: float = 600) -> dict:
    """Execute exercise `number` of chapter `path` (fast mode is the caller's ANDREA_FAST);
    returns {exercise, cells, seconds, ok, error} as `execute.execute_nb` does."""
    import nbformat

    from andrea_edu.notebook.execute import execute_nb

    path = Path(path)
    nb = nbformat.read(path, as_version=4)
    change = next((c for c in changes(nb) if c.get("exercise") == number), None)
    if change is None:
        raise ValueError(f"number: {path.name} has no runnable exercise {number}; it has "
                         f"{[c.get('exercise') for c in changes(nb)]}")
    ex = exercise_notebook(nb, change)
    r = execute_nb(ex, path.parent, timeout)
    return {"exercise": number, "cells": len(ex.cells), **r}


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if len(argv) != 2 or not argv[1].isdigit() or not Path(argv[0]).is_file():
        print("usage: python -m andrea_edu.notebook.exercises CHAPTER.ipynb N  (N: the exercise's "
              "number)", file=sys.stderr)
        return 2
    os.environ.setdefault("ANDREA_FAST", "1")
    r = run_exercise(argv[0], int(argv[1]))
    print(f"[exercise] {argv[0]} #{argv[1]}: {'ok' if r['ok'] else 'FAILED, ' + r['error']} "
          f"({r['cells']} cells, {r['seconds']} s)")
    return 0 if r["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
