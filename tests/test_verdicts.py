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
