"""A seeded synthetic corpus whose next tokens are decided by three kinds of pattern.

Introduced in the chapter "Why heads specialize": the source names positional, syntactic and
semantic heads; this corpus holds one pattern of each kind, and labels every position with the
pattern (if any) that decides its next token and the earlier position that holds the answer.
Nothing is downloaded: a sequence is a run of segments drawn with Python's `random.Random(seed)`.

Segments (drawn with SEGMENT_WEIGHTS; the first token of a segment says which kind it is):

positional, "previous token"  two interleaved counters, a digit and a letter:
        3 c 4 d 5 e 6 f 7 g
    The digits run up from a random start (3, 4 or 5) to 7, then the segment ends; the letters
    run a..h cyclically from a random start. The token after position t is the successor of the token at
    t-1 (SUCC), so it is decided by the *previous* token, not the current one: a model must look
    one position back. Key position: t-1.
syntactic, "matching bracket"  nested brackets of four types with content tokens x y z:
        ( x [ y z ] { x y } ) < z [ x y z ] >
    Every pair holds 2 or 3 items (an item: a content token, or a nested pair while the depth is
    below MAX_DEPTH). A closing bracket has the type of the innermost open bracket, which is not
    the most recent opener whenever a nested pair came in between. Key position: that opener. Its *type* is certain; *when* it comes is not (after
    2 items it is a coin flip whether a third item follows), so the closing positions carry an
    irreducible loss of ln 2 at worst, recorded in `floor`.
semantic, "recent entity"  named entities, filler words, then a reference:
        Anna met Bo saw and REF Bo
    REF is always followed by the most recent named entity of the whole sequence so far. A segment
    is 1-3 rounds; a round names 1-2 entities (1-3 fillers after each) and then refers, or, with
    probability P_BACKREF, is a bare "REF <entity>" that refers back to the latest entity named,
    across whatever segments lie in between. Key position: that entity. With 12 names, copying
    *some* entity of the context already helps, and copying the *latest* one solves it.

Every label sits on the query position t whose target (the token at t+1) the pattern decides;
`make_batch` returns the one labelled `heads.batch.Batch` of both laboratories.
"""
from __future__ import annotations

import contextlib
import math
import random

import torch

from andrea_edu.heads.batch import Batch

DIGITS = [str(i) for i in range(8)]  # the digit counter runs up to "7"
LETTERS = list("abcdefgh")  # the letter counter wraps around: h -> a
OPENERS = ["(", "[", "{", "<"]
CLOSERS = [")", "]", "}", ">"]
CONTENT = ["x", "y", "z"]
ENTITIES = ["Anna", "Bo", "Cleo", "Dan", "Eva", "Finn", "Gus", "Hana", "Ivo", "Jon", "Kim", "Lea"]
FILLERS = ["met", "saw", "and"]
REF = "REF"
VOCAB = DIGITS + LETTERS + OPENERS + CLOSERS + CONTENT + ENTITIES + FILLERS + [REF]
STOI = {s: i for i, s in enumerate(VOCAB)}
VOCAB_SIZE = len(VOCAB)

# Pattern labels. NONE: the next token is free (a content token, a filler, a new segment...).
NONE, POSITIONAL, SYNTACTIC, SEMANTIC = 0, 1, 2, 3
PATTERNS = {POSITIONAL: "previous token", SYNTACTIC: "matching bracket", SEMANTIC: "recent entity"}
PATTERN_IDS = tuple(PATTERNS)  # the label of pattern p = 0, 1, 2 (the measures' order)
PATTERN_KIND = {POSITIONAL: "positional", SYNTACTIC: "syntactic", SEMANTIC: "semantic"}

MAX_DEPTH = 2  # brackets nest at most two deep (three learns too slowly for a CPU budget)
P_NEST = 0.4  # an item inside a pair is a nested pair with this probability (below MAX_DEPTH)
P_BACKREF = 0.25  # a semantic round is a bare "REF <entity>" with this probability
FIRST_DIGIT_MIN = 3  # the digit counter starts at 3, 4 or 5: segments of 10, 8 or 6 tokens
SEGMENT_WEIGHTS = (0.2, 0.4, 0.4)  # positional, syntactic, semantic
DEPTHS = range(1, 6)  # nesting depths `variant` accepts (deeper pairs rarely fit in a sequence)


def decode(ids) -> list[str]:
    """Token ids -> token strings."""
    return [VOCAB[int(i)] for i in ids]


