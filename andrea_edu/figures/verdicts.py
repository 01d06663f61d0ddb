"""The "Checking the source" box that ends every chapter: each claim, what the code measured, and
a verdict, one of the words of andrea_edu.heads.verdict_words.VERDICTS:
  "holds"                the evidence supports the claim;
  "holds with a caveat"  it supports part of it, or under a condition the row states;
  "does not hold"        the evidence contradicts the claim at the scale the claim speaks of;
  "not observed here"    our evidence cannot decide: the setting is too small for the claim, or
                         the effect is not distinguishable from noise;
  "not yet measured"     the check needs a measurement that does not exist yet (a GPU timing):
                         the chapter computes the verdict from the data it finds, so a box
                         re-rates itself when that measurement lands in book/data/.
`box(rows)` returns a display object: an HTML table in Jupyter or Colab; in the book build, MyST
Markdown (an admonition, plus an `andrea-verdict` directive holding the rows as JSON, which the
Sphinx extension book/_ext/andrea_verdicts.py collects for the page "Every verdict in one place";
andrea_lab.verdict_page combines every chapter's rows there, one verdict per claim).

Every claim the book checks is registered once (figures/claims.py, from data/claims.json). A row
names its claim by `key`, or by a claim text the registry knows (`find`). The box shows a
hypothesis of the book as such, and, because a model the book trains for minutes on a CPU can
neither confirm nor refute a claim about trained transformers (claims.Registered.trained), a
toy's row on such a claim as unable to decide, with the toy's own reading (`decides`); only
rows at the claim's scale (scale="trained": a trained model) decide it.
The measured text is computed by the chapter's cells: this module formats, it never decides.
"""
from __future__ import annotations

import html
import json
from dataclasses import asdict, dataclass

from andrea_edu.figures.claims import (CLAIMS, HYPOTHESIS, PUBLISHED_SCALE, SCALES, TRAINED,
                                       TRAINED_TRANSFORMERS_SHOW_HEADS, Registered, fold)
from andrea_edu.heads.verdict_words import (CAVEAT, DOES_NOT_HOLD, HOLDS, NOT_MEASURED,
                                            NOT_OBSERVED, VERDICTS)

ICONS = {HOLDS: "✅", CAVEAT: "⚠️", DOES_NOT_HOLD: "❌", NOT_OBSERVED: "🔍", NOT_MEASURED: "⏳"}
CANNOT_DECIDE = "cannot decide at this scale"   # how a toy's row on a trained-model claim reads
CANNOT_DECIDE_ICON = "❔"   # its own mark: 🔍 says "looked for, not seen", not "too small to tell"
__all__ = ["TRAINED_TRANSFORMERS_SHOW_HEADS", "NOT_MEASURED", "NOT_OBSERVED", "VERDICTS", "box"]


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


# The registry's lookups: by key, and by folded claim text -> (key, the phrasing's scale).
BY_KEY = {r.key: r for r in CLAIMS}
BY_TEXT = {fold(p if isinstance(p, str) else p[0]): (r.key, "" if isinstance(p, str) else p[1])
           for r in CLAIMS for p in (r.text, *r.phrasings)}


def find(row: dict | Claim) -> tuple[Registered | None, str]:
    """The registered claim a row checks and the scale of its evidence; (None, scale) when the
    row names none. A row's own scale wins over a phrasing's."""
    row = asdict(row) if isinstance(row, Claim) else row
    if row.get("key"):
        return BY_KEY.get(row["key"]), row.get("scale") or ""
    key, phrasing_scale = BY_TEXT.get(fold(row["claim"]), ("", ""))
    return BY_KEY.get(key), row.get("scale") or phrasing_scale


def decides(row: dict | Claim) -> bool:
    """False for a row whose evidence is below its claim's scale: the book's own (toy) models on
    a claim about trained transformers. Such a row still says what the toy showed."""
    reg, scale = find(row)
    return not (reg is not None and reg.trained and scale not in (TRAINED, PUBLISHED_SCALE))


def shown_verdict(row: Claim) -> str:
    """The verdict as a box shows it: icon and word, or, for a toy's row on a claim about
    trained transformers, that it cannot decide, with the toy's own reading."""
    if decides(row):
        return f"{ICONS[row.verdict]} {row.verdict}"
    return f"{CANNOT_DECIDE_ICON} {CANNOT_DECIDE} (the toy: {row.verdict})"


def shown_claim(row: Claim) -> str:
    """The claim as a box shows it: a hypothesis of the book (claims.HYPOTHESIS) says so, so that
    no reader takes it for the source's."""
    reg, _ = find(row)
    if reg is not None and reg.kind == HYPOTHESIS:
        return f"{row.claim} (the book's hypothesis, not the source's)"
    return row.claim


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
