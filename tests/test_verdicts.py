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
        "holds": 1, "holds with a caveat": 0, "does not hold": 0, "not observed here": 0,
        "not yet measured": 1}


def _extension():
    import sys

    from book_toc import REPO

    sys.path.insert(0, str(REPO / "book" / "_ext"))
    try:
        import andrea_verdicts
    finally:
        sys.path.pop(0)
    return andrea_verdicts


def test_the_book_extension_counts_the_same_verdicts():
    ext = _extension()
    assert ext.VERDICTS == verdicts.VERDICTS
    line = ext.count_line([{"docname": "a", "rows": [
        {"claim": "x", "measured": "m", "verdict": "holds"},
        {"claim": "y", "measured": "m", "verdict": "holds"}]},
        {"docname": "b", "rows": [{"claim": "z", "measured": "m", "verdict": "not yet measured"}]}])
    assert line.startswith("3 source claims (3 verdicts in 2 boxes), combined: ✅ 2 holds,")
    assert "⏳ 1 not yet measured" in line


# ---------------------------------------------------------------- one claim, one verdict
def _entry(chapter, *rows):
    return {"chapter": chapter, "target": f"t-{chapter}",
            "rows": [dict(claim=c, measured=f"{chapter} measured", verdict=v, key=k)
                     for c, v, k in rows]}


def test_a_toy_that_cannot_decide_yields_to_evidence_that_can():
    """The issue's case: the toy chapter cannot see the pattern heads (not observed here), the
    real-text chapter finds some (holds with a caveat): one claim, listed once, with both
    chapters' evidence and the caveat as its verdict."""
    k = verdicts.TRAINED_TRANSFORMERS_SHOW_HEADS
    claims = verdicts.group_claims([
        _entry("Why heads specialize", ("Trained transformers show heads", "not observed here", k),
               ("No labels train it", "holds", "")),
        _entry("Heads on real text", ("Trained transformers show heads (positional ...)",
                                      "holds with a caveat", k))])
    assert [c["key"] for c in claims] == [k, "no labels train it"]
    c = claims[0]
    assert [e["chapter"] for e in c["evidence"]] == ["Why heads specialize", "Heads on real text"]
    assert c["verdict"] == "holds with a caveat" and "cannot decide" in c["how"]
    assert c["error"] is None


@pytest.mark.parametrize("vs, combined", [
    (["holds"], "holds"), (["holds", "holds"], "holds"),
    (["holds", "holds with a caveat"], "holds with a caveat"),
    (["not observed here", "not yet measured"], "not observed here"),
    (["not yet measured", "not yet measured"], "not yet measured"),
    (["does not hold", "not observed here"], "does not hold"),
    (["holds", "not yet measured"], "holds")])
def test_combine_rule(vs, combined):
    assert verdicts.combine(vs, "k")[0] == combined


def test_two_chapters_contradicting_each_other_fail_unless_reconciled():
    """A "does not hold" beside a "holds" for one claim: the page cannot list both as one claim
    without the author's word, so grouping reports an error (the build warns: -W fails) until
    RECONCILED holds an entry; claims with the same text group even without a key."""
    entries = [_entry("A", ("Heads are free", "holds", "")),
               _entry("B", ("heads  are free", "does not hold", ""))]
    with pytest.raises(verdicts.UnreconciledVerdicts, match="RECONCILED"):
        verdicts.combine(["holds", "does not hold"], "heads are free", reconciled={})
    (c,) = verdicts.group_claims(entries, reconciled={})
    assert c["verdict"] is None and "RECONCILED" in c["error"] and len(c["evidence"]) == 2
    (c,) = verdicts.group_claims(entries, reconciled={
        "heads are free": ("holds with a caveat", "B's model is the one at the claim's scale")})
    assert c["verdict"] == "holds with a caveat" and "reconciled" in c["how"]


