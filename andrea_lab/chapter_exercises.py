"""Run a chapter's exercises: each one is a change to one cell, written down where a test can apply it.

The exercises Markdown cell at a chapter's end carries, in its cell metadata, one entry per
exercise that is answered by editing one cell::

    {"andrea_exercises": [{"exercise": 1, "cell_tag": "exercise-setup",
                           "replace": "B, T = 1, pick(128, 32)", "with": "B, T = 1, pick(1024, 64)"}]}

The target cell carries the tag ``cell_tag`` (one cell per tag); ``replace`` occurs in it exactly
once. `apply_change` makes the edited copy; `needed_cells` finds the cells the edit reaches (later
code cells that read a name the edited cell, or one of its readers, assigns) and the earlier cells
those need (the ones that assign what they read), so a check runs only them; `run_exercise`
executes that in a fresh kernel with the same stall-free client as `andrea_lab.execute_chapters`.

    python -m andrea_lab.chapter_exercises book/three_matrices.ipynb 1   # fast mode

Tooling of the tests and scripts (tests/test_exercises.py runs every exercise), kept out of the
reader's package: a chapter never imports it.
"""
from __future__ import annotations

import ast
import copy
import os
import re
import sys
import warnings
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


_COMPREHENSIONS = (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)


def _comprehension_locals(tree) -> set[int]:
    """ids of the Name nodes that are a comprehension's own loop variables: Python 3 keeps those
    inside the comprehension, so `[h for h in heads]` neither assigns nor reads a cell's `h`. The
    first iterable is evaluated outside (it may read the cell's `h`); a walrus binds outside."""
    local: set[int] = set()
    for comp in ast.walk(tree):
        if not isinstance(comp, _COMPREHENSIONS):
            continue
        targets = {n.id for g in comp.generators for n in ast.walk(g.target) if isinstance(n, ast.Name)}
        outer = comp.generators[0].iter
        inside = [comp.elt] if not isinstance(comp, ast.DictComp) else [comp.key, comp.value]
        inside += [g.target for g in comp.generators] + [x for g in comp.generators for x in g.ifs]
        inside += [g.iter for g in comp.generators[1:]]
        for part in inside:
            for n in ast.walk(part):
                if isinstance(n, ast.Name) and n.id in targets and n is not outer:
                    local.add(id(n))
    return local


def _names(source: str) -> tuple[set[str], set[str], set[str]] | None:
    """(names the cell assigns, names it changes in place: `x.a = 1`, `x[i] = 1`, `x += 1`,
    names it reads); None when it does not parse (a magic, say) or star-imports. A
    comprehension's loop variables are its own, neither assigned nor read by the cell."""
    try:
        with warnings.catch_warnings():  # "\\m" in a cell is a SyntaxWarning, an error under -W error
            warnings.simplefilter("ignore")
            tree = ast.parse(source)
    except SyntaxError:
        return None
    stored: set[str] = set()
    changed: set[str] = set()
    loaded: set[str] = set()
    local = _comprehension_locals(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and id(node) in local:
            continue
        if isinstance(node, ast.Name):
            (stored if isinstance(node.ctx, (ast.Store, ast.Del)) else loaded).add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            stored.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            if any(a.name == "*" for a in node.names):
                return None
            stored.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            stored.update(node.names)
        elif isinstance(node, (ast.Attribute, ast.Subscript)) and isinstance(node.ctx, ast.Store):
            root = node.value
            while isinstance(root, (ast.Attribute, ast.Subscript)):
                root = root.value
            if isinstance(root, ast.Name):
                changed.add(root.id)
        elif isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name):
            changed.add(node.target.id)
    return stored, changed, loaded


def _reach(nb, changed: int, names: dict) -> set[int]:
    """The edited cell and every later code cell that reads a name it, or (transitively) one of
    those readers, assigns or changes."""
    st, ch, _ = names[changed]
    tainted, keep = set(st) | set(ch), {changed}
    for i in sorted(i for i in names if i > changed):
        n = names[i]
        if n is None or n[2] & tainted:
            keep.add(i)
            if n is not None:
                tainted |= n[0] | n[1]
    return keep


