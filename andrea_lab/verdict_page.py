"""One claim, one verdict: every chapter's "Checking the source" rows combined for the page
"Every verdict in one place" (book/verdicts.md, built by the Sphinx extension
book/_ext/andrea_verdicts.py). A chapter shows its own box with andrea_edu.figures.verdicts.box;
this module only reads what the boxes recorded.

Rows of different chapters that name one registered claim (andrea_edu/figures/data/claims.json,
by key or by a phrasing the registry knows: andrea_edu.figures.verdicts.find) are one claim.
Their verdicts combine by `combine`: verdicts that cannot decide ("not observed here", "not yet
measured") yield to any that can; "holds" and "holds with a caveat" combine to the caveat; "does
not hold" beside a "holds" is a contradiction that only an entry in RECONCILED (the author's
combined verdict and why) resolves, else `UnreconciledVerdicts` is raised (the book build warns,
and -W fails). A row naming no registered claim fails the build the same way.

A toy's row on a claim about trained transformers cannot decide it
(andrea_edu.figures.verdicts.decides): only rows at the claim's scale decide (scale="trained": a
trained model; the literature's findings, claims.PUBLISHED, listed as "Published work").
"""
from __future__ import annotations

from andrea_edu.figures.claims import CLAIMS, PUBLISHED, fold
from andrea_edu.figures.verdicts import decides, find
from andrea_edu.heads.verdict_words import (CAVEAT, DECISIVE, DOES_NOT_HOLD, NOT_MEASURED,
                                            NOT_OBSERVED, VERDICTS)

PUBLISHED_CHAPTER = "Published work"

# Contradictions between chapters that the author has reconciled: {key: (verdict, why)}. Empty:
# no two chapters contradict each other today; a new contradiction fails the build until an
# entry here says which evidence speaks at the claim's scale.
RECONCILED: dict[str, tuple[str, str]] = {}


class UnreconciledVerdicts(ValueError):
    """Two chapters give one claim contradicting verdicts and RECONCILED has no entry for it."""


def count(verdicts) -> dict[str, int]:
    """How many of each verdict, in the order of VERDICTS (zeros included)."""
    verdicts = list(verdicts)
    unknown = set(verdicts) - set(VERDICTS)
    if unknown:
        raise ValueError(f"unknown verdicts {sorted(unknown)}; allowed: {VERDICTS}")
    return {v: verdicts.count(v) for v in VERDICTS}


def claim_key(row: dict) -> str:
    """The identity of a row's claim: its registered key, else its own key, else its claim text
    (folded)."""
    reg, _ = find(row)
    return reg.key if reg is not None else (row.get("key") or fold(row["claim"]))


def combine(verdicts, key: str = "", reconciled: dict | None = None,
            deciding=None) -> tuple[str, str]:
    """One verdict for one claim from every row's verdict: (verdict, how it was reached).
    `deciding`: for each verdict, whether its row can decide (False: a toy on a claim about
    trained transformers; default all True). Raises UnreconciledVerdicts when "does not hold"
    meets a "holds" (with or without a caveat) among the deciding rows and `reconciled`
    (default RECONCILED) has no entry for `key`."""
    vs = list(verdicts)
    count(vs)                                              # refuses unknown values
    reconciled = RECONCILED if reconciled is None else reconciled
    if not vs:
        raise ValueError("combine needs at least one verdict")
    dec = [True] * len(vs) if deciding is None else list(deciding)
    if len(dec) != len(vs):
        raise ValueError(f"deciding has {len(dec)} entries for {len(vs)} verdicts")
    toys = sum(not d for d in dec)
    decisive = [v for v, d in zip(vs, dec) if d and v in DECISIVE]
    if not decisive:
        if toys:
            return NOT_OBSERVED, "toys only: cannot decide"
        if len(set(vs)) == 1:
            return vs[0], "every chapter agrees" if len(vs) > 1 else "one chapter"
        v = NOT_OBSERVED if NOT_OBSERVED in vs else NOT_MEASURED
        return v, "no chapter's evidence can decide"
    kinds = set(decisive)
    if DOES_NOT_HOLD in kinds and len(kinds) > 1:
        if key in reconciled:
            v, why = reconciled[key]
            return v, f"reconciled: {why}"
        raise UnreconciledVerdicts(
            f"claim {key!r}: chapters say {sorted(kinds)}; add it to "
            "andrea_lab.verdict_page.RECONCILED (verdict, why)")
    v = CAVEAT if CAVEAT in kinds else decisive[0]
    if len(vs) == 1:
        return v, "one chapter"
    if len(decisive) == len(vs) and len(kinds) == 1:
        return v, "all the evidence agrees"
    how = "deciding evidence agrees" + (" up to a caveat" if len(kinds) > 1 else "")
    left = len(vs) - len(decisive)
    if left:
        how += f"; {left} cannot decide" + (" (toys)" if toys else "")
    return v, how


def group_claims(entries, reconciled: dict | None = None,
                 published: dict | None = None) -> list[dict]:
    """entries: [{"chapter", "target", "rows": [row dicts]}] in reading order (one per box) ->
    one dict per claim: the registered claims first, in the registry's order (each listed even
    when no chapter checks it), then any unregistered ones in order of appearance. Each:
    {key, claim, kind, section, reading, evidence: [{chapter, target, claim, measured, detail,
    verdict, decides}], verdict, how, error}. `published` (default claims.PUBLISHED) adds the
    literature's findings as evidence. error: the UnreconciledVerdicts message, or for a row
    naming no registered claim one line saying so (verdict is then None), or "no evidence" for
    a registered claim nobody checks."""
    published = PUBLISHED if published is None else published
    claims: dict[str, dict] = {
        r.key: {"key": r.key, "claim": r.text, "kind": r.kind, "section": r.section,
                "reading": r.reading, "evidence": [], "error": None} for r in CLAIMS}
    for entry in entries:
        for row in entry["rows"]:
            reg, _ = find(row)
            k = claim_key(row)
            c = claims.setdefault(k, {
                "key": k, "claim": row["claim"], "kind": "unregistered", "section": "",
                "reading": "", "evidence": [], "error":
                f"the row {row['claim']!r} ({entry.get('chapter', '')}) names no claim of the "
                "registry: pass key= or add a phrasing to figures/data/claims.json"
                if reg is None else None})
            c["evidence"].append({"chapter": entry.get("chapter", ""),
                                  "target": entry.get("target", ""), "claim": row["claim"],
                                  "measured": row["measured"], "detail": row.get("detail", ""),
                                  "verdict": row["verdict"], "decides": decides(row)})
    for key, found in published.items():
        if key in claims:
            claims[key]["evidence"] += [
                {"chapter": PUBLISHED_CHAPTER, "target": "", "claim": claims[key]["claim"],
                 "measured": m, "verdict": v, "decides": True} for v, m in found]
    for c in claims.values():
        if c["error"] is not None:
            c["verdict"], c["how"] = None, "unregistered"
            continue
        if not c["evidence"]:
            c["verdict"], c["how"], c["error"] = None, "no evidence", "no evidence"
            continue
        try:
            c["verdict"], c["how"] = combine([e["verdict"] for e in c["evidence"]],
                                             c["key"], reconciled,
                                             [e["decides"] for e in c["evidence"]])
        except UnreconciledVerdicts as e:
            c["verdict"], c["how"], c["error"] = None, "unreconciled", str(e)
    return list(claims.values())
