"""The "Checking the source" box that ends every chapter, and the book-wide list of verdicts.

Each row is a claim (of the source text, or a hypothesis of the book), what the code measured,
and a verdict, one of the words of andrea_edu.heads.verdict_words.VERDICTS:
  "holds"                the evidence supports the claim;
  "holds with a caveat"  it supports part of it, or under a condition the row states;
  "does not hold"        the evidence contradicts the claim at the scale the claim speaks of;
  "not observed here"    our evidence cannot decide: the setting is too small for the claim, or
                         the effect is not distinguishable from noise;
  "not yet measured"     the check needs a measurement that does not exist yet (a GPU timing):
                         the chapter computes the verdict from the data it finds, so a box
                         re-rates itself when that measurement lands in book/data/.
`box(rows)` returns a display object:
- in Jupyter or Colab it renders as an HTML table;
- in the book build it renders as MyST Markdown: an admonition, plus an `andrea-verdict`
  directive that the Sphinx extension `book/_ext/andrea_verdicts.py` collects, so the page
  "Every verdict in one place" lists each claim once, with every chapter's evidence and one
  combined verdict (`group_claims`, `combine`).

One claim, one verdict: every claim the book checks is registered once in
andrea_edu/figures/data/claims.json, read by figures/claims.py (the source's claims word for
word, then the book's hypotheses). A row names its claim by `key`, or by a claim text the registry knows; rows of different chapters
with the same claim are one claim. Their verdicts combine by `combine`: verdicts that cannot
decide ("not observed here", "not yet measured") yield to any that can; "holds" and "holds with
a caveat" combine to the caveat; "does not hold" beside a "holds" is a contradiction that only an
entry in RECONCILED (the author's combined verdict and why) resolves, else
`UnreconciledVerdicts` is raised (the book build warns, and -W fails). A row naming no
registered claim fails the build the same way.

One rule for toys: a model the book trains for minutes on a CPU can neither confirm nor refute a
claim about trained transformers (claims.Registered.trained). Its row says what the toy showed,
in its own words and with its own reading, and is shown as unable to decide; only rows at the
claim's scale (scale="trained": a trained model; scale="published": the literature, from
claims.PUBLISHED) decide such a claim.
The measured text is computed by the chapter's cells: this module formats, it never decides.
"""
from __future__ import annotations

import html
import json
from dataclasses import asdict, dataclass

from andrea_edu.figures.claims import (CLAIMS, HYPOTHESIS, PUBLISHED, PUBLISHED_SCALE, SCALES,
                                       TRAINED, TRAINED_TRANSFORMERS_SHOW_HEADS, Registered, fold)
from andrea_edu.heads.verdict_words import (CAVEAT, DECISIVE, DOES_NOT_HOLD, HOLDS, NOT_MEASURED,
                                            NOT_OBSERVED, VERDICTS)

_ICON = {HOLDS: "✅", CAVEAT: "⚠️", DOES_NOT_HOLD: "❌", NOT_OBSERVED: "🔍",
         NOT_MEASURED: "⏳"}
ICONS = _ICON
CANNOT_DECIDE = "cannot decide at this scale"   # how a toy's row on a trained-model claim reads
CANNOT_DECIDE_ICON = "❔"   # its own mark: 🔍 says "looked for, not seen", not "too small to tell"
PUBLISHED_CHAPTER = "Published work"
__all__ = ["TRAINED_TRANSFORMERS_SHOW_HEADS", "REGISTRY", "box", "combine", "group_claims"]

# Contradictions between chapters that the author has reconciled: {key: (verdict, why)}. Empty:
# no two chapters contradict each other today; a new contradiction fails the build until an
# entry here says which evidence speaks at the claim's scale.
RECONCILED: dict[str, tuple[str, str]] = {}


class UnreconciledVerdicts(ValueError):
    """Two chapters give one claim contradicting verdicts and RECONCILED has no entry for it."""


class UnregisteredClaim(ValueError):
    """A row names no registered claim (figures/data/claims.json), by key or by a phrasing."""


