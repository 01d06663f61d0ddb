"""A real-text corpus every machine already has: the Python standard library's own source files.

Introduced in the chapter "Heads on real text". The toy laboratory (`heads.corpus`) was built to
contain the source's three patterns; this corpus was written by the CPython developers, not by us,
so whatever a model trained on it learns was not arranged. Nothing is downloaded: the files are read
from the running interpreter's installation (`sysconfig.get_paths()["stdlib"]`).

Selection   every top-level module `<stdlib>/*.py` whose name does not start with "_" (private and
            machine-generated files such as `_sysconfigdata_*`) and is not in EXCLUDED (jokes and
            stubs), sorted by name. No packages, no tests, no site-packages.
Split       by file: a file is in validation when sha256(f"{SPLIT_SEED}:{name}") falls in the
            lowest VALID_FRACTION of the hash range. A module present in two Python versions lands
            on the same side in both.
Tokenizer   character level, built from the training split: every character seen at least
            MIN_CHAR_COUNT times gets an id (sorted by code point), id 0 (UNK) takes the rest.
Provenance  Python version, stdlib folder (`stdlib_label`), the file list with sizes, and a content hash (sha256 over
            each file's name and bytes, in order). Another Python version is another corpus: the
            hash says so, and `same_corpus(provenance)` tells a chapter or test which case it is in.

Labels (from Python's own `tokenize`, never by hand). Each label sits on a query position t and
names the key position that holds the answer for the next character x[t+1], as in the toy corpus:

previous token    every t >= 1: key t-1 (the positional pattern; no parser needed).
matching bracket  for every closing bracket )]} that `tokenize` reports as an operator (so a
                  bracket inside a string or a comment is not one), the query is the position just
                  before it (the one that predicts it) and the key is the position of its opening
                  bracket. `bracket_pairs` also returns the pairs themselves (opener, closer).
recent identifier the operational stand-in for "the most recent named entity": at each identifier
                  (a NAME token that is not a keyword) that occurred earlier in the same file, for
                  each of its characters but the last (offset i), the query is that character and
                  the key is the character i+1 of the most recent earlier occurrence: the copy that
                  predicts the next character.
Limits of that definition: identifiers are program names, not people or places; an attribute
(`self.x`) and a local `x` count as the same name; names inside strings, comments and docstrings
are not NAME tokens and are not labelled; soft keywords (match, case, _, type) count as names; an
earlier occurrence outside the model's context window cannot be attended to, so its label is
dropped; at i = 0 only the first character of the name is known to the model, so the label names
the key the pattern designates, not one the model could always pick.
"""
from __future__ import annotations

import hashlib
import io
import keyword
import random
import sys
import sysconfig
import tokenize
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from andrea_edu.heads.batch import Batch

EXCLUDED = ("antigravity.py", "this.py")  # a joke that opens a browser, and a rot13 poem
SPLIT_SEED = 0
VALID_FRACTION = 0.15
MIN_CHAR_COUNT = 20
UNK = "\ufffd"  # id 0: every character the tokenizer did not keep

PREV, BRACKET, IDENT = 0, 1, 2
PATTERNS = {PREV: "previous token", BRACKET: "matching bracket", IDENT: "recent identifier"}
PATTERN_NAMES = tuple(PATTERNS.values())
PATTERN_KIND = {PREV: "positional", BRACKET: "syntactic", IDENT: "semantic (operational)"}
OPEN_TO_CLOSE = {"(": ")", "[": "]", "{": "}"}


def stdlib_label(root: Path) -> str:
    """How provenance names the corpus folder: the interpreter's own standard library as
    "{base_prefix}/lib/python3.11" (where Python is installed is the machine's business, not the
    corpus's: the content hash identifies the files), any other folder as given."""
    here = stdlib_dir()
    if Path(root).resolve() == here.resolve():
        try:
            return "{base_prefix}/" + here.resolve().relative_to(Path(sys.base_prefix).resolve()).as_posix()
        except ValueError:   # a stdlib outside the prefix (some distributions' layouts)
            return "{stdlib}"
    return str(root)