def encode(tokens) -> list[int]:
    """Token strings -> ids; an unknown token raises ValueError naming it and the vocabulary."""
    out = []
    for s in tokens:
        if s not in STOI:
            raise ValueError(f"token {s!r} is not in the vocabulary: {VOCAB}")
        out.append(STOI[s])
    return out


class _Stream:
    """A growing token stream; each token carries the label of the position that predicts it."""

    def __init__(self):
        self.tok: list[int] = []
        self.pat: list[int] = []  # pattern that decides this token (NONE if free)
        self.src: list[int] = []  # position of the token that holds the answer, or -1
        self.nll: list[float] = []  # -ln P(this token | everything before), for decided tokens
        self.last_entity = -1  # position of the most recent named entity

    def add(self, s: str, pat: int = NONE, src: int = -1, nll: float = 0.0) -> int:
        self.tok.append(STOI[s])
        self.pat.append(pat)
        self.src.append(src)
        self.nll.append(nll)
        if s in ENTITIES:
            self.last_entity = len(self.tok) - 1
        return len(self.tok) - 1


def _positional(rng: random.Random, st: _Stream) -> None:
    d, l = rng.randrange(FIRST_DIGIT_MIN, len(DIGITS) - 2), rng.randrange(len(LETTERS))
    st.add(DIGITS[d])
    st.add(LETTERS[l])
    while d < len(DIGITS) - 1:
        d, l = d + 1, (l + 1) % len(LETTERS)
        for s in (DIGITS[d], LETTERS[l]):
            n = len(st.tok)
            st.add(s, POSITIONAL, src=n - 2)  # decided by the token before the query


def _pair(rng: random.Random, st: _Stream, depth: int) -> None:
    kind = rng.randrange(len(OPENERS))
    opener = st.add(OPENERS[kind])
    n_items = rng.choice((2, 3))
    for _ in range(n_items):
        if depth < MAX_DEPTH and rng.random() < P_NEST:
            _pair(rng, st, depth + 1)
        else:
            st.add(rng.choice(CONTENT))
    # P(close now | history): after 2 items a coin flip (n_items was 2 or 3), after 3 certain.
    p_close = 0.5 if n_items == 2 else 1.0
    st.add(CLOSERS[kind], SYNTACTIC, src=opener, nll=-math.log(p_close))


def _semantic(rng: random.Random, st: _Stream) -> None:
    for _ in range(rng.randint(1, 3)):
        if st.last_entity < 0 or rng.random() >= P_BACKREF:
            for name in rng.sample(ENTITIES, rng.randint(1, 2)):
                st.add(name)
                for _ in range(rng.randint(1, 3)):
                    st.add(rng.choice(FILLERS))
        st.add(REF)
        target = st.last_entity
        st.add(VOCAB[st.tok[target]], SEMANTIC, src=target)


_SEGMENTS = (_positional, lambda rng, st: _pair(rng, st, 1), _semantic)


def generate_stream(rng: random.Random, length: int) -> _Stream:
    """At least `length` tokens of whole segments, drawn with weights SEGMENT_WEIGHTS."""
    st = _Stream()
    while len(st.tok) < length:
        rng.choices(_SEGMENTS, SEGMENT_WEIGHTS)[0](rng, st)
    return st


def from_labels(idx: torch.Tensor, targets: torch.Tensor, pattern: torch.Tensor, key: torch.Tensor,
                floor: torch.Tensor) -> Batch:
    """The labelled `Batch` of B sequences of T positions from the toy's one label per position:
    pattern[b, t] the pattern that decides targets[b, t] (NONE, POSITIONAL, SYNTACTIC, SEMANTIC),
    key[b, t] the position (< t+1) that holds the answer (-1 where pattern is NONE), floor[b, t]
    the irreducible loss -ln P(targets[b, t] | idx[b, :t+1]) of a decided target (0 except at
    closers). Pattern p's row of the batch's key (p = 0, 1, 2: PATTERN_IDS' order) holds key
    where pattern is PATTERN_IDS[p], -1 elsewhere; `labels` gives (pattern, key) back. Labels
    that do not fit (a pattern outside NONE..SEMANTIC, a labelled position without a key >= 0,
    a key on an unlabelled one) raise ValueError."""
    if pattern.shape != key.shape or bool(((pattern < NONE) | (pattern > SEMANTIC)).any()):
        seen = sorted(set(pattern.flatten().tolist()))
        raise ValueError(f"pattern must hold {NONE}..{SEMANTIC} (NONE, POSITIONAL, SYNTACTIC, "
                         f"SEMANTIC) in key's shape {tuple(key.shape)}, got shape "
                         f"{tuple(pattern.shape)}, values {seen}")
    if bool(((pattern != NONE) != (key >= 0)).any()):
        raise ValueError("key must be >= 0 exactly where pattern is not NONE (a labelled position "
                         "names its answer's position, an unlabelled one -1)")
    rows = torch.full((len(PATTERN_IDS),) + tuple(pattern.shape), -1, dtype=torch.long)
    for p, label in enumerate(PATTERN_IDS):
        at = pattern == label
        rows[p][at] = key[at]
    return Batch(idx=idx, targets=targets, key=rows, floor=floor)


