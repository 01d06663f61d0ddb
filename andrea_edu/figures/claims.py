"""Every claim the book checks, once: the registry behind the verdicts, read from its data file.

The claims themselves are data, in `data/claims.json` (package data, read with
importlib.resources): the source text's claims word for word in the source's order, then the
book's own hypotheses, each with a key; and what published work found for the claims about
trained transformers, where the book's own evidence is not at the claim's scale. This module
reads that file and checks it on load, values as well as structure: known kinds, scales and
verdict words, sections that are headings of the source, the source's claims in its order, one
key per claim, non-empty texts, no phrasing that names two claims, published findings only for
registered claims about trained transformers. A bad file stops the import with one line naming
the entry, the field and the allowed values.

A chapter's "Checking the source" row names its claim by `key=` (andrea_edu.figures.verdicts);
a row without one is matched by its claim text against `text` and the `phrasings` the chapters
use (`fold`: case and spacing folded, a trailing "(v1)"-style variant dropped). The verdicts page
lists each registered claim once, and the book build fails on a row that names no registered
claim, so a paraphrase can never split one claim into two verdicts.

`trained=True` marks a claim about trained transformers. The book's own models are trained for
minutes on a CPU: for such a claim only evidence at the claim's scale decides (a row with
scale="trained", e.g. the trained MiniLM, or the published findings); the toy rows say what the
toy showed, and `verdicts.combine` treats them as unable to decide.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from importlib import resources

from andrea_edu.heads.verdict_words import VERDICTS

SOURCE, HYPOTHESIS = "source", "hypothesis"
KINDS = (SOURCE, HYPOTHESIS)
TRAINED, PUBLISHED_SCALE = "trained", "published"
SCALES = ("", TRAINED, PUBLISHED_SCALE)   # "": the book's own code, models and shapes
DATA = "data/claims.json"

# The one key a chapter imports by name (the specialization pages' rows).
TRAINED_TRANSFORMERS_SHOW_HEADS = "trained-transformers-show-pattern-heads"
_KEY = re.compile(r"[a-z0-9]+(-[a-z0-9]+)*")


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


def _text(value, where: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{DATA}: {where} must be a non-empty string, got {value!r}")
    return value


def _one_of(value, allowed, where: str):
    if value not in allowed:
        raise ValueError(f"{DATA}: {where} must be one of {tuple(allowed)}, got {value!r}")
    return value


def _phrasing(p, where: str) -> str | tuple[str, str]:
    if isinstance(p, str):
        return _text(p, where)
    if not (isinstance(p, list) and len(p) == 2):
        raise ValueError(f"{DATA}: {where} must be a string or [text, scale], got {p!r}")
    return _text(p[0], where), _one_of(p[1], SCALES[1:], f"{where}'s scale")


def parse(raw: str) -> tuple[tuple[Registered, ...], dict[str, list[tuple[str, str]]]]:
    """The registry from the file's text: (claims, published findings {key: [(verdict,
    finding)]}), checked; ValueError (one line) on the first bad entry."""
    d = json.loads(raw)
    if not isinstance(d, dict) or set(d) - {"about", "sections", "claims", "published"}:
        raise ValueError(f"{DATA}: top level must be an object with keys about, sections, "
                         f"claims, published, got {sorted(d) if isinstance(d, dict) else d!r}")
    for field in ("sections", "claims"):
        if not isinstance(d.get(field), list):
            raise ValueError(f"{DATA}: {field} must be a list, got {d.get(field)!r}")
    sections = [_text(s, "sections[]") for s in d["sections"]]
    claims: list[Registered] = []
    keys: set[str] = set()
    texts: dict[str, str] = {}     # folded text -> key
    last_source = -1
    for i, c in enumerate(d["claims"]):
        key = c.get("key") if isinstance(c, dict) else None
        if not isinstance(key, str) or not _KEY.fullmatch(key) or key in keys:
            raise ValueError(f"{DATA}: claims[{i}].key must be a new lower-case-hyphenated key, "
                             f"got {key!r}")
        keys.add(key)
        extra = set(c) - {"key", "kind", "text", "section", "trained", "phrasings", "reading"}
        if extra:
            raise ValueError(f"{DATA}: claim {key!r} has unknown fields {sorted(extra)}")
        kind = _one_of(c.get("kind"), KINDS, f"claim {key!r}: kind")
        section = _one_of(c.get("section"), sections, f"claim {key!r}: section")
        if kind == SOURCE:
            if sections.index(section) < last_source:
                raise ValueError(f"{DATA}: claim {key!r}: the source's claims must follow the "
                                 f"source's order, got {section!r} after a later section")
            last_source = sections.index(section)
        trained = c.get("trained", False)
        if not isinstance(trained, bool):
            raise ValueError(f"{DATA}: claim {key!r}: trained must be true or false, "
                             f"got {trained!r}")
        phrasings = tuple(_phrasing(p, f"claim {key!r}: phrasings[{j}]")
                          for j, p in enumerate(c.get("phrasings", [])))
        for p in (_text(c.get("text"), f"claim {key!r}: text"), *phrasings):
            t = fold(p if isinstance(p, str) else p[0])
            if texts.setdefault(t, key) != key:
                raise ValueError(f"{DATA}: claim {key!r}: the text {t!r} already names claim "
                                 f"{texts[t]!r}")
        reading = _text(c["reading"], f"claim {key!r}: reading") if "reading" in c else ""
        claims.append(Registered(key, kind, c["text"], section, trained, phrasings, reading))
    if not claims:
        raise ValueError(f"{DATA}: claims must hold at least one claim")
    trained_keys = {r.key for r in claims if r.trained}
    published: dict[str, list[tuple[str, str]]] = {}
    if not isinstance(d.get("published", {}), dict):
        raise ValueError(f"{DATA}: published must be an object {{claim key: [findings]}}")
    for key, found in d.get("published", {}).items():
        _one_of(key, sorted(trained_keys), "published: a key")
        if not (isinstance(found, list) and found and all(isinstance(f, dict) for f in found)):
            raise ValueError(f"{DATA}: published[{key!r}] must be a non-empty list of "
                             "{verdict, finding}")
        published[key] = [(_one_of(f.get("verdict"), VERDICTS, f"published[{key!r}].verdict"),
                           _text(f.get("finding"), f"published[{key!r}].finding"))
                          for f in found]
    if TRAINED_TRANSFORMERS_SHOW_HEADS not in keys:
        raise ValueError(f"{DATA}: claims must hold the key {TRAINED_TRANSFORMERS_SHOW_HEADS!r}")
    return tuple(claims), published


def load() -> tuple[tuple[Registered, ...], dict[str, list[tuple[str, str]]]]:
    """The registry shipped with the package (parse of data/claims.json)."""
    return parse(resources.files("andrea_edu.figures").joinpath(DATA).read_text(encoding="utf-8"))


CLAIMS, PUBLISHED = load()
