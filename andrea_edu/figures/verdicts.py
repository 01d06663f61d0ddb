"""The "Checking the source" box that ends every chapter, and the book-wide list of verdicts.

Each row is a claim of the source text, what the code measured, and a verdict: "holds",
"holds with a caveat", "does not hold", or "not yet measured" when the check needs a measurement
that does not exist yet (a GPU timing, say): the chapter computes the verdict from the data it
finds, so a box re-rates itself when that measurement lands in book/data/. `box(rows)` returns a
display object:
- in Jupyter or Colab it renders as an HTML table;
- in the book build it renders as MyST Markdown: an admonition, plus an `andrea-verdict`
  directive that the Sphinx extension `book/_ext/andrea_verdicts.py` collects, so the page
  "Every verdict in one place" lists every box of the book with a link back to it.
The measured text is computed by the chapter's cells: this module formats, it never decides.
"""
from __future__ import annotations

import html
import json
from dataclasses import asdict, dataclass

NOT_MEASURED = "not yet measured"
VERDICTS = ("holds", "holds with a caveat", "does not hold", NOT_MEASURED)
_ICON = {"holds": "✅", "holds with a caveat": "⚠️", "does not hold": "❌", NOT_MEASURED: "⏳"}


def count(verdicts) -> dict[str, int]:
    """How many of each verdict, in the order of VERDICTS (zeros included)."""
    verdicts = list(verdicts)
    unknown = set(verdicts) - set(VERDICTS)
    if unknown:
        raise ValueError(f"unknown verdicts {sorted(unknown)}; allowed: {VERDICTS}")
    return {v: verdicts.count(v) for v in VERDICTS}


@dataclass(frozen=True)
class Claim:
    """One row: the source's claim, what the code measured, the verdict."""

    claim: str
    measured: str
    verdict: str

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
    """The chapter's closing box. `rows`: Claim objects or (claim, measured, verdict) tuples."""
    if not rows:
        raise ValueError("rows must hold at least one (claim, measured, verdict)")
    claims = [r if isinstance(r, Claim) else Claim(*r) for r in rows]
    return VerdictBox(claims, title)
