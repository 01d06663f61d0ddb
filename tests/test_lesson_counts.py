"""Issue 38's targets on the chapters rewritten to teach first (tests/lesson_counts.py counts).

A chapter joins REWRITTEN when its rewrite lands; from then on it keeps at most 25 code cells
outside its exercises, at least half of them computing the lesson in view, and a setup cell
that prints nothing. The chapters not yet rewritten are listed by `python tests/lesson_counts.py`."""
from __future__ import annotations

import json

import pytest

from lesson_counts import MAX_CODE_CELLS, MIN_IN_VIEW, ROOT, chapters, computes_in_view, count

REWRITTEN: set[str] = {"config_mirrors_hardware", "cuda_stores_heads", "final_picture", "heads_on_real_text",
                        "kernel_worklog",
                        "one_kernel_many_heads",
                        "output_projection", "parameter_count", "reading_the_pipeline",
                        "three_matrices", "twelve_vectors_become_one",
                        "why_heads_specialize", "why_twelve_heads"}


def test_every_rewritten_chapter_is_a_chapter():
    assert REWRITTEN <= {p.stem for p in chapters()}


@pytest.mark.parametrize("name", sorted(REWRITTEN))
def test_a_rewritten_chapter_meets_the_targets(name):
    c = count(ROOT / "book" / f"{name}.ipynb")
    assert c.code <= MAX_CODE_CELLS, f"{name}: {c.code} code cells outside the exercises"
    assert c.share >= MIN_IN_VIEW, f"{name}: {c.in_view}/{c.code} compute the lesson in view"


@pytest.mark.parametrize("src, computes", [
    ("att = q @ k.transpose(-2, -1) / hs**0.5  # (B, nh, T, T)", True),
    ("def naive(q, k, v):\n    return q", True),
    ("%%cuda\n__global__ void k() {}", True),
    ("import torch\nfrom andrea_edu import projections as P", False),
    ("B, T = 1, pick(128, 32)\ndevice = pick_device('auto')", False),
    ("display(Markdown(f'{x}'))", False),
    ("s = f'The fused matmul is {r:.1f} times faster than per head'", False),
    ("rows = ['| a | b |', '|---|---|']", False),
    ("show_source(attention)", False),
    ("box([('claim', 'evidence', 'holds')])", False),
])
def test_the_counter_tells_a_computation_from_plumbing_and_prose(src, computes):
    assert computes_in_view(src) is computes


def test_the_counter_skips_hidden_cells_and_exercises(tmp_path):
    def cell(kind, src, tags=()):
        return {"cell_type": kind, "source": src, "metadata": {"tags": list(tags)}}
    nb = {"cells": [cell("code", "x = 1 + 1", ["hide-input"]), cell("code", "y = x * 2"),
                    cell("markdown", "## Exercises"), cell("code", "z = y + 1"),
                    cell("markdown", "## Evidence"), cell("code", "w = 3 * y"),
                    cell("code", "v = w + y", ["hide-cell"])]}  # behind a toggle: not in view
    p = tmp_path / "c.ipynb"
    p.write_text(json.dumps(nb))
    c = count(p)
    assert (c.code, c.visible, c.in_view, c.exercises) == (4, 2, 2, 1)


def test_the_prose_counter_counts_labels_not_keys_or_refusals(tmp_path):
    """figure_prose_words: a two-token label counts, a result key, an option or an error
    message does not (prose_only); every literal counts without it; docstrings never."""
    from lesson_counts import figure_prose_words
    (tmp_path / "m.py").write_text(
        '"""A module docstring of several words."""\n'
        'def f(r, ax):\n'
        '    """A function docstring."""\n'
        '    if r["median_ms"] < 0:\n'
        '        raise ValueError(f"median_ms={r} is negative; a time is at least 0")\n'
        '    ax.set_title("Time per launch", loc="center")\n'
        '    return f"{r} µs on an H200"\n')
    # 'Time per launch' and ' µs on an H200' ('on', 'an'; 'µs' and 'H200' lack two letters)
    assert figure_prose_words(tmp_path) == {"m": 3 + 2}
    # and the key, the refusal's seven and the option
    assert figure_prose_words(tmp_path, prose_only=False) == {"m": 1 + 7 + 3 + 1 + 2}


def test_the_figures_prose_stays_within_its_aim():
    """Issue 38 item 3: prose in andrea_edu/figures/ string literals (labels, captions, alt text,
    by figure_prose_words' stated method) at most 1,500 words: a figure's words live beside it
    in Markdown, or in claims.json for the verdicts page."""
    from lesson_counts import figure_prose_words

    words = figure_prose_words()
    assert sum(words.values()) <= 1500, sorted(words.items(), key=lambda kv: -kv[1])[:5]