def count(verdicts) -> dict[str, int]:
    """How many of each verdict, in the order of VERDICTS (zeros included)."""
    verdicts = list(verdicts)
    unknown = set(verdicts) - set(VERDICTS)
    if unknown:
        raise ValueError(f"unknown verdicts {sorted(unknown)}; allowed: {VERDICTS}")
    return {v: verdicts.count(v) for v in VERDICTS}


@dataclass(frozen=True)
class Claim:
    """One row: the claim, what the code measured (short: the box shows it), the verdict;
    optionally the key of the registered claim it checks (claims.CLAIMS), the scale of its
    evidence ("": the book's own code and models; "trained": a trained transformer at the
    claim's scale) and `detail`, the full reasoning, which only the verdicts page shows (issue
    38 item 4: a chapter's box stays short, the page keeps the reasoning)."""

    claim: str
    measured: str
    verdict: str
    key: str = ""
    scale: str = ""
    detail: str = ""

    def __post_init__(self):
        if self.verdict not in VERDICTS:
            raise ValueError(f"verdict must be one of {VERDICTS}, got {self.verdict!r}")
        if self.scale not in SCALES:
            raise ValueError(f"scale must be one of {SCALES}, got {self.scale!r}")
        for name in ("claim", "measured"):
            if not str(getattr(self, name)).strip():
                raise ValueError(f"{name} must be a non-empty string")


# ---------------------------------------------------------------- the registry
class Registry:
    """The registered claims, found by key or by folded claim text."""

    def __init__(self, claims=CLAIMS):
        self.claims = tuple(claims)
        self.by_key = {r.key: r for r in self.claims}
        self.by_text: dict[str, tuple[str, str]] = {}   # folded text -> (key, scale)
        for r in self.claims:
            for p in (r.text, *r.phrasings):
                text, scale = (p, "") if isinstance(p, str) else p
                self.by_text[fold(text)] = (r.key, scale)

    def find(self, row: dict | Claim) -> tuple[Registered | None, str]:
        """The registered claim a row checks and the scale of its evidence; (None, scale) when
        the row names none. A row's own scale wins over a phrasing's."""
        row = asdict(row) if isinstance(row, Claim) else row
        scale = row.get("scale") or ""
        if row.get("key"):
            return self.by_key.get(row["key"]), scale
        key, phrasing_scale = self.by_text.get(fold(row["claim"]), ("", ""))
        return self.by_key.get(key), scale or phrasing_scale

    def decides(self, row: dict | Claim) -> bool:
        """False for a row whose evidence is below its claim's scale: the book's own (toy)
        models on a claim about trained transformers. Such a row still says what the toy
        showed."""
        reg, scale = self.find(row)
        return not (reg is not None and reg.trained and scale not in (TRAINED, PUBLISHED_SCALE))


REGISTRY = Registry()


def shown_verdict(row: dict | Claim) -> str:
    """The verdict as a box shows it: icon and word, or, for a toy's row on a claim about
    trained transformers, that it cannot decide, with the toy's own reading."""
    v = row.verdict if isinstance(row, Claim) else row["verdict"]
    if REGISTRY.decides(row):
        return f"{_ICON[v]} {v}"
    return f"{CANNOT_DECIDE_ICON} {CANNOT_DECIDE} (the toy: {v})"


def shown_claim(row: dict | Claim) -> str:
    """The claim as a box shows it: a hypothesis of the book (claims.HYPOTHESIS) says so, so that
    no reader takes it for the source's."""
    claim = row.claim if isinstance(row, Claim) else row["claim"]
    reg, _ = REGISTRY.find(row)
    if reg is not None and reg.kind == HYPOTHESIS:
        return f"{claim} (the book's hypothesis, not the source's)"
    return claim


def _cell(text: str) -> str:
    """A Markdown table cell: no pipes or newlines may break the row."""
    return str(text).replace("|", "\\|").replace("\n", " ")


