"""The Checking-the-source box (andrea_edu.figures.verdicts), the claim registry, the rule that
combines verdicts (andrea_lab.verdict_page: one claim, one verdict; toys cannot decide claims
about trained transformers), and the verdicts page."""
import json
import re

import pytest

from andrea_edu.figures import claims as C
from andrea_edu.figures import verdicts
from andrea_lab import verdict_page as vp


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


def test_empty_box_empty_fields_and_unknown_scales_are_refused():
    with pytest.raises(ValueError, match="at least one"):
        verdicts.box([])
    with pytest.raises(ValueError, match="measured must be a non-empty string"):
        verdicts.box([("claim", "  ", "holds")])
    with pytest.raises(ValueError, match="scale must be one of"):
        verdicts.box([("claim", "m", "holds", "", "big")])


def test_a_rows_detail_goes_to_the_verdicts_page_not_the_box():
    b = verdicts.box([("one call", "3 calls", "holds", "", "", "the full reasoning, long")])
    assert "the full reasoning" not in b.markdown().split("```")[-1]   # the table a reader sees
    assert "the full reasoning" not in b.html()
    assert '"detail": "the full reasoning, long"' in b.markdown()      # the page's payload
    grouped = vp.group_claims([{"chapter": "A", "target": "t", "rows": [
        {"claim": "x", "measured": "m", "verdict": "holds", "key": "one-blas-call",
         "detail": "why"}]}])
    assert next(c for c in grouped if c["key"] == "one-blas-call")["evidence"][0]["detail"] == "why"


def test_not_yet_measured_is_a_verdict_and_counts_are_by_value():
    b = verdicts.box([("tensor cores reach peak", "no GPU file yet", verdicts.NOT_MEASURED),
                      ("one call", "3 calls", "holds")])
    assert "| tensor cores reach peak | no GPU file yet | ⏳ not yet measured |" in b.markdown()
    assert vp.count(r.verdict for r in b.rows) == {
        "holds": 1, "holds with a caveat": 0, "does not hold": 0, "not observed here": 0,
        "not yet measured": 1}


# ---------------------------------------------------------------- the registry
def test_the_registry_has_one_entry_per_claim_and_one_claim_per_wording():
    keys = [r.key for r in C.CLAIMS]
    assert len(keys) == len(set(keys))
    seen: dict[str, str] = {}
    for r in C.CLAIMS:
        assert r.kind in (C.SOURCE, C.HYPOTHESIS) and r.text.strip() and r.section.strip()
        for p in (r.text, *r.phrasings):
            text = p if isinstance(p, str) else p[0]
            folded = verdicts.fold(text)
            assert seen.setdefault(folded, r.key) == r.key, f"{text!r} names two claims"
    # the source's claims come first, then the hypotheses
    kinds = [r.kind for r in C.CLAIMS]
    assert kinds == sorted(kinds, key=(C.SOURCE, C.HYPOTHESIS).index)


def test_the_registry_is_read_from_its_data_file_and_follows_the_source():
    from book_toc import REPO

    assert (REPO / "andrea_edu" / "figures" / C.DATA).is_file()
    assert C.load() == (C.CLAIMS, C.PUBLISHED) == vp.check_registry()  # the shipped file passes
    sections = json.loads((REPO / "andrea_edu" / "figures" / C.DATA).read_text())["sections"]
    source = [sections.index(r.section) for r in C.CLAIMS if r.kind == C.SOURCE]
    assert source == sorted(source)
    assert sum(r.trained for r in C.CLAIMS) == 6


def _file(**change):
    """The shipped claims file with one change applied to its first claim (or top level)."""
    from book_toc import REPO

    d = json.loads((REPO / "andrea_edu" / "figures" / C.DATA).read_text())
    top = change.pop("top", {})
    d.update(top)
    d["claims"][0].update(change)
    return json.dumps(d)