def stdlib_dir() -> Path:
    """The running interpreter's standard-library folder."""
    return Path(sysconfig.get_paths()["stdlib"])


def eligible_files(root: Path | None = None) -> list[Path]:
    """The top-level public modules of the standard library, sorted by name (see the docstring)."""
    root = stdlib_dir() if root is None else Path(root)
    files = sorted(p for p in root.glob("*.py")
                   if not p.name.startswith("_") and p.name not in EXCLUDED and p.is_file())
    if not files:
        raise FileNotFoundError(f"no top-level .py modules under {root}: is this the standard "
                                f"library folder (sysconfig.get_paths()['stdlib'])?")
    return files


def is_validation(name: str, seed: int = SPLIT_SEED) -> bool:
    """The seeded split by file: a function of the file's name only."""
    h = int.from_bytes(hashlib.sha256(f"{seed}:{name}".encode()).digest()[:8], "big")
    return h < VALID_FRACTION * 2**64


@dataclass
class SourceFile:
    name: str
    text: str  # decoded with the file's own encoding cookie, newlines normalised to \n
    n_bytes: int
    sha256: str


@dataclass
class Corpus:
    """The standard library's files, split, with a character tokenizer and provenance."""

    train: list[SourceFile]
    valid: list[SourceFile]
    chars: list[str]  # id -> character; chars[0] is UNK
    provenance: dict
    counts: np.ndarray | None = None  # (vocab,) occurrences in the training files (id 0: unknowns)
    _stoi: dict = field(default_factory=dict, repr=False)
    _labels: dict = field(default_factory=dict, repr=False)

    def __post_init__(self):
        self._stoi = {c: i for i, c in enumerate(self.chars)}

    @property
    def vocab_size(self) -> int:
        return len(self.chars)

    @property
    def content_hash(self) -> str:
        return self.provenance["content_hash"]

    def encode(self, text: str) -> np.ndarray:
        """Characters -> ids (int64); a character outside the vocabulary becomes 0 (UNK)."""
        get = self._stoi.get
        return np.fromiter((get(c, 0) for c in text), dtype=np.int64, count=len(text))

    def decode(self, ids) -> str:
        return "".join(self.chars[int(i)] for i in ids)

    def file(self, name: str) -> SourceFile:
        for f in self.train + self.valid:
            if f.name == name:
                return f
        raise KeyError(f"{name!r} is not in this corpus ({len(self.train) + len(self.valid)} files)")

    def labels(self, name: str) -> dict:
        """Per-character labels of one file (cached): {"bracket": (n,), "ident": (n,)} key
        positions in the file or -1, and "pairs" (k, 2) opener/closer offsets."""
        if name not in self._labels:
            self._labels[name] = file_labels(self.file(name).text)
        return self._labels[name]


def load_corpus(root: Path | None = None, seed: int = SPLIT_SEED) -> Corpus:
    """Read, split and tokenize the standard library (about a second for ~4 MB)."""
    root = stdlib_dir() if root is None else Path(root)
    train: list[SourceFile] = []
    valid: list[SourceFile] = []
    listing: list[dict[str, Any]] = []
    h = hashlib.sha256()
    for p in eligible_files(root):
        raw = p.read_bytes()
        with tokenize.open(p) as fh:  # honours the encoding cookie; universal newlines
            text = fh.read()
        f = SourceFile(p.name, text, len(raw), hashlib.sha256(raw).hexdigest())
        h.update(p.name.encode() + b"\0" + raw + b"\0")
        (valid if is_validation(p.name, seed) else train).append(f)
        listing.append({"name": p.name, "bytes": len(raw), "chars": len(text),
                        "split": "valid" if is_validation(p.name, seed) else "train"})
    counts: Counter[str] = Counter()
    for f in train:
        counts.update(f.text)
    chars = [UNK] + sorted(c for c, n in counts.items() if n >= MIN_CHAR_COUNT and c != UNK)
    prov = {
        "what": "Python standard library, top-level public modules (andrea_edu.heads.text_corpus)",
        "python": sys.version.split()[0], "implementation": sys.implementation.name,
        "stdlib": stdlib_label(root), "split_seed": seed, "valid_fraction": VALID_FRACTION,
        "n_files": len(listing), "n_train_files": len(train), "n_valid_files": len(valid),
        "train_chars": sum(len(f.text) for f in train),
        "valid_chars": sum(len(f.text) for f in valid),
        "total_bytes": sum(x["bytes"] for x in listing), "vocab_size": len(chars),
        "unk_share_train": round(sum(n for c, n in counts.items() if c not in chars)
                                 / max(1, sum(counts.values())), 6),
        "content_hash": h.hexdigest(), "files": listing,
    }
    freq = np.array([0] + [counts[c] for c in chars[1:]], dtype=np.int64)
    freq[0] = sum(counts.values()) - freq.sum()
    return Corpus(train, valid, chars, prov, counts=freq)


