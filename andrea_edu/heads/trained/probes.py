"""The committed probe sentences and the positions each pattern asks about (chapter "Why heads
specialize").

`data/probes.json` (package data, read with importlib.resources) was written for the book: plain
prose, prose with flat parentheses, nested Python calls, two-name sentences with a pronoun, and
paraphrase pairs. The pronoun sentences come in sets that separate what a pattern names from what
travels with it: different gender with the antecedent second or first (recency against gender),
and same gender (recency alone), where the recent name sits 2 or 10-11 tokens before the pronoun
and the earlier name at token 1 or 10, each pair in both orders (recency against position and
against a preference for one particular name).

`items(...)` turns the tokenized sentences into labelled queries, one `Item` per (sentence, query
position): the key the pattern names (`target`) and, where two explanations compete, the key the
other one names (`rival`: the nearest bracket against the matching one, the earlier name against
the recent one). Halves: a head is chosen on half 0 and scored on half 1. A pronoun sentence's
half is its wording's (the sentence with its names and pronoun blanked): the halves share no
wording. Other sentences: by a hash of their text. Neither depends on which sentences are read, so
a subset keeps each sentence's half.

    load() -> dict                       the JSON, validated
    texts(probes) -> [(set, text)]       every sentence the patterns read, in file order
    items(tokens, sentences, probes) -> {pattern: [Item]}
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from importlib import resources

SETS = ("prose", "brackets_flat", "brackets_nested", "pronouns")

# pattern -> (what it asks, the group of the source's claim it speaks to)
PATTERNS = {
    "previous token": ("token t attends to t-1", "positional"),
    "next token": ("token t attends to t+1", "positional"),
    "[CLS]": ("a token attends to [CLS] (where unused attention goes)", "positional"),
    "[SEP]": ("a token attends to [SEP] (where unused attention goes)", "positional"),
    "closing bracket, flat prose": ("'(' attends to its ')' (nearest and matching are one "
                                    "token: says nothing about matching)", "syntactic"),
    "matching bracket, nested code": ("outer '(' attends to its own ')', not the nearest ')'",
                                      "syntactic"),
    "nearest bracket, nested code": ("outer '(' attends to the first ')' after it", "syntactic"),
    "most recent name": ("pronoun attends to the recent name, not the earlier one (same gender; "
                         "recent 2 or 10-11 tokens back, earlier name at token 1 or 10)",
                         "semantic"),
    "recent name, gender says first": ("pronoun attends to the recent name although its gender "
                                       "names the earlier one", "semantic"),
    "antecedent by gender": ("pronoun attends to the name of its gender (two genders)",
                             "semantic"),
    "antecedent first": ("pronoun attends to the first name when gender says so (recency "
                         "says the other)", "semantic"),
}
# The pronoun sets the recency probe reads: same gender, the layout varied. (The older set "same
# gender", names always at tokens 1 and 3, confounds recency with position: positional
# patterns only.)
RECENCY_SETS = "same gender, recent"


@dataclass(frozen=True)
class Item:
    sent: int                 # index into the list of sentences given to items()
    query: int                # query position (token index, [CLS] = 0)
    target: tuple             # key positions the pattern names
    rival: int | None         # the key a competing explanation names, or None
    half: int                 # 0 or 1
    group: str = ""           # the probe set the sentence comes from (pronoun sets: its layout)


def load() -> dict:
    """The probe file, checked: each set present and non-empty, each pronoun record complete."""
    raw = resources.files("andrea_edu.heads.trained").joinpath("data/probes.json").read_text()
    d = json.loads(raw)
    for key in SETS + ("paraphrases",):
        if not d.get(key):
            raise ValueError(f"probes.json: set {key!r} is missing or empty")
    for r in d["pronouns"]:
        if set(r) != {"text", "names", "pronoun", "antecedent", "set"} or len(r["names"]) != 2:
            raise ValueError(f"probes.json: pronoun record {r!r} is incomplete")
    if any(len(p) != 2 for p in d["paraphrases"]):
        raise ValueError("probes.json: every paraphrase entry must be a pair")
    return d


def texts(probes: dict) -> list[tuple[str, str]]:
    """(set, text) of every sentence the patterns read, in file order."""
    out = []
    for s in SETS:
        for x in probes[s]:
            out.append((s, x["text"] if s == "pronouns" else x))
    return out


def _brackets(tokens: list[str]) -> list[tuple[int, int, int]]:
    """(open, its matching close, the nearest close after it) for every '(' that is closed."""
    stack, pairs = [], {}
    for i, t in enumerate(tokens):
        if t == "(":
            stack.append(i)
        elif t == ")" and stack:
            pairs[stack.pop()] = i
    closes = [i for i, t in enumerate(tokens) if t == ")"]
    return [(o, m, next(c for c in closes if c > o)) for o, m in sorted(pairs.items())]


def _position(tokens: list[str], word: str, after: int = 0) -> int:
    w = word.lower()
    for i in range(after, len(tokens)):
        if tokens[i] == w:
            return i
    raise ValueError(f"probe word {word!r} is not one token of {tokens}")


def wording(record: dict) -> str:
    """A pronoun sentence with its names and pronoun blanked: the template it was written from."""
    words = [{record["names"][0]: "{A}", record["names"][1]: "{B}",
              record["pronoun"]: "{P}"}.get(w, w) for w in record["text"].split(" ")]
    return " ".join(words)


def halves(probes: dict) -> dict[tuple[str, str], int]:
    """{(set, text): half} for every sentence of the file. Pronoun sentences: by wording, the
    wordings of each set alternating in order of first appearance (so no wording is in both
    halves); the other sets: the first bit of the text's SHA-256 (each sentence is its own
    wording)."""
    out: dict[tuple[str, str], int] = {}
    for s in SETS:
        if s != "pronouns":    # by the text's hash: a subset (every 4th, say) keeps both halves
            out.update({(s, t): hashlib.sha256(t.encode()).digest()[0] % 2 for t in probes[s]})
            continue
        seen: dict[str, dict[str, int]] = {}
        for r in probes[s]:
            ws = seen.setdefault(r["set"], {})
            out[(s, r["text"])] = ws.setdefault(wording(r), len(ws)) % 2
    both: dict[str, int] = {}
    for r in probes["pronouns"]:
        h = out[("pronouns", r["text"])]
        if both.setdefault(wording(r), h) != h:
            raise ValueError(f"probes.json: the wording {wording(r)!r} falls in both halves")
    return out


def items(tokens: list[list[str]], sentences: list[tuple[str, str]], probes: dict
          ) -> dict[str, list[Item]]:
    """{pattern: [Item]} for `sentences` ((set, text), e.g. texts(probes) or part of it) whose
    tokens ([CLS] ... [SEP]) are `tokens`."""
    out: dict[str, list[Item]] = {p: [] for p in PATTERNS}
    records = {r["text"]: r for r in probes["pronouns"]}
    half_of = halves(probes)
    for n, (toks, (s, text)) in enumerate(zip(tokens, sentences)):
        if (s, text) not in half_of:
            raise ValueError(f"sentence {text!r} of set {s!r} is not in the probe file")
        half = half_of[(s, text)]
        T = len(toks)
        for t in range(1, T - 1):            # real tokens as queries
            out["[CLS]"].append(Item(n, t, (0,), None, half, s))
            out["[SEP]"].append(Item(n, t, (T - 1,), None, half, s))
            if t >= 2:
                out["previous token"].append(Item(n, t, (t - 1,), None, half, s))
            if t <= T - 3:
                out["next token"].append(Item(n, t, (t + 1,), None, half, s))
        if s in ("brackets_flat", "brackets_nested"):
            for o, m, near in _brackets(toks):
                if s == "brackets_flat":
                    out["closing bracket, flat prose"].append(Item(n, o, (m,), None, half, s))
                elif m != near:              # only where matching and nearest differ
                    out["matching bracket, nested code"].append(Item(n, o, (m,), near, half, s))
                    out["nearest bracket, nested code"].append(Item(n, o, (near,), m, half, s))
        if s == "pronouns":
            r = records[text]
            g = r["set"]
            a = _position(toks, r["names"][0])
            b = _position(toks, r["names"][1], a + 1)
            p = _position(toks, r["pronoun"], b + 1)
            if g.startswith(RECENCY_SETS):   # recency with no gender cue, position varied
                out["most recent name"].append(Item(n, p, (b,), a, half, g))
            elif r["antecedent"] is not None:
                ant, other = (a, b) if r["antecedent"] == 0 else (b, a)
                out["antecedent by gender"].append(Item(n, p, (ant,), other, half, g))
                if r["antecedent"] == 0:
                    out["antecedent first"].append(Item(n, p, (a,), b, half, g))
                    out["recent name, gender says first"].append(Item(n, p, (b,), a, half, g))
    return out
