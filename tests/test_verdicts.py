"""The Checking-the-source box: validation, and both of its renderings."""
import pytest

from andrea_edu.figures import verdicts


def test_box_renders_rows_in_markdown_and_html():
    b = verdicts.box([("one call instead of 12", "36 per-head calls vs 3", "does not hold"),
                      ("a | pipe", "x", "holds with a caveat")])
    md = b.markdown()
    assert md.startswith("```{andrea-verdict}")
    assert "| one call instead of 12 | 36 per-head calls vs 3 | ❌ does not hold |" in md
    assert "a \\| pipe" in md  # a pipe in a claim must not split the table row
    bundle = b._repr_mimebundle_()
    assert set(bundle) == {"text/markdown", "text/html", "text/plain"}
    assert "<td>36 per-head calls vs 3</td>" in bundle["text/html"]


@pytest.mark.parametrize("bad", ["maybe", "Holds", ""])
def test_unknown_verdict_is_refused_with_the_allowed_values(bad):
    with pytest.raises(ValueError, match="holds with a caveat"):
        verdicts.box([("claim", "measured", bad)])


def test_empty_box_and_empty_fields_are_refused():
    with pytest.raises(ValueError, match="at least one"):
        verdicts.box([])
    with pytest.raises(ValueError, match="measured must be a non-empty string"):
        verdicts.box([("claim", "  ", "holds")])


def test_not_yet_measured_is_a_verdict_and_counts_are_by_value():
    b = verdicts.box([("tensor cores reach peak", "no GPU file yet", verdicts.NOT_MEASURED),
                      ("one call", "3 calls", "holds")])
    assert "| tensor cores reach peak | no GPU file yet | ⏳ not yet measured |" in b.markdown()
    assert verdicts.count(r.verdict for r in b.rows) == {
        "holds": 1, "holds with a caveat": 0, "does not hold": 0, "not yet measured": 1}


def test_the_book_extension_counts_the_same_verdicts():
    import sys

    from book_toc import REPO

    sys.path.insert(0, str(REPO / "book" / "_ext"))
    try:
        import andrea_verdicts
    finally:
        sys.path.pop(0)
    assert andrea_verdicts.VERDICTS == verdicts.VERDICTS
    line = andrea_verdicts.count_line([{"rows": [{"verdict": "holds"}, {"verdict": "holds"}]},
                                       {"rows": [{"verdict": "not yet measured"}]}])
    assert line.startswith("3 verdicts in 2 boxes: ✅ 2 holds,") and "⏳ 1 not yet measured" in line