class VerdictBox:
    """Display object with an HTML form (notebooks) and a MyST form (the book)."""

    def __init__(self, rows: list[Claim], title: str):
        self.rows = rows
        self.title = title

    def markdown(self) -> str:
        payload = json.dumps({"title": self.title, "rows": [asdict(r) for r in self.rows]})
        table = ["| Claim | What the code measured | Verdict |", "|---|---|---|"]
        table += [f"| {_cell(shown_claim(r))} | {_cell(r.measured)} | {_cell(shown_verdict(r))} |"
                  for r in self.rows]
        return "\n".join(
            ["```{andrea-verdict}", payload, "```", "", f":::{{admonition}} {self.title}",
             ":class: tip checking-the-source", *table, ":::"]
        )

    def html(self) -> str:
        rows = "".join(
            f"<tr><td>{html.escape(shown_claim(r))}</td><td>{html.escape(r.measured)}</td>"
            f"<td>{html.escape(shown_verdict(r))}</td></tr>"
            for r in self.rows
        )
        return (
            f'<div class="checking-the-source"><b>{html.escape(self.title)}</b><table>'
            "<tr><th>Claim</th><th>What the code measured</th><th>Verdict</th></tr>"
            f"{rows}</table></div>"
        )

    def _repr_mimebundle_(self, include=None, exclude=None):
        return {"text/markdown": self.markdown(), "text/html": self.html(), "text/plain": self.text()}

    def text(self) -> str:
        return "\n".join(f"- {shown_claim(r)}: {r.measured} -> {shown_verdict(r)}" for r in self.rows)


def box(rows, title: str = "Checking the source") -> VerdictBox:
    """The chapter's closing box. `rows`: Claim objects or (claim, measured, verdict[, key[,
    scale[, detail]]]) tuples."""
    if not rows:
        raise ValueError("rows must hold at least one (claim, measured, verdict)")
    claims = [r if isinstance(r, Claim) else Claim(*r) for r in rows]
    return VerdictBox(claims, title)


# ---------------------------------------------------------------- one claim, one verdict
def claim_key(row: dict, registry: Registry = REGISTRY) -> str:
    """The identity of a row's claim: its registered key, else its own key, else its claim text
    (folded)."""
    reg, _ = registry.find(row)
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
            f"claim {key!r}: chapters say {sorted(kinds)}; add it to verdicts.RECONCILED "
            "(verdict, why)")
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


def group_claims(entries, reconciled: dict | None = None, published: dict | None = None,
                 registry=None) -> list[dict]:
    """entries: [{"chapter", "target", "rows": [row dicts]}] in reading order (one per box) ->
    one dict per claim: the registered claims first, in the registry's order (each listed even
    when no chapter checks it), then any unregistered ones in order of appearance. Each:
    {key, claim, kind, section, reading, evidence: [{chapter, target, claim, measured, detail, verdict,
    decides}], verdict, how, error}. `published` (default claims.PUBLISHED) adds the
    literature's findings as evidence. error: the UnreconciledVerdicts or UnregisteredClaim
    message (verdict is then None), or "no evidence" for a registered claim nobody checks."""
    published = PUBLISHED if published is None else published
    reg_ = REGISTRY if registry is None else Registry(registry)
    claims: dict[str, dict] = {
        r.key: {"key": r.key, "claim": r.text, "kind": r.kind, "section": r.section,
                "reading": r.reading, "evidence": [], "error": None} for r in reg_.claims}
    for entry in entries:
        for row in entry["rows"]:
            reg, _ = reg_.find(row)
            k = claim_key(row, reg_)
            c = claims.setdefault(k, {
                "key": k, "claim": row["claim"], "kind": "unregistered", "section": "",
                "reading": "", "evidence": [], "error": UnregisteredClaim(
                    f"the row {row['claim']!r} ({entry.get('chapter', '')}) names no claim "
                    "of the registry: pass key= or add a phrasing to figures/data/claims.json")
                if reg is None else None})
            c["evidence"].append({"chapter": entry.get("chapter", ""),
                                  "target": entry.get("target", ""), "claim": row["claim"],
                                  "measured": row["measured"], "detail": row.get("detail", ""),
                                  "verdict": row["verdict"],
                                  "decides": reg_.decides(row)})
    for key, found in published.items():
        if key in claims:
            claims[key]["evidence"] += [
                {"chapter": PUBLISHED_CHAPTER, "target": "", "claim": claims[key]["claim"],
                 "measured": m, "verdict": v, "decides": True} for v, m in found]
    for c in claims.values():
        if c["error"] is not None:
            c["verdict"], c["how"], c["error"] = None, "unregistered", str(c["error"])
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
