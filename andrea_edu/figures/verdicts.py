"""The "Checking the source" box that ends every chapter, and the book-wide list of verdicts.

Each row is a claim of the source text, what the code measured, and a verdict:
  "holds"                the evidence supports the claim;
  "holds with a caveat"  it supports part of it, or under a condition the row states;
  "does not hold"        the evidence contradicts the claim at the scale the claim speaks of;
  "not observed here"    our evidence cannot decide: the effect is not seen, but the setting is
                         too small for the claim (a toy model checking a claim about trained
                         transformers) or the effect is not distinguishable from noise;
  "not yet measured"     the check needs a measurement that does not exist yet (a GPU timing):
                         the chapter computes the verdict from the data it finds, so a box
                         re-rates itself when that measurement lands in book/data/.
`box(rows)` returns a display object:
- in Jupyter or Colab it renders as an HTML table;
- in the book build it renders as MyST Markdown: an admonition, plus an `andrea-verdict`
  directive that the Sphinx extension `book/_ext/andrea_verdicts.py` collects, so the page
  "Every verdict in one place" lists each source claim once, with every chapter's evidence and
  one combined verdict (`group_claims`, `combine`).
One claim, one verdict: a row may carry a `key` naming the source claim it checks; rows of
different chapters with the same key (or, without one, the same claim text) are one claim.
Their verdicts combine by `combine`: the two verdicts that cannot decide ("not observed here",
"not yet measured") yield to any that can; "holds" and "holds with a caveat" combine to the
caveat; "does not hold" beside a "holds" is a contradiction that only an entry in RECONCILED
(the author's combined verdict and why) resolves, else `UnreconciledVerdicts` is raised (the
book build warns, and -W fails).
The measured text is computed by the chapter's cells: this module formats, it never decides.
"""
from __future__ import annotations

import html
import json
import re
from dataclasses import asdict, dataclass

NOT_MEASURED = "not yet measured"
NOT_OBSERVED = "not observed here"
VERDICTS = ("holds", "holds with a caveat", "does not hold", NOT_OBSERVED, NOT_MEASURED)
_ICON = {"holds": "✅", "holds with a caveat": "⚠️", "does not hold": "❌", NOT_OBSERVED: "🔍",
         NOT_MEASURED: "⏳"}
ICONS = _ICON
DECISIVE = ("holds", "holds with a caveat", "does not hold")

# Source claims that more than one chapter checks: one key each (Claim.key).
TRAINED_TRANSFORMERS_SHOW_HEADS = "trained-transformers-show-pattern-heads"

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


@dataclass(frozen=True)
class Claim:
    """One row: the source's claim, what the code measured, the verdict (and an optional key
    naming the source claim, shared by every chapter that checks it)."""

    claim: str
    measured: str
    verdict: str
    key: str = ""   # the source claim this row checks, when other chapters check it too

    def __post_init__(self):
        if self.verdict not in VERDICTS:
            raise ValueError(f"verdict must be one of {VERDICTS}, got {self.verdict!r}")
        for name in ("claim", "measured"):
            if not str(getattr(self, name)).strip():
                raise ValueError(f"{name} must be a non-empty string")


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
        table = ["| Claim of the source | What the code measured | Verdict |", "|---|---|---|"]
        table += [
            f"| {_cell(r.claim)} | {_cell(r.measured)} | {_ICON[r.verdict]} {r.verdict} |"
            for r in self.rows
        ]
        return "\n".join(
            ["```{andrea-verdict}", payload, "```", "", f":::{{admonition}} {self.title}",
             ":class: tip checking-the-source", *table, ":::"]
        )

    def html(self) -> str:
        rows = "".join(
            f"<tr><td>{html.escape(r.claim)}</td><td>{html.escape(r.measured)}</td>"
            f"<td>{_ICON[r.verdict]} {html.escape(r.verdict)}</td></tr>"
            for r in self.rows
        )
        return (
            f'<div class="checking-the-source"><b>{html.escape(self.title)}</b><table>'
            "<tr><th>Claim of the source</th><th>What the code measured</th><th>Verdict</th></tr>"
            f"{rows}</table></div>"
        )

    def _repr_mimebundle_(self, include=None, exclude=None):
        return {"text/markdown": self.markdown(), "text/html": self.html(), "text/plain": self.text()}

    def text(self) -> str:
        return "\n".join(f"- {r.claim}: {r.measured} -> {r.verdict}" for r in self.rows)


