"""The committed probe sentences and the positions each pattern asks about (chapter "Heads in a
trained model").

`data/probes.json` (package data, read with importlib.resources) was written for the chapter:
plain prose, prose with flat parentheses, nested Python calls, two-name sentences with a pronoun
in three sets (different gender with the antecedent second or first, same gender), and paraphrase
pairs. `items(...)` turns the tokenized sentences into labelled queries, one `Item` per (sentence,
query position): the key positions the pattern names (`target`), and, for the patterns that
separate two explanations, the key the other explanation names (`rival`: the nearest bracket
against the matching one, the first name against the most recent).
Sentences alternate between two halves (0, 1) so that a head chosen on one is scored on the other.

    load() -> dict                       the JSON, validated
    texts(probes) -> [(set, text)]       every sentence the patterns read, in file order
    items(tokens, sentences, probes) -> {pattern: [Item]}
"""
from __future__ import annotations

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
    "matching bracket, flat prose": ("'(' attends to its ')'", "syntactic"),
    "matching bracket, nested code": ("outer '(' attends to its own ')', not the nearest ')'",
                                      "syntactic"),
    "nearest bracket, nested code": ("outer '(' attends to the first ')' after it", "syntactic"),
    "most recent name": ("pronoun attends to the second (most recent) name", "semantic"),
    "antecedent by gender": ("pronoun attends to the name of its gender (two genders)",
                             "semantic"),
    "antecedent first": ("pronoun attends to the first name when gender says so (recency "
                         "says the other)", "semantic"),
}


@dataclass(frozen=True)
class Item:
    sent: int                 # index into the list of sentences given to items()
    query: int                # query position (token index, [CLS] = 0)
    target: tuple             # key positions the pattern names
    rival: int | None         # the key a competing explanation names, or None
    half: int                 # 0 or 1


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


def items(tokens: list[list[str]], sentences: list[tuple[str, str]], probes: dict
          ) -> dict[str, list[Item]]:
    """{pattern: [Item]} for `sentences` ((set, text), e.g. texts(probes) or part of it) whose
    tokens ([CLS] ... [SEP]) are `tokens`."""
    out: dict[str, list[Item]] = {p: [] for p in PATTERNS}
    records = {r["text"]: r for r in probes["pronouns"]}
    seen: dict[str, int] = {}
    for n, (toks, (s, text)) in enumerate(zip(tokens, sentences)):
        half = seen.get(s, 0) % 2
        seen[s] = seen.get(s, 0) + 1
        T = len(toks)
        for t in range(1, T - 1):            # real tokens as queries
            out["[CLS]"].append(Item(n, t, (0,), None, half))
            out["[SEP]"].append(Item(n, t, (T - 1,), None, half))
            if t >= 2:
                out["previous token"].append(Item(n, t, (t - 1,), None, half))
            if t <= T - 3:
                out["next token"].append(Item(n, t, (t + 1,), None, half))
        if s in ("brackets_flat", "brackets_nested"):
            for o, m, near in _brackets(toks):
                if s == "brackets_flat":
                    out["matching bracket, flat prose"].append(Item(n, o, (m,), None, half))
                elif m != near:
                    out["matching bracket, nested code"].append(Item(n, o, (m,), near, half))
                    out["nearest bracket, nested code"].append(Item(n, o, (near,), m, half))
        if s == "pronouns":
            r = records[text]
            a = _position(toks, r["names"][0])
            b = _position(toks, r["names"][1], a + 1)
            p = _position(toks, r["pronoun"], b + 1)
            out["most recent name"].append(Item(n, p, (b,), a, half))
            if r["antecedent"] is not None:
                ant, other = (a, b) if r["antecedent"] == 0 else (b, a)
                out["antecedent by gender"].append(Item(n, p, (ant,), other, half))
                if r["antecedent"] == 0:
                    out["antecedent first"].append(Item(n, p, (a,), b, half))
    return out
