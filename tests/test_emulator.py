"""Tests of andrea_edu.kernels.emulator: the kernels' grid on the CPU equals the reference, and its trace
says what each block did (checked against facts derived here independently)."""
from __future__ import annotations

import dataclasses
import math
import time

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import cu_loops
from andrea_edu.attention import reference_attention
from andrea_edu.dispatch import TOLERANCE, compare_to_reference
from andrea_edu.kernels import registry
from andrea_edu.kernels.emulator import LaunchTrace, emulate
from andrea_edu.kernels.spec import parse_constants
from andrea_edu.kernels.toolkit import block_rows, kernel_constants

C3 = kernel_constants("v3")
BK3 = C3["V3_BK"]
VERSIONS = registry.versions()   # the registered ladder, at collection time

shapes = st.fixed_dictionaries({
    "B": st.integers(1, 3), "nh": st.integers(1, 6), "T": st.integers(1, 80),
    "hs": st.sampled_from([1, 8, 16, 24, 32, 64, 72, 128]), "causal": st.booleans(),
    "seed": st.integers(0, 2**16)})


def _qkv(B, nh, T, hs, seed=0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(B, nh, T, hs, generator=g).to(dtype) for _ in range(3)]


# ---------------------------------------------------------------- the checks, per kernel
# Each takes a registered version; the tests below run them for every version of the registry,
# and tests/test_kernel_registry.py runs them for a fourth version it registers.
def equals_reference_fp32(kernel: str, B, nh, T, hs, causal, seed=0) -> None:
    """fp32 in: the emulated kernel equals the fp32 reference to 1e-5 (same math, other order
    of additions)."""
    q, k, v = _qkv(B, nh, T, hs, seed)
    out, tr = emulate(q, k, v, causal=causal, kernel=kernel, trace=False)
    assert tr is None and out.shape == q.shape and out.dtype == torch.float32
    assert (out - reference_attention(q, k, v, causal)).abs().max() <= 1e-5, kernel


def _head_dim_for(kernel: str, hs: int = 32) -> int:
    """hs when the kernel runs it, else the first head_dim it is compiled for (v3p pads 70)."""
    spec = registry.get(kernel)
    return hs if spec.emulator_refusal(hs) is None else spec.head_dims[0]


def within_tolerance_low_precision(kernel: str, dtype) -> None:
    q, k, v = _qkv(2, 3, 70, _head_dim_for(kernel), seed=1, dtype=dtype)
    for causal in (False, True):
        out, _ = emulate(q, k, v, causal=causal, kernel=kernel, trace=False)
        assert out.dtype == dtype
        res = compare_to_reference(out, q, k, v, causal)
        assert res["passed"], (res, TOLERANCE[dtype])


def running_max_and_sum_are_the_softmax_statistics(kernel: str, causal: bool) -> None:
    B, nh, T, hs = 1, 2, 70, _head_dim_for(kernel)
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


SCHEDULE_CASES = [(1, 1, 1, 32), (2, 3, 17, 24), (1, 2, 70, 32), (1, 1, 150, 96),
                  (2, 2, 300, 64)]  # B, nh, T, hs: a single row, tails of every tile size


def follows_the_cu_loops(kernel: str, text: str | None = None) -> None:
    """The emulator's tile schedule (which query tile each block takes, which K/V tiles it
    stages, in order, where the causal loop stops) is the one the kernel's .cu loops give
    (tests/cu_loops.py runs the file's own loop headers); `text`: another .cu text to hold the
    emulator against (a planted fault)."""
    spec = registry.get(kernel)
    for B, nh, T, hs in SCHEDULE_CASES:
        if spec.emulator_refusal(hs) is not None:
            continue
        for causal in (False, True):
            q, k, v = _qkv(B, nh, T, hs)
            _, tr = emulate(q, k, v, causal=causal, kernel=kernel)
            assert tr is not None and tr.threads_per_block == spec.const("THREADS", parse_constants(
                text or spec.source_text()))
            assert isinstance(tr, LaunchTrace) and tr.kv_tiles_loaded() == len(tr.to_rows())
            assert all((blk.b, blk.h) == divmod(blk.grid_index[0], nh) for blk in tr.blocks)
            cu_loops.assert_emulator_follows_cu(spec, text or spec.source_text(), tr)


def emulator_checks(kernel: str) -> None:
    """Every check above, for one kernel (small shapes: seconds)."""
    for B, nh, T, hs, causal in ((1, 1, 1, 32, False), (2, 3, 17, 24, True),
                                 (1, 2, 80, 64, False), (2, 1, 33, 16, True)):
        if registry.get(kernel).emulator_refusal(hs) is None:
            equals_reference_fp32(kernel, B, nh, T, hs, causal)
    for dtype in (torch.float16, torch.bfloat16):
        within_tolerance_low_precision(kernel, dtype)
    for causal in (False, True):
        running_max_and_sum_are_the_softmax_statistics(kernel, causal)
    follows_the_cu_loops(kernel)