def box(rows, title: str = "Checking the source") -> VerdictBox:
    """The chapter's closing box. `rows`: Claim objects or (claim, measured, verdict[, key])
    tuples."""
    if not rows:
        raise ValueError("rows must hold at least one (claim, measured, verdict)")
    claims = [r if isinstance(r, Claim) else Claim(*r) for r in rows]
    return VerdictBox(claims, title)


# ---------------------------------------------------------------- one claim, one verdict
def claim_key(row: dict) -> str:
    """The identity of a row's source claim: its key, else its claim text (case and spacing
    folded)."""
    return row.get("key") or re.sub(r"\s+", " ", str(row["claim"])).strip().lower()


def combine(verdicts, key: str = "", reconciled: dict | None = None) -> tuple[str, str]:
    """One verdict for one claim from every chapter's verdict: (verdict, how it was reached).
    Raises UnreconciledVerdicts when "does not hold" meets a "holds" (with or without a caveat)
    and `reconciled` (default RECONCILED) has no entry for `key`."""
    vs = list(verdicts)
    count(vs)                                              # refuses unknown values
    reconciled = RECONCILED if reconciled is None else reconciled
    if not vs:
        raise ValueError("combine needs at least one verdict")
    if len(set(vs)) == 1:
        return vs[0], "every chapter agrees" if len(vs) > 1 else "one chapter"
    decisive = [v for v in vs if v in DECISIVE]
    if not decisive:
        v = NOT_OBSERVED if NOT_OBSERVED in vs else NOT_MEASURED
        return v, "no chapter's evidence can decide"
    kinds = set(decisive)
    if "does not hold" in kinds and len(kinds) > 1:
        if key in reconciled:
            v, why = reconciled[key]
            return v, f"reconciled: {why}"
        raise UnreconciledVerdicts(
            f"claim {key!r}: chapters say {sorted(set(vs))}, and RECONCILED in "
            "andrea_edu/figures/verdicts.py has no entry for it (one line: the combined verdict "
            "and which evidence speaks at the claim's scale)")
    v = "holds with a caveat" if "holds with a caveat" in kinds else decisive[0]
    left = sorted(set(vs) - set(DECISIVE))
    how = ("the chapters that can decide agree up to a caveat" if len(kinds) > 1
           else "the chapters that can decide agree")
    if left:
        how += f"; the others' evidence ({', '.join(left)}) cannot decide it"
    return v, how


def group_claims(entries, reconciled: dict | None = None) -> list[dict]:
    """entries: [{"chapter", "target", "rows": [row dicts]}] in reading order (one per box) ->
    one dict per source claim, in order of first appearance: {key, claim, evidence: [{chapter,
    target, claim, measured, verdict}], verdict, how, error}. error is the UnreconciledVerdicts
    message when the chapters contradict each other unreconciled (verdict is then None)."""
    claims: dict[str, dict] = {}
    for entry in entries:
        for row in entry["rows"]:
            k = claim_key(row)
            c = claims.setdefault(k, {"key": k, "claim": row["claim"], "evidence": []})
            c["evidence"].append({"chapter": entry.get("chapter", ""),
                                  "target": entry.get("target", ""), "claim": row["claim"],
                                  "measured": row["measured"], "verdict": row["verdict"]})
    for c in claims.values():
        try:
            c["verdict"], c["how"] = combine([e["verdict"] for e in c["evidence"]], c["key"],
                                             reconciled)
            c["error"] = None
        except UnreconciledVerdicts as e:
            c["verdict"], c["how"], c["error"] = None, "unreconciled", str(e)
    return list(claims.values())
