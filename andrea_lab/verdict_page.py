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

The registry's file itself is checked here too (`check_registry`): the book build's extension
runs it when it loads, so a bad claims.json stops the build in one line naming the entry.
"""
from __future__ import annotations

import json
import re
from importlib import resources

from andrea_edu.figures.claims import (CLAIMS, DATA, KINDS, PUBLISHED, SCALES, SOURCE,
                                       TRAINED_TRANSFORMERS_SHOW_HEADS, Registered, fold, read)
from andrea_edu.figures.verdicts import decides, find
from andrea_edu.heads.verdict_words import (CAVEAT, DECISIVE, DOES_NOT_HOLD, NOT_MEASURED,
                                            NOT_OBSERVED, VERDICTS)

PUBLISHED_CHAPTER = "Published work"

# Contradictions between chapters that the author has reconciled: {key: (verdict, why)}. Empty:
# no two chapters contradict each other today; a new contradiction fails the build until an
# entry here says which evidence speaks at the claim's scale.
RECONCILED: dict[str, tuple[str, str]] = {}


_KEY = re.compile(r"[a-z0-9]+(-[a-z0-9]+)*")


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


# ---------------------------------------------------------------- the registry's file, checked
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


def check_registry(raw: str | None = None) -> tuple[tuple[Registered, ...],
                                                   dict[str, list[tuple[str, str]]]]:
    """The claim registry's file (`raw`, default the one shipped in andrea_edu) checked, values as
    well as structure: known kinds, scales and verdict words, sections that are headings of the
    source, the source's claims in its order, one key per claim, non-empty texts, no phrasing
    that names two claims, published findings only for registered claims about trained
    transformers. ValueError in one line naming the entry, the field and the allowed values, on
    the first bad one; else the registry as andrea_edu.figures.claims.read reads it."""
    if raw is None:
        raw = resources.files("andrea_edu.figures").joinpath(DATA).read_text(encoding="utf-8")
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
    return read(raw)