def labels(batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
    """(pattern, key), each (B, T): the toy's one label per position (`from_labels`), read back
    from the batch's per-pattern rows (NONE and -1 where no pattern labels the position)."""
    pattern = torch.full(tuple(batch.idx.shape), NONE, dtype=torch.long)
    for p, label in enumerate(PATTERN_IDS):
        pattern[batch.mask(p)] = label
    return pattern, batch.key.max(dim=0).values


def tokens(batch: Batch, b: int = 0) -> list[str]:
    """The input tokens of sequence b, as strings (figure labels)."""
    return decode(batch.idx[b])


def make_batch(batch_size: int, seq_len: int, seed: int | None = None,
               rng: random.Random | None = None) -> Batch:
    """A labelled batch (`from_labels`): give `seed` (the batch is a function of it) or a running
    `rng`."""
    for name, v in (("batch_size", batch_size), ("seq_len", seq_len)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"{name} must be a positive int, got {v!r}")
    if (seed is None) == (rng is None):
        raise ValueError(f"give exactly one of seed or rng, got seed={seed!r}, rng={rng!r}")
    from andrea_edu.layout import memory_problem  # Python lists first: ~200 bytes a position
    too_big = memory_problem(f"batch_size={batch_size} x seq_len={seq_len}",
                             200 * batch_size * (seq_len + 1))
    if too_big:
        raise ValueError(too_big)
    rng = random.Random(seed) if rng is None else rng
    rows = []
    for _ in range(batch_size):
        st = generate_stream(rng, seq_len + 1)
        rows.append([x[: seq_len + 1] for x in (st.tok, st.pat, st.src, st.nll)])
    tok = torch.tensor([r[0] for r in rows], dtype=torch.long)  # (B, T+1)
    pat = torch.tensor([r[1][1:] for r in rows], dtype=torch.long)  # (B, T): label of t+1 on t
    src = torch.tensor([r[2][1:] for r in rows], dtype=torch.long)  # (B, T)
    nll = torch.tensor([r[3][1:] for r in rows], dtype=torch.float32)  # (B, T)
    return from_labels(tok[:, :-1], tok[:, 1:], pat, src, nll)


def check_variant(segment_weights=None, max_depth=None) -> None:
    """ValueError (one line: the parameter, its value, what is allowed) unless each given value
    is usable: segment_weights three finite numbers >= 0, not all 0 (shares of positional,
    syntactic and semantic segments); max_depth an int in DEPTHS."""
    if segment_weights is not None:
        w = segment_weights
        ok = (isinstance(w, (tuple, list)) and len(w) == 3 and all(
            isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) and x >= 0
            for x in w) and sum(w) > 0)
        if not ok:
            raise ValueError(f"segment_weights={w!r} is not allowed; three numbers >= 0, not all "
                             f"0 (shares of positional, syntactic, semantic segments)")
    if max_depth is not None and (isinstance(max_depth, bool) or not isinstance(max_depth, int)
                                  or max_depth not in DEPTHS):
        raise ValueError(f"max_depth={max_depth!r} is not allowed; an int in "
                         f"{DEPTHS.start}..{DEPTHS.stop - 1}")


@contextlib.contextmanager
def variant(segment_weights=None, max_depth=None):
    """The corpus with other segment shares and/or nesting depth inside a `with` block (None: as
    it is); everything drawn in the block (training batches, the evaluation batch) follows it.
    Checked first (`check_variant`); the module's values come back when the block ends."""
    global SEGMENT_WEIGHTS, MAX_DEPTH
    check_variant(segment_weights, max_depth)
    before = SEGMENT_WEIGHTS, MAX_DEPTH
    if segment_weights is not None:
        a, b, c = (float(x) for x in segment_weights)
        SEGMENT_WEIGHTS = (a, b, c)
    if max_depth is not None:
        MAX_DEPTH = max_depth
    try:
        yield
    finally:
        SEGMENT_WEIGHTS, MAX_DEPTH = before