_CACHE: dict = {}


def corpus_cached(root: Path | None = None, seed: int = SPLIT_SEED) -> Corpus:
    """`load_corpus`, once per (root, seed) per process."""
    key = (str(root), seed)
    if key not in _CACHE:
        _CACHE[key] = load_corpus(root, seed)
    return _CACHE[key]


def same_corpus(provenance: dict, corpus: Corpus | None = None) -> tuple[bool, str]:
    """(same, a sentence saying what is compared): is `provenance` (e.g. of a committed run) about
    this machine's corpus? Different hashes are not an error: the caller says what it compares."""
    c = corpus or corpus_cached()
    theirs, ours = provenance.get("content_hash"), c.content_hash
    if theirs == ours:
        return True, (f"the same corpus (Python {c.provenance['python']}, {c.provenance['n_files']} "
                      f"files, content hash {ours[:12]})")
    return False, (f"another corpus: the committed run read Python {provenance.get('python')}'s "
                   f"standard library (hash {str(theirs)[:12]}), this machine has Python "
                   f"{c.provenance['python']}'s (hash {ours[:12]}); the comparison is between "
                   f"two corpora of the same kind, not a reproduction")


# ---------------------------------------------------------------- labels from the parser
def _line_starts(text: str) -> list[int]:
    """Offsets of the lines that tokenize sees (split on \\n only, as readline does)."""
    starts, pos = [0], 0
    for line in io.StringIO(text, newline="\n"):
        pos += len(line)
        starts.append(pos)
    return starts


def python_tokens(text: str):
    """(type, string, start offset, end offset) of every token of `text`, offsets in characters."""
    starts = _line_starts(text)
    for tok in tokenize.generate_tokens(io.StringIO(text, newline="\n").readline):
        (r0, c0), (r1, c1) = tok.start, tok.end
        if r0 - 1 >= len(starts) or r1 - 1 >= len(starts):
            continue  # ENDMARKER past the last line
        yield tok.type, tok.string, starts[r0 - 1] + c0, starts[r1 - 1] + c1


def bracket_pairs(text: str) -> np.ndarray:
    """(k, 2) int64: (opener offset, closer offset) of every ()[]{} pair that tokenize reports as
    an operator, in closing order. An unbalanced or mismatched bracket raises ValueError."""
    stack, pairs = [], []
    for typ, s, a, _ in python_tokens(text):
        if typ != tokenize.OP:
            continue
        if s in OPEN_TO_CLOSE:
            stack.append((s, a))
        elif s in OPEN_TO_CLOSE.values():
            if not stack or OPEN_TO_CLOSE[stack[-1][0]] != s:
                raise ValueError(f"unmatched {s!r} at character {a}")
            pairs.append((stack.pop()[1], a))
    if stack:
        raise ValueError(f"{len(stack)} bracket(s) never closed, first at character {stack[0][1]}")
    return np.array(pairs, dtype=np.int64).reshape(-1, 2)