def needed_cells(nb, changed) -> list[int]:
    """Indices of the code cells a run must execute to show every effect of editing cell
    `changed` (an index, or several), in order. Forward: each edited cell and every later code
    cell that reads a name it, or (transitively) one of those readers, assigns or changes.
    Backward: every earlier cell that assigns or changes a name a kept cell after it still
    needs. A cell that does not parse is kept (run to be safe), and every cell is when an edited
    one does not parse. A cell is skipped only when nothing kept reads what it assigns: its own
    output (a figure, a table) is not part of the exercise; whole chapters run in test_notebooks."""
    edited = [changed] if isinstance(changed, int) else list(changed)
    code = [i for i, c in enumerate(nb.cells) if c.cell_type == "code"]
    names = {i: _names(nb.cells[i].source) for i in code}
    if any(names.get(e) is None for e in edited):
        return code
    keep = set().union(*(_reach(nb, e, names) for e in edited))
    need: set[str] = set()
    everything = False  # a kept cell that does not parse may read anything assigned before it
    for i in reversed(code[: code.index(max(keep)) + 1]):
        n = names[i]
        if not everything and i not in keep and n is not None and not ((n[0] | n[1]) & need):
            continue
        keep.add(i)
        if n is None:
            everything = True
        else:
            need = (need - n[0]) | n[2] | n[1]
    return sorted(keep)


def _cell_of(nb, change: dict) -> int:
    return next(i for i, c in enumerate(nb.cells) if change["cell_tag"] in c.metadata.get("tags", []))


def batches(nb) -> list[list[int]]:
    """The exercise numbers of nb grouped so that one kernel run can check each group: changes
    to different cells, none of which the others' edits reach (so each shows its own effect)."""
    code = [i for i, c in enumerate(nb.cells) if c.cell_type == "code"]
    names = {i: _names(nb.cells[i].source) for i in code}
    groups: list[tuple[list[int], set[int], set[int]]] = []  # (numbers, edited cells, reached)
    for ch in changes(nb):
        cell = _cell_of(nb, ch)
        reach = _reach(nb, cell, names) if names.get(cell) is not None else set(code)
        for nums, cells, reached in groups:
            if cell not in reached and not (reach & cells):
                nums.append(ch["exercise"])
                cells.add(cell)
                reached |= reach
                break
        else:
            groups.append(([ch["exercise"]], {cell}, set(reach)))
    return [g[0] for g in groups]


def exercise_notebook(nb, change):
    """The notebook a check executes: the change (a dict, or a list of non-interfering ones)
    made, and only the cells it needs (needed_cells)."""
    new, cells = nb, []
    for ch in [change] if isinstance(change, dict) else change:
        new, idx = apply_change(new, ch)
        cells.append(idx)
    new.cells = [new.cells[i] for i in needed_cells(new, cells)]
    return new


def run_exercise(path, number, timeout: float = 600) -> dict:
    """Execute exercise `number` (or a list of numbers, in one kernel) of chapter `path`; fast
    mode is the caller's ANDREA_FAST. Returns {exercise, cells, seconds, ok, error}, as
    `execute_chapters.execute_nb` does."""
    import nbformat

    from andrea_lab.execute_chapters import execute_nb

    path = Path(path)
    nb = nbformat.read(path, as_version=4)
    numbers = [number] if isinstance(number, int) else list(number)
    by_number = {int(c["exercise"]): c for c in changes(nb) if "exercise" in c}
    missing = [n for n in numbers if n not in by_number]
    if missing:
        raise ValueError(f"number: {path.name} has no runnable exercise {missing[0]}; it has "
                         f"{sorted(by_number)}")
    ex = exercise_notebook(nb, [by_number[n] for n in numbers])
    r = execute_nb(ex, path.parent, timeout)
    return {"exercise": numbers, "cells": len(ex.cells), **r}


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if len(argv) != 2 or not argv[1].isdigit() or not Path(argv[0]).is_file():
        print("usage: python -m andrea_lab.chapter_exercises CHAPTER.ipynb N  (N: the exercise's "
              "number)", file=sys.stderr)
        return 2
    import nbformat

    from andrea_lab.execute_chapters import notebook_problem
    damaged = notebook_problem(argv[0])
    if damaged:  # before a kernel starts: one line, not nbformat's traceback
        print(f"python -m andrea_lab.chapter_exercises: error: CHAPTER: {damaged}",
              file=sys.stderr)
        return 2
    nb = nbformat.read(argv[0], as_version=4)
    have = sorted(int(c["exercise"]) for c in changes(nb) if "exercise" in c)
    if int(argv[1]) not in have:  # before starting a kernel
        print(f"python -m andrea_lab.chapter_exercises: error: N: {Path(argv[0]).name} has no "
              f"runnable exercise {argv[1]}; allowed: {', '.join(map(str, have)) or 'none'}",
              file=sys.stderr)
        return 2
    os.environ.setdefault("ANDREA_FAST", "1")
    r = run_exercise(argv[0], int(argv[1]))
    print(f"[exercise] {argv[0]} #{argv[1]}: {'ok' if r['ok'] else 'FAILED, ' + r['error']} "
          f"({r['cells']} cells, {r['seconds']} s)")
    return 0 if r["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
