"""Tests of the chapter "Three matrices per head": counted BLAS calls (bench.aten), the validated
live sweep (bench.matmuls), and its figures (figures.three_matrices)."""
from __future__ import annotations

import matplotlib.pyplot as plt
import pytest
import torch
from matplotlib.figure import Figure

from andrea_edu.bench import matmuls as pm
from andrea_edu.bench.aten import blas_calls
from andrea_edu.figures import three_matrices as pf
from andrea_edu.figures import parameter_count as pc
from andrea_edu import projections as P
from andrea_edu.config import AndreaConfig, divisors, param_counts


def _titles(fig) -> str:
    parts = [fig._suptitle.get_text() if fig._suptitle else ""]
    parts += [ax.get_title() for ax in fig.axes]
    return " ".join(parts)


@pytest.mark.parametrize("d_model, n_head", [(24, 4), (48, 12), (12, 1)])
def test_blas_calls_are_3_per_head_3_and_1(d_model, n_head):
    X = torch.randn(2, 3, d_model)  # (B, T, C)
    ways = pm.projection_ways(X, P.Projections.random(d_model, n_head))
    with torch.no_grad():
        got = {w: blas_calls(fn) for w, fn in ways.items()}
    assert got == {"per-head": 3 * n_head, "fused": 3, "c_attn": 1}


def test_projection_ways_agree():
    X = torch.randn(1, 5, 24)
    outs = {w: fn() for w, fn in pm.projection_ways(X, P.Projections.random(24, 6)).items()}
    for w in ("per-head", "c_attn"):
        for a, b in zip(outs[w], outs["fused"]):
            assert a.shape == (1, 6, 5, 4)
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_projection_sweep_records_every_way():
    from andrea_edu.bench.timing import CPU_MIN_REPEATS
    sweep = pm.projection_sweep([1, 3, 6], d_model=24, B=1, T=4, repeats=2)
    assert sorted(sweep) == [1, 3, 6]
    for nh, res in sweep.items():
        assert set(res) == set(pf.WAYS)
        assert res["per-head"]["blas_calls"] == 3 * nh
        assert res["fused"]["blas_calls"] == 3 and res["c_attn"]["blas_calls"] == 1
        for r in res.values():
            assert 0 < r["min_ms"] <= r["median_ms"]
            assert r["max_rel_err"] <= 1e-5
            # a CPU takes at least CPU_MIN_REPEATS samples; each carries its spread and check
            assert r["repeats"] == max(2, CPU_MIN_REPEATS)
            assert r["p25_ms"] <= r["median_ms"] <= r["p75_ms"]
            assert isinstance(r["quality_ok"], bool)


def test_projection_sweep_refuses_a_wrong_result(monkeypatch):
    original = pm.projection_ways

    def broken_ways(X, proj):
        ways = original(X, proj)
        q, k, v = ways["fused"]()
        ways["c_attn"] = lambda: (q + 1.0, k, v)  # wrong numbers, right shapes
        return ways

    monkeypatch.setattr(pm, "projection_ways", broken_ways)
    with pytest.raises(RuntimeError, match="c_attn at n_head=2.*not timed"):
        pm.projection_sweep([2], d_model=8, T=3, repeats=1)


@pytest.mark.parametrize("kw, word", [({"device": "tpu"}, "device"), ({"repeats": 0}, "repeats"),
                                      ({"repeats": True}, "repeats"),
                                      ({"threads": 0}, "threads"), ({"T": 0}, "T must"),
                                      ({"B": -1}, "B must"), ({"T": 2.5}, "T must")])
def test_projection_sweep_validates_arguments(kw, word):
    with pytest.raises(ValueError, match=word):
        pm.projection_sweep([1], **{"d_model": 8, "T": 2, **kw})


def test_check_rows():
    assert pm.check_rows(2, 3) == 6
    with pytest.raises(ValueError, match=r"^T must be an int >= 1 .*got 0$"):
        pm.check_rows(1, 0)


