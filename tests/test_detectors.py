"""heads.detectors and heads.text_training: scores against the uniform baseline, verdict margins,
ablation, the run file's validation, and the committed real-text run."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from andrea_lab import make_realtext_run as RR
from andrea_lab.run_writers import save_run
from andrea_edu.data import DataFileError, find_data
from andrea_edu.config import AndreaConfig
from andrea_edu.heads import detectors as D, measures as M
from andrea_edu.heads import text_corpus as tc
from andrea_edu.heads.batch import Batch
from andrea_edu.heads import text_training as TT
from andrea_edu.model import AndreaModel

T = 16


def _batch(B=3):
    """Windows with hand-made labels: every t >= 1 previous token; a bracket at t=5 -> 2; an
    identifier copy at t=9 -> 4."""
    g = torch.Generator().manual_seed(0)
    idx = torch.randint(0, 10, (B, T + 1), generator=g)
    key = torch.full((3, B, T), -1, dtype=torch.long)
    key[tc.PREV, :, 1:] = torch.arange(T - 1)
    key[tc.BRACKET, :, 5] = 2
    key[tc.IDENT, :, 9] = 4
    return Batch(idx=idx[:, :-1], targets=idx[:, 1:], key=key, where=[("x", 0)] * B)


def test_uniform_attention_scores_exactly_the_baseline():
    b = _batch()
    uni = torch.ones(T, T).tril()
    uni = uni / uni.sum(-1, keepdim=True)  # (T, T)
    maps = uni.expand(2, 3, 4, T, T)  # (L, B, nh, T, T)
    S = M.scores_from_maps(maps, b)
    base = M.baseline(b)
    for p in tc.PATTERNS:
        assert torch.allclose(S[p], torch.full((2, 4), base[p], dtype=torch.float32))
    assert base[tc.BRACKET] == pytest.approx(1 / 6) and base[tc.IDENT] == pytest.approx(1 / 10)


def test_a_previous_token_map_scores_one():
    b = _batch()
    prev = torch.zeros(T, T)
    prev[0, 0] = 1
    prev[torch.arange(1, T), torch.arange(T - 1)] = 1
    maps = torch.stack([prev, torch.eye(T)]).reshape(1, 1, 2, T, T).expand(1, 3, 2, T, T)
    S = M.scores_from_maps(maps, b)  # head 0 previous-token, head 1 attends to itself
    assert S[tc.PREV, 0, 0] == 1 and S[tc.PREV, 0, 1] == 0
    assert M.best_heads(S)[tc.PREV] == (0, 0)


def test_key_score_one_key_a_key_set_and_per_query():
    g = torch.Generator().manual_seed(1)
    maps = torch.softmax(torch.randn(2, 3, 4, T, T, generator=g), -1)  # (L, B, nh, T, T)
    b, q, k = torch.tensor([0, 2, 2]), torch.tensor([5, 9, 15]), torch.tensor([1, 9, 3])
    w = M.key_score(maps, b, q, k, per_query=True)  # (n, L, nh)
    assert w.shape == (3, 2, 4) and w[1, 1, 2] == maps[1, 2, 2, 9, 9]
    assert torch.equal(M.key_score(maps, b, q, k), w.mean(0))
    pair = torch.zeros(3, T, dtype=torch.bool)
    pair[torch.arange(3), k] = True
    pair[torch.arange(3), q - 1] = True  # a set of two keys per query: their weights add up
    both = w + M.key_score(maps, b, q, q - 1, per_query=True)
    torch.testing.assert_close(M.key_score(maps, b, q, pair, per_query=True), both)
    assert torch.isnan(M.key_score(maps, b[:0], q[:0], k[:0])).all()  # no query: NaN
    uni = torch.ones(T, T).tril()
    uni = (uni / uni.sum(-1, keepdim=True)).expand(2, 3, 4, T, T)  # uniform causal attention
    torch.testing.assert_close(M.key_score(uni, b, q, pair).double(),
                               torch.full((2, 4), M.uniform_score(q, pair.sum(1)), dtype=torch.float64))
    assert M.uniform_score(q) == pytest.approx((1 / 6 + 1 / 10 + 1 / 16) / 3)
    assert np.isnan(M.uniform_score(q[:0]))
    with pytest.raises(ValueError, match="per_query=1 must be True or False"):
        M.key_score(maps, b, q, k, per_query=1)  # type: ignore[arg-type]


def test_verdict_margins():
    assert D.verdict(0.60, 0.1, tol=0.02) == "found"
    assert D.verdict(0.51, 0.1, tol=0.02) == "within noise of the threshold"
    assert D.verdict(0.49, 0.1, tol=0.02) == "within noise of the threshold"
    assert D.verdict(0.40, 0.1, tol=0.02) == "not found"
    assert D.verdict(float("nan"), 0.1, tol=0.02).startswith("not measured")


def test_ablation_of_a_silent_head_changes_nothing_and_of_a_live_one_something():
    m = AndreaModel(AndreaConfig(d_model=32, n_head=4, n_layer=1, vocab_size=10, block_size=T),
                    seed=0)
    with torch.no_grad():
        m.blocks[0].attn.W_O[8:16] = 0  # head 1 writes nothing
        m.blocks[0].attn.W_O.mul_(20)  # the others write a lot
    b = _batch(4)
    Dt, SE = M.ablation(m, b)
    assert Dt.shape == SE.shape == (1, 4, 4)
    assert np.all(Dt[0, 1] == 0) and np.abs(Dt[0, [0, 2, 3], 0]).min() > 0
    assert torch.equal(m.blocks[0].attn.W_O[8:16], torch.zeros(8, 32))  # restored, still silent


def test_head_scores_in_chunks_equal_one_pass():
    m = AndreaModel(AndreaConfig(d_model=32, n_head=4, n_layer=2, vocab_size=10, block_size=T),
                    seed=1)
    b = _batch(5)
    whole = M.scores_from_maps(m.attention_maps(b.idx), b)
    torch.testing.assert_close(M.head_scores(m, b, chunk=2), whole)
    assert torch.equal(M.head_scores(m, b, chunk=None), whole)  # one pass: the same bits
    torch.testing.assert_close(M.per_position_loss(m, b, chunk=2),
                               M.per_position_loss(m, b, chunk=None))
    bads: tuple = (0, -1, 2.0, "2", True)
    for bad in bads:
        with pytest.raises(ValueError, match=r"^chunk=.*int >= 1") as e:
            M.head_scores(m, b, chunk=bad)
        assert "\n" not in str(e.value)
    with pytest.raises(ValueError, match="chunk"):
        M.attention_maps(m, b, chunk=None)  # type: ignore[arg-type]


# ---------------------------------------------------------------- training and the run file
@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("lib")
    src = 'def f(a, b):\n    return g(a, [b, {1: a}])\n' * 40
    for i in range(8):
        (root / f"m{i}.py").write_text(src + f"v{i} = f({i}, {i})\n")
    corpus = tc.load_corpus(root, seed=1)
    s = TT.TextSettings(n_head=2, d_model=16, n_layer=1, seq_len=24, batch_size=4, steps=6,
                        eval_every=3, eval_batch=4, ablation_batch=4, warmup=2)
    return corpus, s, TT.train(s, progress=False, corpus=corpus)


def test_training_is_repeatable_and_the_first_steps_are_the_runs_first_steps(tiny_run):
    corpus, s, run = tiny_run
    again = TT.train(s, progress=False, stop_after=3, corpus=corpus)
    assert np.array_equal(again.train_loss, run.train_loss[:3])
    assert run.scores.shape == (3, 3, 1, 2) and run.ablation.shape == (1, 2, 4)
    assert np.isfinite(run.train_loss).all() and len(run.eval_steps) == 3


def test_run_file_round_trip_and_one_line_errors(tiny_run, tmp_path):
    corpus, s, run = tiny_run
    path = tmp_path / "run.json"
    save_run(run, path)
    back = TT.load_run(path)
    assert np.allclose(back.train_loss, run.train_loss, atol=1e-5)
    assert back.model is not None and run.model is not None  # both loaded with their model
    x = torch.randint(0, corpus.vocab_size, (1, 8))
    torch.testing.assert_close(back.model(x)[0], run.model(x)[0])
    assert not list(tmp_path.glob(".*.tmp"))  # the temporary files were renamed away
    d = json.loads(path.read_text())
    d["scores"][0][0][0][0] = 3.0
    bad = tmp_path / "scratch" / "bad.json"  # beside no manifest: the value checks alone
    bad.parent.mkdir()
    bad.write_text(json.dumps(d))
    with pytest.raises(DataFileError) as e:
        TT.load_run(bad, with_model=False)
    assert str(bad) in str(e.value) and "scores" in str(e.value) and "\n" not in str(e.value)
    TT.weights_path(path).write_bytes(b"not the weights")
    with pytest.raises(DataFileError, match="sha256"):
        TT.load_run(path)
    bad.write_text("{")
    with pytest.raises(DataFileError, match="unreadable"):
        TT.load_run(bad)


def test_recheck_comparison_uses_the_tolerance(tiny_run):
    _, _, run = tiny_run
    close = {"train_loss": (run.train_loss[:3] + RR.RECHECK_TOL / 2).tolist(),
             "cpu_capability": "AVX2", "pins": {}, "wall_seconds": 1.0}
    far = dict(close, train_loss=(run.train_loss[:3] + 10 * RR.RECHECK_TOL).tolist())
    assert RR.compare_recheck(run, close)["agrees"] and not RR.compare_recheck(run, far)["agrees"]


def test_the_committed_run_trains_alike_again_for_its_first_steps():
    """The re-check the chapter "Heads on real text" once ran live: the committed run's first 10
    training steps, trained again in a subprocess with its CPU pins, within RECHECK_TOL."""
    path = find_data(TT.RUN_FILE)
    if path is None:
        pytest.skip("no committed real-text run next to this checkout")
    run = TT.load_run(path, with_model=False)
    same, what = tc.same_corpus(run.provenance["corpus"], tc.corpus_cached())
    if not same:
        pytest.skip(f"another Python's standard library: {what}")
    assert isinstance(run.settings, TT.TextSettings)
    r = RR.compare_recheck(run, RR.recheck_losses(run.settings, 10))
    assert r["steps"] == 10 and r["agrees"], r


def test_committed_run_finds_a_previous_token_head():
    path = find_data(TT.RUN_FILE, verify=False)
    if path is None:
        pytest.skip("no committed book/data/realtext_run.json next to this checkout")
    run = TT.load_run(path)
    same, what = tc.same_corpus(run.provenance["corpus"])
    assert what  # the sentence the chapter shows, whichever corpus this machine has
    prev = run.summary(TT.SCORE_TOL)[tc.PREV]
    assert prev["ratio"] >= D.FOUND_RATIO and prev["verdict"] == "found"
    assert run.provenance["pins"] == TT.CPU_PINS
    assert run.cpu_seconds <= 600  # the budget; wall time depends on what else shares the CPU


def test_toy_model_file_round_trip(tmp_path):
    from andrea_edu.heads import training as toy_training
    s = toy_training.Settings(n_head=2, d_model=16, n_layer=1, seq_len=12, batch_size=4, steps=3,
                              eval_every=3, eval_batch=8, n_probes=1, probe_batch=4)
    run = toy_training.train(s, progress=False)
    path = tmp_path / "toy.json"
    from andrea_lab.run_writers import save_toy
    save_toy(run, path, {"produced_by": "test"})
    s2, scores, model, cpu = TT.load_toy(path)
    assert s2 == s and np.allclose(scores, run.scores_after, atol=1e-4) and cpu >= 0
    x = torch.randint(0, s.model_config().vocab_size, (1, 12))
    assert run.model is not None  # a run just trained keeps its model
    torch.testing.assert_close(model(x)[0], run.model(x)[0])
    path.with_suffix(".pt").write_bytes(b"changed")
    with pytest.raises(DataFileError, match="sha256"):
        TT.load_toy(path)
    assert TT.toy_settings().steps == toy_training.default_settings(4, fast=False).steps


def test_best_heads_refuses_a_pattern_with_no_finite_score_in_one_line():
    """issue 42 item 12: no deep numpy error when one pattern (or every one) is all NaN."""
    s = np.full((3, 2, 2), 0.5)
    s[1] = np.nan
    with pytest.raises(ValueError, match="scores: pattern 1 has no head with a score") as e:
        M.best_heads(s)
    assert "\n" not in str(e.value)
    with pytest.raises(ValueError, match="scores"):
        M.best_heads(np.full((3, 2, 2), np.nan))