@pytest.mark.parametrize("change,message", [
    ({"kind": "rumour"}, r"kind must be one of \('source', 'hypothesis'\)"),
    ({"section": "Nowhere"}, "section must be one of"),
    ({"text": "  "}, "text must be a non-empty string"),
    ({"key": "Per Head"}, "lower-case-hyphenated"),
    ({"key": "quarter"}, "lower-case-hyphenated"),                   # a key used twice
    ({"trained": 1}, "trained must be true or false"),
    ({"phrasings": [["x", "huge"]]}, "scale must be one of"),
    ({"phrasings": ["No information is lost in the dimensions"]}, "already names claim"),
    ({"section": "Reading the pipeline"}, "source's order"),
    ({"colour": "red"}, "unknown fields"),
    ({"reading": ""}, "reading must be a non-empty string"),
    ({"reading": 3}, "reading must be a non-empty string"),
    ({"top": {"published": {"quarter": [{"verdict": "holds", "finding": "f"}]}}},
     "published: a key must be one of"),
    ({"top": {"published": {"niche": [{"verdict": "sure", "finding": "f"}]}}},
     r"verdict must be one of \('holds'"),
    ({"top": {"published": {"niche": [{"verdict": "holds", "finding": ""}]}}},
     "finding must be a non-empty string"),
    ({"top": {"published": {"niche": []}}}, "must be a non-empty list"),
    ({"top": {"published": {"niche": ["holds"]}}}, "must be a non-empty list"),
    ({"top": {"published": ["niche"]}}, "published must be an object"),
    ({"top": {"sections": "Parameter count"}}, "sections must be a list"),
])
def test_a_bad_claims_file_is_refused_in_one_line_naming_the_entry(change, message):
    with pytest.raises(ValueError, match=message) as e:
        vp.check_registry(_file(**change))
    assert "\n" not in str(e.value) and C.DATA in str(e.value)


def test_published_findings_are_for_registered_claims_and_cited_on_the_page():
    from book_toc import REPO

    page = (REPO / "book" / "verdicts.md").read_text()
    cited = page[page.index("## Published work cited"):]
    by_key = {r.key: r for r in C.CLAIMS}
    for key, found in C.PUBLISHED.items():
        assert key in by_key, key
        for verdict, text in found:
            assert verdict in verdicts.VERDICTS and text.strip()
            for author, year in re.findall(r"([A-Z][a-z]+) et al\. (\d{4})", text):
                assert re.search(rf"{author}, [A-Z].*\({year}\)", cited), (author, year)


def test_a_row_finds_its_claim_by_key_or_by_wording():
    def key_of(row):
        reg, _ = verdicts.find(row)
        return reg.key if reg is not None else None

    find = verdicts.find
    # the double verdicts of issue 30: two chapters' wordings, one claim each
    for a, b, key in [
        ("Concat undoes the split; the total feature dimension returns to d_model",
         "Concat undoes the split: the total feature dimension returns to d_model, no "
         "information is lost", "concat-undoes-split"),
        ("A single attention CUDA kernel runs over all heads in parallel",
         "One attention kernel handles all heads in parallel", "one-kernel-all-heads"),
        ("Each thread block handles one (batch, head) pair",
         "Each thread block handles one (batch, head) pair (v3)", "block-per-pair")]:
        assert key_of({"claim": a}) == key_of({"claim": b}) == key
    assert key_of({"claim": "anything", "key": "niche"}) == "niche"
    assert find({"claim": "Concat undoes the split, more or less"})[0] is None
    gpt2 = ("The same, in a transformer trained at scale on natural text (GPT-2 small, "
            "ANDREA-120M's shape)")
    assert find({"claim": gpt2}) == (C.CLAIMS[[r.key for r in C.CLAIMS].index(
        C.TRAINED_TRANSFORMERS_SHOW_HEADS)], C.TRAINED)


# ---------------------------------------------------------------- combining
def _entry(chapter, *rows):
    return {"chapter": chapter, "target": f"t-{chapter}",
            "rows": [dict(claim=c, measured=f"{chapter} measured", verdict=v, key=k,
                          scale=s) for c, v, k, s in rows]}


def _only(claims, key):
    return next(c for c in claims if c["key"] == key)


@pytest.mark.parametrize("vs, combined", [
    (["holds"], "holds"), (["holds", "holds"], "holds"),
    (["holds", "holds with a caveat"], "holds with a caveat"),
    (["not observed here", "not yet measured"], "not observed here"),
    (["not yet measured", "not yet measured"], "not yet measured"),
    (["does not hold", "not observed here"], "does not hold"),
    (["holds", "not yet measured"], "holds")])
def test_combine_rule(vs, combined):
    assert vp.combine(vs, "k")[0] == combined