def test_sweep_at_an_unmeasured_n_head_is_one_line_naming_the_measured_ones():
    """An exercise's edit `n_head = 7` (768 has no such divisor) stops in one line."""
    sweep = pm.projection_sweep([1, 2, 4], d_model=8, T=2, repeats=1)
    assert set(pm.sweep_at(sweep, 2)) == {"per-head", "fused", "c_attn"}
    bad_values: tuple = (3, 8, True, "2")  # a bool and a str on purpose: the run-time check
    for bad in bad_values:
        with pytest.raises(ValueError) as e:
            pm.sweep_at(sweep, bad)
        msg = str(e.value)
        assert "\n" not in msg and msg.startswith(f"n_head={bad!r}") and "1, 2, 4" in msg


def test_projection_sweep_restores_the_thread_count():
    before = torch.get_num_threads()
    sweep = pm.projection_sweep([2], d_model=8, T=2, repeats=1, threads=1)
    assert torch.get_num_threads() == before
    assert sweep[2]["fused"]["blas_calls"] == 3


def test_valid_head_pairs():
    pairs = pm.valid_head_pairs(768)
    assert (12, 64) in pairs and (1, 768) in pairs
    assert all(nh * hs == 768 for nh, hs in pairs)
    assert [nh for nh, _ in pairs] == [d for d in divisors(768) if d <= 96]
    assert max(nh for nh, _ in pm.valid_head_pairs(768, max_n_head=12)) == 12


@pytest.mark.parametrize("n_head", divisors(48))
def test_attention_blocks_sum_to_4_c_squared(n_head):
    cfg = AndreaConfig(d_model=48, n_head=n_head)
    blocks = pc.attention_matrices_by_head(cfg)
    assert set(blocks) == {"W_Q", "W_K", "W_V", "W_O"}
    assert all(len(v) == n_head for v in blocks.values())
    assert sum(sum(v) for v in blocks.values()) == 4 * 48 * 48 == param_counts(cfg).attention_per_layer


def test_committed_projection_rows():
    assert pf.committed_projection_rows(None) == []
    rec = lambda nh, backend, status, ms: {  # noqa: E731
        "case": f"ANDREA-120M/n_head={nh}", "backend": backend, "status": status,
        "params": {"n_head": nh, "head_dim": 768 // nh}, "median_ms": ms, "tflops": 1.0,
        "blas_calls": 3, "time_ratio_to_fused": 1.0}
    results = {"records": [rec(12, "fused", "ok", 0.5), rec(4, "per-head", "ok", 0.9),
                           rec(12, "c-attn", "failed", None)]}
    rows = pf.committed_projection_rows(results)
    assert [(r["n_head"], r["way"]) for r in rows] == [(4, "per-head"), (12, "fused")]
    assert rows[1]["median_ms"] == 0.5


def test_figures_have_titles():
    sweep = pm.projection_sweep([1, 2, 4], d_model=16, T=2, repeats=1)
    cfgs = [AndreaConfig(d_model=16, n_head=4, n_layer=2, vocab_size=100, block_size=8,
                         name="tiny")]
    figs = [
        pf.fig_fused_matrix(P.Projections.random(16, 4).W_Q, 4),
        pf.fig_projection_timings(sweep, 2, 8, "CPU: test", "B=1, T=2"),
        pc.fig_param_breakdown(cfgs, {"tiny": param_counts(cfgs[0]).by_part()}),
        pc.fig_attention_by_head(4, 16),
    ]
    try:
        for fig in figs:
            assert isinstance(fig, Figure)
            assert _titles(fig).strip()
        assert "CPU: test" in _titles(figs[1])
        assert f"{param_counts(cfgs[0]).total:,}" in _titles(figs[2])
        assert f"{4 * 16 * 16:,}" in _titles(figs[3])
    finally:
        for fig in figs:
            plt.close(fig)


def test_fig_attention_by_head_refuses_an_invalid_n_head():
    with pytest.raises(ValueError, match="n_head=5"):
        pc.fig_attention_by_head(5, 16)
