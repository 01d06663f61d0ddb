"""Words of a chapter's main text, as a reader meets them: the Markdown cells and the Markdown a
cell displays (`text/markdown`), before the first `## Appendix` or `## Evidence` heading, without what the page
hides behind a toggle (cells tagged hide-output or remove-output), fenced blocks (code listings,
directive payloads), display math, HTML tags and tokens with no letter or digit (table bars,
heading marks, bullets). Tables count: a reader reads them too.
Printed output (an exercise's answer) is not counted. Issue 30 item 5 aims at ~2,500 words."""
from __future__ import annotations

import re

MAIN_WORDS_AIM = 2500
# The lesson chapters and the most main text each may show once executed (fast mode).
LESSONS = dict.fromkeys(("why_heads_specialize", "heads_on_real_text", "kernel_worklog"),
                        MAIN_WORDS_AIM)
APPENDIX = re.compile(r"^## (?:Appendix|Evidence)", re.M)  # the collapsed block at the end


def _words(text: str) -> int:
    text = re.sub(r"```.*?```", " ", text, flags=re.S)
    text = re.sub(r"\$\$.*?\$\$", " ", text, flags=re.S)
    text = re.sub(r"<[^>]+>", " ", text)
    return sum(1 for w in text.split() if re.search(r"\w", w))  # not |, ---, #, *, >


def _source(cell) -> str:
    s = cell.get("source", "")
    return "".join(s) if isinstance(s, list) else s


def main_and_appendix_words(nb) -> tuple[int, int]:
    """(main, appendix) word counts of an executed (or unexecuted: Markdown only) notebook."""
    counts = [0, 0]
    in_appendix = False
    for cell in nb["cells"]:
        if cell["cell_type"] == "markdown":
            text = _source(cell)
            in_appendix = in_appendix or bool(APPENDIX.search(text))
            counts[in_appendix] += _words(text)
            continue
        tags = set(cell.get("metadata", {}).get("tags", []))
        if tags & {"hide-output", "remove-output"}:
            continue
        for out in cell.get("outputs", []):
            md = out.get("data", {}).get("text/markdown")
            if md is not None:
                counts[in_appendix] += _words("".join(md) if isinstance(md, list) else md)
    return counts[0], counts[1]
