"""The reach counter (tests/library_reach.py) follows calls through modules and re-exports."""
from __future__ import annotations

import json

from library_reach import chapter_roots, closure, index, lines, reach_table


def _nb(tmp_path, src):
    p = tmp_path / "c.ipynb"
    p.write_text(json.dumps({"cells": [{"cell_type": "code", "source": src, "metadata": {}}]}))
    return p


def test_a_chapter_reaches_what_its_functions_call(tmp_path):
    mods = index()
    roots = chapter_roots(mods, _nb(tmp_path, "from andrea_edu.attention import reference_attention\n"
                                              "out = reference_attention(q, k, v)"))
    assert roots == {("andrea_edu.attention", "reference_attention")}
    reached = closure(mods, roots)
    assert ("andrea_edu.kernels.limits", "validate_qkv") in reached  # called inside it, imported
    assert lines(mods, reached) > lines(mods, roots)


def test_a_module_alias_is_followed_to_the_attribute_used(tmp_path):
    mods = index()
    roots = chapter_roots(mods, _nb(tmp_path, "import andrea_edu.attention as A\nA.reference_attention"))
    assert roots == {("andrea_edu.attention", "reference_attention")}


def test_unused_imports_and_other_packages_reach_nothing(tmp_path):
    mods = index()
    assert chapter_roots(mods, _nb(tmp_path, "import torch\nx = torch.ones(3)")) == set()


def test_every_chapter_has_a_reach(tmp_path):
    rows = reach_table()
    assert rows and all(n > 0 for _, n in rows)


def test_a_module_level_table_and_a_loaded_kind_are_reached(tmp_path):
    """A module-level assignment counts as a definition (its lines and what its value names);
    load("kind") with a literal kind reaches the loader data.LOADERS names for it, and only it."""
    mods = index()
    roots = chapter_roots(mods, _nb(tmp_path, "from andrea_edu.data import load\n"
                                              "res = load('bench_layout', device='cpu')"))
    assert ("andrea_edu.bench.results", "load_results") in roots
    reached = closure(mods, roots)
    assert ("andrea_edu.data", "LOADERS") in reached          # load() uses the table
    assert ("andrea_edu.heads.sweep", "load_sweep") not in reached   # another kind's loader
    variable = chapter_roots(mods, _nb(tmp_path, "from andrea_edu.data import load\nk = 'sweep'\n"
                                                 "load(k)"))
    assert variable == {("andrea_edu.data", "load")}           # a kind in a variable: no loader