def test_a_toy_cannot_decide_a_claim_about_trained_transformers():
    """The toy's rows say what the toy showed, but only evidence at the claim's scale decides:
    a toy's "holds" or "does not hold" never becomes the claim's verdict."""
    k = C.TRAINED_TRANSFORMERS_SHOW_HEADS
    toy_says_yes = _entry("Toy", ("heads", "holds", k, ""))
    toy_says_no = _entry("Toy", ("heads", "does not hold", k, ""))
    trained = _entry("Trained", ("heads", "holds", k, "trained"))
    alone = _only(vp.group_claims([toy_says_yes], published={}), k)
    assert alone["verdict"] == verdicts.NOT_OBSERVED and "cannot" in alone["how"]
    assert alone["evidence"][0]["decides"] is False
    with_paper = _only(vp.group_claims([toy_says_yes]), k)   # the literature decides
    assert with_paper["verdict"] == C.PUBLISHED[k][0][0]
    assert with_paper["evidence"][-1]["chapter"] == vp.PUBLISHED_CHAPTER
    both = _only(vp.group_claims([toy_says_no, trained], published={}), k)
    assert both["verdict"] == "holds" and both["error"] is None   # no contradiction to settle
    # a claim about the code itself is decided by the book's own evidence
    own = _only(vp.group_claims([_entry("A", ("x", "holds", "one-blas-call", ""))]),
                "one-blas-call")
    assert own["verdict"] == "holds" and own["evidence"][0]["decides"]
    # in the chapter's box the toy's row reads as unable to decide, with its own reading
    md = verdicts.box([("heads", "m", "holds", k)]).markdown()
    assert f"❔ {verdicts.CANNOT_DECIDE} (the toy: holds)" in md and "✅" not in md
    assert "🔍" not in md   # one mark, one meaning (issue 38 item 7)


def test_two_chapters_contradicting_each_other_fail_unless_reconciled():
    entries = [_entry("A", ("Concat undoes the split; the total feature dimension returns to "
                            "d_model", "holds", "", "")),
               _entry("B", ("Concat undoes the split: the total feature dimension returns to "
                            "d_model, no information is lost", "does not hold", "", ""))]
    with pytest.raises(vp.UnreconciledVerdicts, match="RECONCILED"):
        vp.combine(["holds", "does not hold"], "concat-undoes-split", reconciled={})
    c = _only(vp.group_claims(entries, reconciled={}), "concat-undoes-split")
    assert c["verdict"] is None and "RECONCILED" in c["error"] and len(c["evidence"]) == 2
    c = _only(vp.group_claims(entries, reconciled={
        "concat-undoes-split": ("holds", "B split with a plain reshape")}), "concat-undoes-split")
    assert c["verdict"] == "holds" and "reconciled" in c["how"]


def test_grouping_lists_every_registered_claim_once_and_flags_strays():
    entries = [_entry("A", ("The fused matmul issues one BLAS call instead of 12", "holds", "",
                            ""), ("Concat undoes the split, more or less", "holds", "", ""))]
    grouped = vp.group_claims(entries)
    keys = [c["key"] for c in grouped]
    assert keys[:len(C.CLAIMS)] == [r.key for r in C.CLAIMS] and len(set(keys)) == len(keys)
    assert _only(grouped, "one-blas-call")["verdict"] == "holds"
    stray = grouped[-1]
    assert stray["kind"] == "unregistered" and "claims.json" in stray["error"]
    assert _only(grouped, "quarter")["error"] == "no evidence"


def test_the_page_counts_the_combined_verdicts_of_each_kind():
    ext = _extension()
    grouped = [c for c in vp.group_claims([
        _entry("a", ("The fused matmul issues one BLAS call instead of 12", "holds", "", ""),
               ("x", "holds with a caveat", "quarter", "")),
        _entry("b", ("y", "does not hold", "quarter", ""),
               ("Splitting d_model into heads costs no parameters", "holds", "", ""))],
        reconciled={}, published={}) if c["error"] != "no evidence"]
    assert ext.count_line(grouped, "source").startswith(
        "2 claims of the source (3 rows of evidence), combined: ✅ 1 holds,")
    assert "1 unreconciled" in ext.count_line(grouped, "source")
    assert ext.count_line(grouped, "hypothesis").startswith(
        "1 hypothesis of the book (1 row of evidence), combined: ✅ 1 holds,")


def test_heads_on_real_text_rows_share_the_trained_claim():
    """"Trained transformers show ... heads" is checked by the toy, the small model on real
    text and GPT-2: all land on one claim; the small model's rows cannot decide it, GPT-2's can."""
    import numpy as np

    from andrea_edu.figures import heads_on_real_text as F

    row = dict(pattern="previous token", head=(0, 1), ratio=3.0, verdict="not found")
    ids = {"span": (np.full((2, 4), 0.01), 0.01, None)}
    rep = {"induction": np.full((2, 4), 0.012), "uniform": 0.01, "first_loss": 3.0,
           "second_loss": 2.9}
    gpt2_scores = np.full((3, 2, 4), 0.5)
    small, ident, gpt2 = (verdicts.Claim(*r) for r in F.source_rows(
        [row], "holds", ids, rep, 0.005, (gpt2_scores, np.array([0.1, 0.1, 0.1]), "holds")))
    assert "5.0x" in gpt2.measured and gpt2.verdict == "holds"
    for r in (small, ident, gpt2):
        assert vp.claim_key(r.__dict__) == C.TRAINED_TRANSFORMERS_SHOW_HEADS
    assert not verdicts.decides(small) and not verdicts.decides(ident)
    assert verdicts.decides(gpt2)


