"""The three-pattern corpus: every label is checked against an independent reading of the tokens."""
import math
import random

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from andrea_edu.heads import corpus as C


def _check_sequence(toks: list[str], pattern: list[int], key: list[int], floor: list[float],
                    targets: list[str]) -> dict:
    """Re-derive each position's label from the tokens alone; returns counts per pattern."""
    stack = []  # (position, opener) of the open brackets, innermost last
    last_entity = None
    seen = {C.POSITIONAL: 0, C.SYNTACTIC: 0, C.SEMANTIC: 0}
    for t, (tok, tgt) in enumerate(zip(toks, targets)):
        if tok in C.OPENERS:
            stack.append((t, tok))
        elif tok in C.CLOSERS:
            assert stack, f"closer {tok!r} at {t} has no open bracket"  # sequences start whole
            pos, opener = stack.pop()
            assert C.CLOSERS.index(tok) == C.OPENERS.index(opener)
        if tok in C.ENTITIES:
            last_entity = t
        p = pattern[t]
        if p == C.SYNTACTIC:
            assert tgt in C.CLOSERS
            pos, opener = stack[-1]  # the innermost open bracket
            assert key[t] == pos
            assert C.CLOSERS.index(tgt) == C.OPENERS.index(opener)
            assert floor[t] == pytest.approx(math.log(2)) or floor[t] == 0.0
        elif p == C.SEMANTIC:
            assert tok == C.REF
            assert key[t] == last_entity
            assert tgt == toks[last_entity] and tgt in C.ENTITIES
            assert floor[t] == 0.0
        elif p == C.POSITIONAL:
            assert t >= 1 and key[t] == t - 1
            prev = toks[t - 1]
            if prev in C.DIGITS:
                assert tgt == C.DIGITS[C.DIGITS.index(prev) + 1]
            else:
                assert tgt == C.LETTERS[(C.LETTERS.index(prev) + 1) % len(C.LETTERS)]
            assert floor[t] == 0.0
        else:
            assert p == C.NONE and key[t] == -1 and floor[t] == 0.0
        if tgt in C.CLOSERS:  # every closing bracket is a labelled target
            assert p == C.SYNTACTIC
        if tok == C.REF:  # every reference is labelled
            assert p == C.SEMANTIC
        if p:
            seen[p] += 1
    return seen


@pytest.mark.parametrize("seed", [0, 1, 7])
def test_every_label_agrees_with_the_tokens(seed):
    b = C.make_batch(32, 64, seed=seed)
    total = {C.POSITIONAL: 0, C.SYNTACTIC: 0, C.SEMANTIC: 0}
    pattern, key = C.labels(b)
    assert b.floor is not None
    for i in range(32):
        seen = _check_sequence(C.tokens(b, i), pattern[i].tolist(), key[i].tolist(),
                               b.floor[i].tolist(), C.decode(b.targets[i]))
        for p in total:
            total[p] += seen[p]
    assert all(n > 20 for n in total.values()), total  # every pattern is well represented


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), T=st.integers(1, 80))
def test_labels_hold_for_any_seed_and_length(seed, T):
    b = C.make_batch(2, T, seed=seed)
    pattern, key = C.labels(b)
    assert b.floor is not None
    assert b.idx.shape == b.targets.shape == pattern.shape == b.floor.shape == (2, T)
    assert b.key.shape == (3, 2, T)
    assert torch.equal(b.idx[:, 1:], b.targets[:, :-1])  # targets are the next tokens
    for i in range(2):
        _check_sequence(C.tokens(b, i), pattern[i].tolist(), key[i].tolist(),
                        b.floor[i].tolist(), C.decode(b.targets[i]))
    assert (key < torch.arange(T) + 1).all()  # the answer is never in the future
    # One label per position: pattern p's row holds the key exactly where p decides, -1 elsewhere.
    assert ((b.key >= 0).sum(dim=0) <= 1).all()
    for p, label in enumerate(C.PATTERN_IDS):
        assert torch.equal(b.mask(p), pattern == label)
        assert torch.equal(b.key_of(p), torch.where(pattern == label, key, -1))
    assert torch.equal(C.from_labels(b.idx, b.targets, pattern, key, b.floor).key, b.key)


def test_from_labels_refuses_labels_that_do_not_fit():
    z = torch.zeros(1, 3, dtype=torch.long)
    for pat, key, words in (([[0, 5, 0]], [[-1, 0, -1]], "pattern must hold"),
                            ([[0, C.POSITIONAL, 0]], [[-1, -1, -1]], "key must be >= 0"),
                            ([[0, 0, 0]], [[-1, -1, 1]], "key must be >= 0")):
        with pytest.raises(ValueError, match=words) as e:
            C.from_labels(z, z, torch.tensor(pat), torch.tensor(key), torch.zeros(1, 3))
        assert "\n" not in str(e.value)


