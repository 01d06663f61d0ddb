"""Chapters read as lessons: each opens with what the reader can do after it, and an edited value
outside what a chapter precomputed is refused in one line that names the allowed values."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from lesson_words import LESSONS, MAIN_WORDS_AIM, main_and_appendix_words
from andrea_edu.bench import dispatched

BOOK = Path(__file__).resolve().parents[1] / "book"
CHAPTERS = sorted(BOOK.glob("*.ipynb"))


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_every_chapter_opens_with_what_the_reader_can_do_after_it(path):
    cells = json.loads(path.read_text())["cells"]
    first = "".join(next(c for c in cells if c["cell_type"] == "markdown")["source"])
    title, _, rest = first.partition("\n")
    assert title.startswith("# ")
    opener = rest.strip().split("\n\n")[0]
    assert opener.startswith("**After this chapter you can** "), path.name
    assert 15 <= len(opener.split()) <= 60, f"{path.name}: two or three lines, not {opener!r}"


def test_worklog_refuses_a_head_dim_it_did_not_precompute_in_one_line():
    with pytest.raises(ValueError) as e:
        dispatched.check_head_dim(80)
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith("hs=80") and "32, 64, 96, 128" in msg
    assert all(dispatched.check_head_dim(h) == h for h in dispatched.HEAD_DIMS)
    setup = "".join(json.loads((BOOK / "kernel_worklog.ipynb").read_text())["cells"][2]["source"])
    assert setup.index("dispatched.check_head_dim(hs)") < setup.index("torch.manual_seed")


def _markdown(name: str) -> str:
    cells = json.loads((BOOK / name).read_text())["cells"]
    return "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")


def test_hand_written_definitions_state_the_librarys_values():
    """Prose that does not depend on data is Markdown (issue 30 item 5); where it states a value
    of the code (the detection threshold) or quotes the corpus (its segments' examples), it says
    what the library holds."""
    import re

    from andrea_edu.heads import corpus
    from andrea_edu.heads.toy_calls import DETECT_THRESHOLD

    text = _markdown("why_heads_specialize.ipynb")
    assert f"\\tau = {DETECT_THRESHOLD:g}$" in text and "DETECT_THRESHOLD" in text
    section = text.split("## A corpus", 1)[1].split("\n## ", 1)[0]
    quoted = re.findall(r"`([^`\n]+ [^`\n]+)`", section)  # the code spans with a space
    assert len(quoted) == 3, quoted
    assert all(q in corpus.__doc__ for q in quoted), quoted


@pytest.mark.parametrize("name", ["why_heads_specialize.ipynb", "heads_on_real_text.ipynb",
                                  "kernel_worklog.ipynb"])
def test_long_chapters_keep_their_statistics_in_an_appendix_after_the_exercises(name):
    """One spine (motivation, idea, code, check, exercises), then an appendix (or a collapsed
    Evidence block) for statistics, provenance, the full evidence and path ablations; the heads
    lesson and its optional deep-dive point to each other."""
    heads = [l for l in _markdown(name).splitlines() if l.startswith("## ")]
    assert heads.index("## Checking the source") < heads.index("## Exercises") \
        < next(i for i, h in enumerate(heads) if h.startswith(("## Appendix", "## Evidence")))
    if name.startswith("why_heads"):
        assert "](heads_on_real_text.ipynb)" in _markdown(name)
    if name.startswith("heads_on"):
        assert "](why_heads_specialize.ipynb)" in _markdown(name)


@pytest.mark.parametrize("name", sorted(LESSONS))
def test_a_lessons_own_markdown_before_its_appendix_leaves_room_for_its_outputs(name):
    """The word aim of issue 30 item 5, checked cheaply on the committed notebook: its Markdown
    cells before the appendix stay under the aim (test_notebooks checks the executed page,
    outputs included, against LESSONS)."""
    main, appendix = main_and_appendix_words(json.loads((BOOK / f"{name}.ipynb").read_text()))
    assert main < MAIN_WORDS_AIM and appendix > 0, (main, appendix)


def test_the_word_count_counts_what_a_reader_reads():
    md = {"cell_type": "markdown", "source": "One two three.\n\n$$x = y$$\n\n```py\na b c\n```"}
    shown = {"cell_type": "code", "metadata": {}, "outputs": [
        {"output_type": "display_data", "data": {"text/markdown": "| a | b |", "text/plain": "x"}},
        {"output_type": "stream", "text": "printed words are not counted"}]}
    hidden = {"cell_type": "code", "metadata": {"tags": ["hide-output"]}, "outputs": [
        {"output_type": "display_data", "data": {"text/markdown": "behind a toggle"}}]}
    app = {"cell_type": "markdown", "source": "## Appendix: more\n\nfive"}
    assert main_and_appendix_words({"cells": [md, shown, hidden, app, shown]}) == (5, 5)