# ---------------------------------------------------------------- the page, in a real build
def _extension():
    import sys

    from book_toc import REPO

    sys.path.insert(0, str(REPO / "book" / "_ext"))
    try:
        import andrea_verdicts
    finally:
        sys.path.pop(0)
    return andrea_verdicts


def _sphinx_book(tmp_path, rows_a, rows_b):
    """A two-chapter Sphinx project using the book's extension; -> (exit status, warnings)."""
    import io
    import json
    from contextlib import redirect_stderr

    from book_toc import REPO
    from sphinx.cmd.build import build_main

    tmp_path.mkdir(parents=True)
    (tmp_path / "conf.py").write_text(
        f"import sys\nsys.path.insert(0, {str(REPO / 'book' / '_ext')!r})\n"
        "extensions = ['andrea_verdicts']\nroot_doc = 'index'\n"
        "andrea_verdicts_require_all = False\n")
    (tmp_path / "index.rst").write_text("Book\n====\n\n.. toctree::\n\n   a\n   b\n   verdicts\n")
    for name, rows in (("a", rows_a), ("b", rows_b)):
        (tmp_path / f"{name}.rst").write_text(
            f"Chapter {name}\n=========\n\n.. andrea-verdict::\n\n   "
            + json.dumps({"title": "Checking", "rows": rows}) + "\n")
    (tmp_path / "verdicts.rst").write_text(
        "Verdicts\n========\n\n.. andrea-verdict-list::\n   :kind: source\n\n"
        ".. andrea-verdict-list::\n   :kind: hypothesis\n")
    err = io.StringIO()
    with redirect_stderr(err):
        status = build_main(["-W", "-q", "-b", "html", str(tmp_path), str(tmp_path / "_build")])
    return status, err.getvalue()


def _row(claim, verdict, key="", scale="", detail=""):
    return {"claim": claim, "measured": "m", "verdict": verdict, "key": key, "scale": scale,
            "detail": detail}


def test_the_book_build_lists_each_claim_once_and_fails_on_what_it_cannot_combine(tmp_path):
    """A real (tiny) Sphinx build: two chapters' wordings of one claim give one row with one
    combined verdict, a hypothesis goes to its own table; a contradiction, or a row naming no
    registered claim, fails the -W build, saying why."""
    k = C.TRAINED_TRANSFORMERS_SHOW_HEADS
    status, err = _sphinx_book(
        tmp_path / "ok",
        [_row("Concat undoes the split; the total feature dimension returns to d_model",
              "holds"), _row("Pattern heads (a)", "holds", k),
         _row("Sorted through W_O (a toy)", "holds", "sorted-through-wo",
              detail="the reasoning only this page shows")],
        [_row("Concat undoes the split: the total feature dimension returns to d_model, no "
              "information is lost", "holds with a caveat"),
         _row("Splitting d_model into heads costs no parameters", "holds")])
    page = (tmp_path / "ok" / "_build" / "verdicts.html").read_text()
    assert status == 0, err
    assert page.count("Concat undoes the split. The total feature dimension") == 1
    assert "3 claims of the source" in page and "1 hypothesis of the book" in page
    assert verdicts.CANNOT_DECIDE in page and vp.PUBLISHED_CHAPTER in page
    # one mark, one meaning (issue 38 item 7): a toy's row and a claim only toys checked read ❔,
    # never 🔍 ("not observed here")
    assert f"❔ {verdicts.CANNOT_DECIDE} (the toy: holds): m. the reasoning only this page shows" in page
    # a claim's static reading (claims.json) shows once, under its evidence, not in a chapter's box
    reading = next(r.reading for r in C.CLAIMS if r.key == "concat-undoes-split")
    assert reading and page.count(reading[:40]) == 1   # (Sphinx curls the quotes further on)
    listed = {"concat-undoes-split", k, "sorted-through-wo", "split-costs-no-parameters"}
    assert page.count("How to read it:") == sum(1 for r in C.CLAIMS if r.key in listed and r.reading)
    assert f"🔍 {verdicts.CANNOT_DECIDE}" not in page
    assert f"<strong>❔ {verdicts.CANNOT_DECIDE}</strong>" in page
    assert f"❔ 1 {verdicts.CANNOT_DECIDE}" in page and "🔍 0 not observed here" in page
    status, err = _sphinx_book(tmp_path / "bad", [_row("x", "holds", "quarter")],
                               [_row("y", "does not hold", "quarter")])
    assert status != 0 and "RECONCILED" in err
    status, err = _sphinx_book(tmp_path / "stray", [_row("Concat undoes it, sort of", "holds")],
                               [_row("x", "holds", "quarter")])
    assert status != 0 and "names no claim" in err