def test_brackets_balance_within_each_segment():
    rng = random.Random(3)
    for _ in range(200):
        st_ = C._Stream()
        C._pair(rng, st_, 1)
        depth, max_depth = 0, 0
        for tok in C.decode(st_.tok):
            depth += (tok in C.OPENERS) - (tok in C.CLOSERS)
            max_depth = max(max_depth, depth)
            assert depth >= 0
        assert depth == 0 and 1 <= max_depth <= C.MAX_DEPTH


def test_references_point_at_the_latest_entity_across_segments():
    # Back-references ("REF <entity>" with no entity in its own round) must occur and be right.
    b = C.make_batch(64, 64, seed=11)
    far = 0
    for i in range(64):
        toks = C.tokens(b, i)
        sem = C.PATTERN_IDS.index(C.SEMANTIC)
        for t in torch.nonzero(b.mask(sem)[i]).flatten().tolist():
            k = int(b.key_of(sem)[i, t])
            assert toks[k] in C.ENTITIES
            assert not any(x in C.ENTITIES for x in toks[k + 1 : t + 1])  # nothing newer
            far += (t - k) > 4
    assert far > 0


def test_same_seed_same_batch_and_different_seed_different_batch():
    a, b, c = C.make_batch(8, 40, seed=5), C.make_batch(8, 40, seed=5), C.make_batch(8, 40, seed=6)
    for f in ("idx", "targets", "key", "floor"):
        assert torch.equal(getattr(a, f), getattr(b, f))
    assert not torch.equal(a.idx, c.idx)
    r1, r2 = random.Random(9), random.Random(9)
    assert torch.equal(C.make_batch(4, 30, rng=r1).idx, C.make_batch(4, 30, rng=r2).idx)


def test_vocabulary_round_trip_and_errors():
    assert len(set(C.VOCAB)) == C.VOCAB_SIZE
    toks = ["Anna", "met", "REF", "Anna", "(", "x", ")"]
    assert C.decode(C.encode(toks)) == toks
    with pytest.raises(ValueError, match="'Zed'"):
        C.encode(["Zed"])
    with pytest.raises(ValueError, match="seq_len"):
        C.make_batch(2, 0, seed=1)
    with pytest.raises(ValueError, match="batch_size"):
        C.make_batch(-1, 8, seed=1)
    with pytest.raises(ValueError, match="exactly one of seed or rng"):
        C.make_batch(2, 8)


# ------------------------------------------------------------------ variants (the chapter's exercises)
@pytest.mark.parametrize("kw, words", [
    (dict(segment_weights=(0.2, 0.8)), "segment_weights=(0.2, 0.8) is not allowed; three numbers"),
    (dict(segment_weights=(0, 0, 0)), "not all 0"),
    (dict(segment_weights=(0.2, -0.1, 0.9)), "segment_weights"),
    (dict(segment_weights=(0.2, float("nan"), 0.9)), "segment_weights"),
    (dict(max_depth=0), "max_depth=0 is not allowed; an int in 1..5"),
    (dict(max_depth=9), "max_depth=9 is not allowed; an int in 1..5"),
    (dict(max_depth=2.0), "max_depth=2.0"),
])
def test_a_variant_outside_what_the_corpus_allows_is_one_line(kw, words):
    with pytest.raises(ValueError) as e:
        with C.variant(**kw):
            pass
    assert words in str(e.value) and "\n" not in str(e.value)


def test_a_variant_changes_the_batches_drawn_inside_it_and_nothing_after():
    before = C.SEGMENT_WEIGHTS, C.MAX_DEPTH
    with C.variant(segment_weights=(0.2, 0.8, 0.0)):
        b = C.make_batch(16, 48, seed=1)
        assert not b.mask(C.PATTERN_IDS.index(C.SEMANTIC)).any()
    with C.variant(max_depth=3):
        deep = C.make_batch(64, 48, seed=1)
    assert (C.SEGMENT_WEIGHTS, C.MAX_DEPTH) == before
    assert torch.equal(C.make_batch(16, 48, seed=1).idx, C.make_batch(16, 48, seed=1).idx)

    def depth(toks):
        d = best = 0
        for t in toks:
            d += (t in C.OPENERS) - (t in C.CLOSERS)
            best = max(best, d)
        return best
    assert max(depth(C.tokens(deep, i)) for i in range(64)) == 3
    assert max(depth(C.tokens(C.make_batch(64, 48, seed=1), i)) for i in range(64)) == 2