# ---------------------------------------------------------------- the tests
@settings(max_examples=40, deadline=None)
@given(s=shapes)
def test_emulator_equals_reference_fp32(s):
    runs = [v for v in registry.versions() if registry.get(v).emulator_refusal(s["hs"]) is None]
    assert "v1" in runs or s["hs"] > 256
    for kernel in runs:
        equals_reference_fp32(kernel, s["B"], s["nh"], s["T"], s["hs"], s["causal"], s["seed"])


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("kernel", VERSIONS)
def test_emulator_low_precision(dtype, kernel):
    within_tolerance_low_precision(kernel, dtype)


def test_default_kernel_is_the_dispatchers():
    """The committed ladder's facts on purpose (v1, v2, v3 by name): the emulator's default is
    the kernel the dispatcher picks on an sm_80+ GPU."""
    for hs, dtype, kernel in ((64, torch.float16, "v3"), (72, torch.float16, "v1"),
                              (64, torch.float32, "v1"), (128, torch.bfloat16, "v3"),
                              (48, torch.float16, "v2")):
        _, tr = emulate(*_qkv(1, 1, 5, hs, dtype=dtype))
        assert tr.kernel == kernel


@pytest.mark.parametrize("kernel", VERSIONS)
def test_the_emulator_follows_the_cu_loops(kernel):
    """Issue 31 item 4: the tile schedule of every block, against the .cu's own loops."""
    follows_the_cu_loops(kernel)


@pytest.mark.parametrize("kernel, old, new", [
    ("v2", "constexpr int V2_BK = 32;", "constexpr int V2_BK = 16;"),      # a tile size
    ("v1", "constexpr int V1_ROWS_PER_WARP = 4;", "constexpr int V1_ROWS_PER_WARP = 2;"),
    ("v3", "constexpr int V3_BK = 64;", "constexpr int V3_BK = 32;"),
    ("v2", "causal ? min(seq_len, q0 + V2_BQ) : seq_len", "seq_len"),    # no causal early stop
    ("v3", "(gridDim.y - 1 - blockIdx.y) * BQ", "blockIdx.y * BQ"),        # launch order
])
def test_a_cu_that_drifts_from_the_emulator_fails_the_schedule_check(kernel, old, new):
    """Planted faults: the .cu changed (a copy of its text), the emulator not: the check of
    the tile schedule fails."""
    text = registry.get(kernel).source_text()
    assert text.count(old) == 1
    with pytest.raises(AssertionError):
        follows_the_cu_loops(kernel, text.replace(old, new))


def test_an_emulator_that_drifts_from_the_cu_fails_the_schedule_check():
    """A planted fault on the other side: v2's block emulated with 16-key tiles (its constants
    handed over altered) while its .cu stages 32."""
    spec = registry.get("v2")

    def stale_block(qh, kh, vh, oh, qtile, causal, scale, record, c, p_dtype):
        return spec.emulate_block(qh, kh, vh, oh, qtile, causal, scale, record,
                                  dict(c, V2_BK=16), p_dtype)

    drifted = dataclasses.replace(spec, version="v2-stale", backend="cuda-stale",
                                  emulate_block=stale_block)
    registry.register(drifted)
    try:
        with pytest.raises(AssertionError):
            follows_the_cu_loops("v2-stale")
    finally:
        registry.unregister("v2-stale")


@pytest.mark.parametrize("kernel", VERSIONS)
@pytest.mark.parametrize("causal", [False, True])
def test_trace_running_max_and_sum_are_the_softmax_statistics(kernel, causal):
    running_max_and_sum_are_the_softmax_statistics(kernel, causal)


@pytest.mark.parametrize("causal", [False, True])
def test_v3_grid_runs_heaviest_query_tiles_first_and_stages_64_key_tiles(causal):
    """v3 (the ladder's fact): blockIdx.y = 0 takes the last query tile; the warps' split does
    not change the result."""
    B, nh, T, hs = 1, 2, 300, 32
    BQ3 = block_rows("v3", hs)
    assert BQ3 == C3["V3_BQ_NARROW"] and block_rows("v3", 96) == C3["V3_BQ"]
    q, k, v = _qkv(B, nh, T, hs, seed=4)
    out, tr = emulate(q, k, v, causal=causal, kernel="v3")
    n_qt = math.ceil(T / BQ3)
    assert tr.grid == (B * nh, n_qt, 1) and tr.threads_per_block == C3["V3_THREADS"]
    assert tr.blocks[0].q_tiles[0].q_start == (n_qt - 1) * BQ3    # heaviest first
    assert all(s.k_stop - s.k_start == BK3 for blk in tr.blocks for t in blk.q_tiles
               for s in t.steps[:-1])
    assert (out - reference_attention(q, k, v, causal)).abs().max() <= 1e-5


@pytest.mark.parametrize("kwargs, exc, match", [
    (dict(kernel="v9"), ValueError, r"kernel='v9' is not one of"),
    (dict(kernel="v3", hs=48), ValueError,
     r"kernel='v3' cannot run head_dim=48: .*compiled head_dims.*: use kernel='v\d\w*'"),
    (dict(kernel="v2", hs=72), ValueError,
     r"kernel='v2' cannot run head_dim=72: .*not a multiple of 16: use kernel='v\d\w*'"),
    (dict(kernel="v1", hs=300), ValueError, r"head_dim=300 is above cuda-naive's maximum 256$"),
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
