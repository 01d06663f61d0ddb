"""Chapters read as lessons: each opens with what the reader can do after it, and an edited value
outside what a chapter precomputed is refused in one line that names the allowed values."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

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
    from andrea_edu.figures import kernel_worklog as figs

    with pytest.raises(ValueError) as e:
        figs.check_head_dim(80)
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith("hs=80") and "32, 64, 96, 128" in msg
    assert all(figs.check_head_dim(h) == h for h in figs.HEAD_DIMS)
    setup = "".join(json.loads((BOOK / "kernel_worklog.ipynb").read_text())["cells"][2]["source"])
    assert setup.index("figs.check_head_dim(hs)") < setup.index("torch.manual_seed")


def _markdown(name: str) -> str:
    cells = json.loads((BOOK / name).read_text())["cells"]
    return "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")


def test_hand_written_definitions_state_the_librarys_values():
    """Prose that does not depend on data is Markdown (issue 30 item 5); where it states a value
    of the code (the detection threshold) or quotes the corpus (its segments' examples), it says
    what the library holds."""
    import re

    from andrea_edu.heads import corpus
    from andrea_edu.heads.measures import DETECT_THRESHOLD

    text = _markdown("why_heads_specialize.ipynb")
    assert f"\\tau = {DETECT_THRESHOLD:g}$" in text and "DETECT_THRESHOLD" in text
    section = text.split("## A corpus", 1)[1].split("\n## ", 1)[0]
    quoted = re.findall(r"`([^`\n]+ [^`\n]+)`", section)  # the code spans with a space
    assert len(quoted) == 3, quoted
    assert all(q in corpus.__doc__ for q in quoted), quoted


@pytest.mark.parametrize("name", ["why_heads_specialize.ipynb", "heads_on_real_text.ipynb"])
def test_long_chapters_keep_their_statistics_in_an_appendix_after_the_exercises(name):
    """One spine (motivation, idea, code, check, exercises), then an appendix for statistics,
    provenance and path ablations; the chapter points to the trained model's chapter."""
    heads = [l for l in _markdown(name).splitlines() if l.startswith("## ")]
    assert heads.index("## Checking the source") < heads.index("## Exercises") \
        < next(i for i, h in enumerate(heads) if h.startswith("## Appendix"))
    assert "](heads_in_trained_model.ipynb)" in _markdown(name)
