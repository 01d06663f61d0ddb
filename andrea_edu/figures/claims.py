"""Every claim the book checks, once: the registry behind the verdicts, read from its data file.

The claims themselves are data, in `data/claims.json` (package data, read with
importlib.resources): the source text's claims word for word in the source's order, then the
book's own hypotheses, each with a key; and what published work found for the claims about
trained transformers, where the book's own evidence is not at the claim's scale. This module
reads that file (`read`); the laboratory checks it, values as well as structure
(andrea_lab.verdict_page.check_registry: the book build and the tests run it, and a bad file
stops the build with one line naming the entry, the field and the allowed values).

A chapter's "Checking the source" row names its claim by `key=` (andrea_edu.figures.verdicts);
a row without one is matched by its claim text against `text` and the `phrasings` the chapters
use (`fold`: case and spacing folded, a trailing "(v1)"-style variant dropped). The verdicts page
lists each registered claim once, and the book build fails on a row that names no registered
claim, so a paraphrase can never split one claim into two verdicts.

`trained=True` marks a claim about trained transformers. The book's own models are trained for
minutes on a CPU: for such a claim only evidence at the claim's scale decides (a row with
scale="trained", e.g. the trained MiniLM, or the published findings); the toy rows say what the
toy showed, and the verdicts page (andrea_lab.verdict_page.combine) treats them as unable to
decide.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from importlib import resources

SOURCE, HYPOTHESIS = "source", "hypothesis"
KINDS = (SOURCE, HYPOTHESIS)
TRAINED, PUBLISHED_SCALE = "trained", "published"
SCALES = ("", TRAINED, PUBLISHED_SCALE)   # "": the book's own code, models and shapes
DATA = "data/claims.json"

# The one key a chapter imports by name (the specialization pages' rows).
TRAINED_TRANSFORMERS_SHOW_HEADS = "trained-transformers-show-pattern-heads"


@dataclass(frozen=True)
class Registered:
    key: str
    kind: str                  # SOURCE or HYPOTHESIS
    text: str                  # the source's words (SOURCE) or the book's (HYPOTHESIS)
    section: str               # the source section it belongs to
    trained: bool = False      # a claim about trained transformers: toys cannot decide it
    phrasings: tuple = ()      # claim texts chapters use for it: str, or (str, scale)
    reading: str = ""          # how to read the evidence (static words: the verdicts page shows
    #                            them; a chapter's box row carries only what its cells measured)


def fold(text: str) -> str:
    """Case and spacing folded, a trailing "(v1)"-style variant and final period dropped."""
    t = re.sub(r"\s+", " ", str(text)).strip().lower()
    t = re.sub(r"\s*\(v\d+\)$", "", t)
    return t.rstrip(".")


def read(raw: str) -> tuple[tuple[Registered, ...], dict[str, list[tuple[str, str]]]]:
    """The registry from the file's text: (claims, published findings {key: [(verdict,
    finding)]}). The file's values are checked where the registry is kept, not at each chapter's
    import: by andrea_lab.verdict_page.check_registry, which the book build (the verdicts page's
    extension) and the tests run."""
    d = json.loads(raw)
    claims = tuple(Registered(c["key"], c["kind"], c["text"], c["section"],
                              c.get("trained", False),
                              tuple(p if isinstance(p, str) else tuple(p)
                                    for p in c.get("phrasings", [])), c.get("reading", ""))
                   for c in d["claims"])
    published = {k: [(f["verdict"], f["finding"]) for f in found]
                 for k, found in d.get("published", {}).items()}
    return claims, published


def load() -> tuple[tuple[Registered, ...], dict[str, list[tuple[str, str]]]]:
    """The registry shipped with the package (read of data/claims.json)."""
    return read(resources.files("andrea_edu.figures").joinpath(DATA).read_text(encoding="utf-8"))


CLAIMS, PUBLISHED = load()
