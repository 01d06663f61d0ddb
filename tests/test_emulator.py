"""Tests of andrea_edu.kernels.emulator: the kernels' grid on the CPU equals the reference, and its trace
says what each block did (checked against facts derived here independently)."""
from __future__ import annotations

import math
import time

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from andrea_edu.attention import TOLERANCE, compare_to_reference, reference_attention
from andrea_edu.kernels.toolkit import block_rows, kernel_constants
from andrea_edu.kernels.emulator import Trace, emulate

C1, C2, C3 = kernel_constants("v1"), kernel_constants("v2"), kernel_constants("v3")
BR, BC, BQ, BK = C1["V1_BR"], C1["V1_BC"], C2["V2_BQ"], C2["V2_BK"]
BK3 = C3["V3_BK"]

shapes = st.fixed_dictionaries({
    "B": st.integers(1, 3), "nh": st.integers(1, 6), "T": st.integers(1, 80),
    "hs": st.sampled_from([1, 8, 16, 24, 32, 64, 72, 128]), "causal": st.booleans(),
    "seed": st.integers(0, 2**16)})


def _qkv(B, nh, T, hs, seed=0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(B, nh, T, hs, generator=g).to(dtype) for _ in range(3)]


@settings(max_examples=40, deadline=None)
@given(s=shapes)
def test_emulator_equals_reference_fp32(s):
    q, k, v = _qkv(s["B"], s["nh"], s["T"], s["hs"], s["seed"])
    ref = reference_attention(q, k, v, s["causal"])
    kernels = ["v1"] + (["v2"] if s["hs"] % 16 == 0 else []) + \
        (["v3"] if s["hs"] in (32, 64, 96, 128) else [])
    for kernel in kernels:
        out, tr = emulate(q, k, v, causal=s["causal"], kernel=kernel, trace=False)
        assert tr is None and out.shape == q.shape and out.dtype == torch.float32
        assert (out - ref).abs().max() <= 1e-5, kernel


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("kernel", ["v1", "v2", "v3"])
def test_emulator_low_precision(dtype, kernel):
    q, k, v = _qkv(2, 3, 70, 32, seed=1, dtype=dtype)
    for causal in (False, True):
        out, _ = emulate(q, k, v, causal=causal, kernel=kernel, trace=False)
        assert out.dtype == dtype
        res = compare_to_reference(out, q, k, v, causal)
        assert res["passed"], (res, TOLERANCE[dtype])


def test_default_kernel_is_the_dispatchers():
    for hs, dtype, kernel in ((64, torch.float16, "v3"), (72, torch.float16, "v1"),
                              (64, torch.float32, "v1"), (128, torch.bfloat16, "v3"),
                              (48, torch.float16, "v2")):
        _, tr = emulate(*_qkv(1, 1, 5, hs, dtype=dtype))
        assert tr.kernel == kernel


def _kv_starts(q0, rows, tile, T, causal):
    """K/V tile starts a query tile needs: every key j < T, or j <= last row when causal."""
    last_key = min(T, q0 + rows) - 1 if causal else T - 1
    return list(range(0, last_key + 1, tile))


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("B, nh, T", [(1, 1, 1), (2, 3, 17), (1, 2, 33), (2, 2, 80)])
def test_v1_trace_one_block_per_batch_head(B, nh, T, causal):
    q, k, v = _qkv(B, nh, T, 24)
    _, tr = emulate(q, k, v, causal=causal, kernel="v1")
    assert isinstance(tr, Trace) and tr.grid == (B * nh, 1, 1) and tr.threads_per_block == 128
    assert [(blk.b, blk.h) for blk in tr.blocks] == [(b, h) for b in range(B) for h in range(nh)]
    assert [blk.grid_index for blk in tr.blocks] == [(x, 0) for x in range(B * nh)]
    for blk in tr.blocks:
        assert [(t.q_start, t.q_stop) for t in blk.q_tiles] == \
            [(q0, min(q0 + BR, T)) for q0 in range(0, T, BR)]
        for t in blk.q_tiles:
            assert [s.k_start for s in t.steps] == _kv_starts(t.q_start, BR, BC, T, causal)
            assert all(s.k_stop == min(s.k_start + BC, T) for s in t.steps)
    expected = B * nh * sum(len(_kv_starts(q0, BR, BC, T, causal)) for q0 in range(0, T, BR))
    assert tr.kv_tiles_loaded() == expected == len(tr.to_rows())
    assert tr.summary()["kv_tiles_loaded"] == expected and tr.summary()["n_blocks"] == B * nh


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("B, nh, T", [(1, 1, 1), (2, 3, 65), (1, 2, 130)])
def test_v2_trace_adds_query_tiles_to_the_grid(B, nh, T, causal):
    q, k, v = _qkv(B, nh, T, 32)
    _, tr = emulate(q, k, v, causal=causal, kernel="v2")
    n_qt = math.ceil(T / BQ)
    assert tr.grid == (B * nh, n_qt, 1) and tr.n_blocks == B * nh * n_qt
    covered = {(blk.b, blk.h, t.q_start) for blk in tr.blocks for t in blk.q_tiles}
    assert covered == {(b, h, q0) for b in range(B) for h in range(nh) for q0 in range(0, T, BQ)}
    for blk in tr.blocks:
        assert len(blk.q_tiles) == 1 and blk.q_tiles[0].q_start == blk.grid_index[1] * BQ
        t = blk.q_tiles[0]
        assert [s.k_start for s in t.steps] == _kv_starts(t.q_start, BQ, BK, T, causal)


