"""The experiments behind the exercises of "Why heads specialize" (andrea_edu.heads.experiments):
each knob does what its exercise says, and a value outside what exists stops in one line."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from andrea_edu.heads import corpus as C
from andrea_edu.heads import experiments as X
from andrea_edu.heads import training as S

TINY = S.Settings(n_head=2, d_model=16, n_layer=2, seq_len=12, batch_size=4, steps=6,
                  eval_every=2, eval_batch=8, n_probes=2, probe_batch=4)


@pytest.fixture(scope="module")
def tiny_run():
    return S.train(TINY, progress=False)


def test_the_corpus_as_it_is_gives_back_the_run_untrained(tiny_run, monkeypatch):
    monkeypatch.setattr(X, "train", lambda *a, **k: pytest.fail("trained"))
    assert X.run_with_corpus(TINY, tiny_run, segment_weights=C.SEGMENT_WEIGHTS) is tiny_run
    assert X.run_with_corpus(TINY, tiny_run, max_depth=C.MAX_DEPTH) is tiny_run


def test_another_corpus_trains_a_new_run_on_it(tiny_run):
    r = X.run_with_corpus(TINY, tiny_run, segment_weights=(0.5, 0.5, 0.0), progress=False)
    assert r is not tiny_run and np.isnan(r.final_loss["recent entity"])
    assert C.SEGMENT_WEIGHTS == (0.2, 0.4, 0.4)  # the corpus is back as it was
    line = X.head_line(r, (0, 1))
    assert "recent entity: none in the batch" in line and line.startswith("L0H1: score")
    with pytest.raises(ValueError, match="max_depth=7 is not allowed"):
        X.run_with_corpus(TINY, tiny_run, max_depth=7)


def test_carrier_and_copy_pair_read_the_ablation_table(tiny_run):
    a = tiny_run.ablation
    l, h = X.carrier(tiny_run, "previous token")
    assert a[l, h, 1] == np.nanmax(a[..., 1])
    layer, src, dst = X.copy_pair(tiny_run, tol=10.0)
    worst = np.nanmax(a, axis=-1)
    assert src != dst and worst[layer, dst] == worst.min() and worst[layer, src] == worst[layer].max()


def test_the_overwritten_head_is_idle_for_every_pattern_not_only_the_total(tiny_run):
    """Issue 38 item 7: exercise 3 overwrote a bracket head whose removal moved the total loss
    little; a head that carries one pattern is not idle, and a run with no idle head says so."""
    import copy
    r = copy.copy(tiny_run)
    a = np.zeros((2, 3, 4))
    a[0] = [[0.3, 0.2, 0.0, 0.9], [0.01, 0.0, 0.375, 0.0], [0.2, 0.2, 0.1, 0.0]]
    a[1] = [[0.5, 0.0, 0.0, 0.0], [0.02, 0.02, 0.0, 0.0], [0.1, 0.3, 0.0, 0.0]]
    r.ablation = a     # layer 0: no idle head (head 1 carries brackets); layer 1: head 1 is idle
    assert X.copy_pair(r) == (1, 0, 1)
    r.ablation = a + 0.1
    with pytest.raises(ValueError, match="no head of this run is idle"):
        X.copy_pair(r)


@pytest.mark.parametrize("call, words", [
    (lambda r: X.carrier(r, "verbs"), "pattern='verbs' is not allowed; one of previous token"),
    (lambda r: X.head_line(r, (2, 0)), "head=(2, 0) is not allowed; a (layer, head) pair"),
    (lambda r: X.copy_pair(r, tol=0), "tol=0 is not allowed"),
    (lambda r: X.pattern_progress(r, "matching bracket", tol=0), "tol=0 is not allowed"),
    (lambda r: X.duplicate_head(r.model, 0, 1, 1), "dst=1 is not allowed; a head other than src"),
    (lambda r: X.duplicate_head(r.model, 0, 0, 2), "dst=2 is not allowed; an int in 0..1"),
    (lambda r: X.train_on(r.model, TINY, -1, ((0, 0), (0, 1))), "steps=-1 is not allowed"),
    (lambda r: X.train_on(r.model, TINY, 2, ((0, 0), (1, 1))), "two heads of one layer"),
])
def test_values_outside_what_exists_are_one_line(tiny_run, call, words):
    with pytest.raises(ValueError) as e:
        call(tiny_run)
    assert words in str(e.value) and "\n" not in str(e.value), str(e.value)


def test_a_copied_head_is_the_source_with_its_output_shared(tiny_run):
    m = tiny_run.model
    before = {k: v.clone() for k, v in m.state_dict().items()}
    twin = X.duplicate_head(m, 1, 0, 1)
    assert all(torch.equal(v, m.state_dict()[k]) for k, v in before.items())  # untouched
    att, att0 = twin.blocks[1].attn, m.blocks[1].attn
    hs, C_ = 8, 16
    for part in range(3):
        src = att0.c_attn[:, part * C_: part * C_ + hs]
        assert torch.equal(att.c_attn[:, part * C_ + hs: part * C_ + 2 * hs], src)
    assert torch.equal(att.W_O[hs:], att0.W_O[:hs] / 2) and torch.equal(att.W_O[:hs], att0.W_O[:hs] / 2)


def test_exact_copies_get_equal_gradients_and_stay_together(tiny_run):
    twin = X.duplicate_head(tiny_run.model, 0, 0, 1)
    t = X.train_on(twin, TINY, 5, pair=((0, 0), (0, 1)))
    assert t.grad.shape == (5, 2) and t.distance.shape == (6,)
    assert np.allclose(t.grad[:, 0], t.grad[:, 1], rtol=1e-5, atol=0)
    assert t.distance.max() < 1e-5
    assert "5 steps trained on" in t.says()
    none = X.train_on(X.duplicate_head(tiny_run.model, 0, 0, 1), TINY, 0, pair=((0, 0), (0, 1)))
    assert "no step trained" in none.says() and none.loss_before == none.loss_after


def test_pattern_progress_says_when_and_which_head(tiny_run):
    line = X.pattern_progress(tiny_run, "previous token", tol=100.0)
    assert line.startswith("previous token: loss within 100 nats of its floor from step 0")
    assert "best head L" in line and "the threshold 0.5" in line
    assert "not within 1e-09 nats" in X.pattern_progress(tiny_run, "previous token", tol=1e-9)