def test_both_chapters_checking_trained_transformers_share_one_key():
    """"Trained transformers show ... heads" is checked by "Why heads specialize" (a toy) and by
    "Heads on real text": both rows carry the shared key, so the page lists the claim once, and
    a small model that does not show the heads says "not observed here", never "does not hold"."""
    import json

    from book_toc import REPO

    from andrea_edu.figures import heads_on_real_text as F

    toy = "".join("".join(c["source"]) for c in json.loads(
        (REPO / "book" / "why_heads_specialize.ipynb").read_text())["cells"])
    assert "TRAINED_TRANSFORMERS_SHOW_HEADS)," in toy and "at_toy_scale(" in toy
    for v in verdicts.RECONCILED.values():
        assert v[0] in verdicts.VERDICTS and v[1].strip()

    class _S:
        n_layer, n_head = 2, 8

    row = dict(pattern="previous token", head=(0, 1), ratio=3.0, ablation=0.1, ablation_se=0.01,
               verdict="not found")
    first = F.claim_rows([row], "does not hold", "toy", None, None, "how", _S())[0]
    assert first[2] == verdicts.NOT_OBSERVED
    assert first[3] == verdicts.TRAINED_TRANSFORMERS_SHOW_HEADS
    assert F.claim_rows([row], "holds with a caveat", "toy", None, None, "how", _S())[0][2] \
        == "holds with a caveat"


def test_a_row_may_carry_its_key_and_the_box_passes_it_to_the_page():
    b = verdicts.box([("claim", "measured", "not observed here", "some-key")])
    assert b.rows[0].key == "some-key" and '"key": "some-key"' in b.markdown()
    assert "🔍 not observed here" in b.markdown()


def _sphinx_book(tmp_path, verdict_a, verdict_b):
    """A two-chapter Sphinx project using the book's extension; -> (exit status, warnings)."""
    import io
    import json
    from contextlib import redirect_stderr

    from book_toc import REPO
    from sphinx.cmd.build import build_main

    tmp_path.mkdir(parents=True)
    (tmp_path / "conf.py").write_text(
        f"import sys\nsys.path.insert(0, {str(REPO / 'book' / '_ext')!r})\n"
        "extensions = ['andrea_verdicts']\nroot_doc = 'index'\n")
    (tmp_path / "index.rst").write_text("Book\n====\n\n.. toctree::\n\n   a\n   b\n   verdicts\n")
    for name, verdict in (("a", verdict_a), ("b", verdict_b)):
        rows = [{"claim": f"Pattern heads ({name})", "measured": "m", "verdict": verdict,
                 "key": verdicts.TRAINED_TRANSFORMERS_SHOW_HEADS}]
        (tmp_path / f"{name}.rst").write_text(
            f"Chapter {name}\n=========\n\n.. andrea-verdict::\n\n   "
            + json.dumps({"title": "Checking", "rows": rows}) + "\n")
    (tmp_path / "verdicts.rst").write_text("Verdicts\n========\n\n.. andrea-verdict-list::\n")
    err = io.StringIO()
    with redirect_stderr(err):
        status = build_main(["-W", "-q", "-b", "html", str(tmp_path), str(tmp_path / "_build")])
    return status, err.getvalue()


def test_the_book_build_fails_on_two_chapters_contradicting_one_claim(tmp_path):
    """The verdicts page of a real (tiny) Sphinx build: a toy's 'not observed here' beside a
    'holds with a caveat' builds, one row with the combined caveat; a 'does not hold' beside a
    'holds' fails the -W build, naming RECONCILED."""
    status, _ = _sphinx_book(tmp_path / "ok", "not observed here", "holds with a caveat")
    page = (tmp_path / "ok" / "_build" / "verdicts.html").read_text()
    assert status == 0 and page.count("Pattern heads (a)") == 1 and "1 source claims" in page
    status, err = _sphinx_book(tmp_path / "bad", "holds", "does not hold")
    assert status != 0 and "RECONCILED" in err