@pytest.mark.parametrize("kernel", ["v1", "v2", "v3"])
@pytest.mark.parametrize("causal", [False, True])
def test_trace_running_max_and_sum_are_the_softmax_statistics(kernel, causal):
    B, nh, T, hs = 1, 2, 70, 32
    q, k, v = _qkv(B, nh, T, hs, seed=3)
    _, tr = emulate(q, k, v, causal=causal, kernel=kernel)
    s = (q @ k.transpose(-2, -1)) / math.sqrt(hs)                 # (B, nh, T, T)
    if causal:
        s = s.masked_fill(~torch.ones(T, T, dtype=torch.bool).tril(), float("-inf"))
    for blk in tr.blocks:
        for t in blk.q_tiles:
            maxes = torch.stack([st.row_max for st in t.steps])   # (steps, rows)
            assert torch.isfinite(maxes).all()                    # key 0 is in the first tile
            assert (maxes[1:] >= maxes[:-1]).all()                # a running max only grows
            rows = s[blk.b, blk.h, t.q_start:t.q_stop]            # (rows, T)
            m = rows.max(dim=1).values
            l = torch.exp(rows - m[:, None]).sum(dim=1)
            torch.testing.assert_close(t.steps[-1].row_max, m, atol=1e-5, rtol=1e-5)
            torch.testing.assert_close(t.steps[-1].row_sum, l, atol=1e-4, rtol=1e-5)


@pytest.mark.parametrize("causal", [False, True])
def test_v3_grid_runs_heaviest_query_tiles_first_and_stages_64_key_tiles(causal):
    """v3: blockIdx.y = 0 takes the last query tile; each block stages the K/V tiles its rows
    need, 64 keys at a time; the warps' split does not change the result."""
    B, nh, T, hs = 1, 2, 300, 32
    BQ3 = block_rows("v3", hs)
    assert BQ3 == C3["V3_BQ_NARROW"] and block_rows("v3", 96) == C3["V3_BQ"]
    q, k, v = _qkv(B, nh, T, hs, seed=4)
    out, tr = emulate(q, k, v, causal=causal, kernel="v3")
    n_qt = math.ceil(T / BQ3)
    assert tr.grid == (B * nh, n_qt, 1) and tr.threads_per_block == C3["V3_THREADS"]
    for blk in tr.blocks:
        t = blk.q_tiles[0]
        assert t.q_start == (n_qt - 1 - blk.grid_index[1]) * BQ3
        assert [s.k_start for s in t.steps] == _kv_starts(t.q_start, BQ3, BK3, T, causal)
    assert tr.blocks[0].q_tiles[0].q_start == (n_qt - 1) * BQ3    # heaviest first
    assert (out - reference_attention(q, k, v, causal)).abs().max() <= 1e-5


@pytest.mark.parametrize("kwargs, exc, match", [
    (dict(kernel="v4"), ValueError, r"kernel='v4' is not one of"),
    (dict(kernel="v3", hs=48), ValueError, r"kernel='v3' needs head_dim in.*got head_dim=48"),
    (dict(kernel="v2", hs=72), ValueError, r"kernel='v2' needs head_dim in.*got head_dim=72"),
    (dict(kernel="v1", hs=300), ValueError, r"head_dim=300 is above v1's maximum 256"),
    (dict(causal=0), TypeError, r"causal=0 must be True or False"),
])
def test_errors(kwargs, exc, match):
    hs = kwargs.pop("hs", 16)
    with pytest.raises(exc, match=match):
        emulate(*_qkv(1, 1, 4, hs), **kwargs)


def test_andrea_12m_attention_timing(capsys):
    """ANDREA-12M-sized attention (B=1, nh=12, T=256, head_dim=32): measured and printed."""
    q, k, v = _qkv(1, 12, 256, 32)
    threads = torch.get_num_threads()
    for kernel in ("v1", "v2"):
        for causal in (False, True):
            t0 = time.perf_counter()
            out, tr = emulate(q, k, v, causal=causal, kernel=kernel)
            dt = time.perf_counter() - t0
            assert (out - reference_attention(q, k, v, causal)).abs().max() < 1e-5
            with capsys.disabled():
                print(f"\nemulate {kernel} causal={causal} B=1 nh=12 T=256 hs=32: {dt:.3f} s, "
                      f"{tr.n_blocks} blocks, {tr.kv_tiles_loaded()} K/V tile loads")
    assert torch.get_num_threads() == threads                     # restored after emulate