def identifier_occurrences(text: str) -> list[tuple[str, int, int]]:
    """(name, start, end) of every NAME token that is not a keyword, in order."""
    return [(s, a, b) for typ, s, a, b in python_tokens(text)
            if typ == tokenize.NAME and not keyword.iskeyword(s)]


def file_labels(text: str) -> dict:
    """Key position of each query position for the bracket and identifier patterns (-1: none)."""
    n = len(text)
    bracket = np.full(n, -1, dtype=np.int64)
    ident = np.full(n, -1, dtype=np.int64)
    pairs = bracket_pairs(text)
    for o, c in pairs:
        if c >= 1:
            bracket[c - 1] = o  # the position that predicts the closer looks at its opener
    last: dict[str, int] = {}
    for name, a, b in identifier_occurrences(text):
        if name in last:
            p = last[name]
            for i in range(len(name) - 1):
                ident[a + i] = p + i + 1  # the character the earlier copy has next
        last[name] = a
    return {"bracket": bracket, "ident": ident, "pairs": pairs}


# ---------------------------------------------------------------- windows and batches
def _window_offsets(files, n: int, T: int, rng: random.Random):
    """n (file, start) pairs, files drawn in proportion to their length, starts uniform."""
    usable = [f for f in files if len(f.text) > T + 1]
    weights = [len(f.text) - T - 1 for f in usable]
    out = []
    for f in rng.choices(usable, weights, k=n):
        out.append((f, rng.randrange(len(f.text) - T - 1)))
    return out


def train_batch(corpus: Corpus, B: int, T: int, rng: random.Random) -> tuple[torch.Tensor, torch.Tensor]:
    """(idx, targets), each (B, T), from random windows of the training files (no labels)."""
    rows = [corpus.encode(f.text[s: s + T + 1]) for f, s in _window_offsets(corpus.train, B, T, rng)]
    a = torch.from_numpy(np.stack(rows))  # (B, T+1)
    return a[:, :-1], a[:, 1:]


def labelled_batch(corpus: Corpus, B: int, T: int, seed: int, split: str = "valid") -> Batch:
    """B labelled windows of the validation (or training) files, a function of `seed`."""
    files = {"valid": corpus.valid, "train": corpus.train}[split]
    rng = random.Random(seed)
    idx, keys, where = [], [], []
    for f, s in _window_offsets(files, B, T, rng):
        idx.append(corpus.encode(f.text[s: s + T + 1]))
        lab = corpus.labels(f.name)
        k = np.full((3, T), -1, dtype=np.int64)
        k[PREV, 1:] = np.arange(T - 1)
        for p, name in ((BRACKET, "bracket"), (IDENT, "ident")):
            kk = lab[name][s: s + T] - s  # window-relative key
            kk[(lab[name][s: s + T] < 0) | (kk < 0)] = -1  # no label, or key before the window
            k[p] = kk
        keys.append(k)
        where.append((f.name, s))
    a = torch.from_numpy(np.stack(idx))  # (B, T+1)
    key = torch.from_numpy(np.stack(keys, axis=1))  # (3, B, T)
    return Batch(idx=a[:, :-1], targets=a[:, 1:], key=key, where=where)


BRACKET_QUERIES = ("before", "closer")


def bracket_queries(batch: Batch, at: str) -> Batch:
    """`batch` with the bracket pattern's queries moved: at="before" (the labels as made: the
    character before each closer, the one that predicts it) or at="closer" (the closing bracket
    itself, one position later; a closer whose predecessor is the window's last character falls
    out). The key stays the opener; the other patterns are unchanged."""
    if at not in BRACKET_QUERIES:
        raise ValueError(f"at={at!r} is not a bracket query position; allowed: "
                         f"{', '.join(map(repr, BRACKET_QUERIES))}")
    key = batch.key.clone()
    if at == "closer":
        key[BRACKET] = -1
        key[BRACKET, :, 1:] = batch.key[BRACKET, :, :-1]
    return Batch(idx=batch.idx, targets=batch.targets, key=key, floor=batch.floor,
                 where=list(batch.where))
