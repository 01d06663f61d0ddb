"""Tests of andrea_edu.attention and andrea_edu.dispatch: backends agree, the dispatcher decides and says why, bad input
is refused with a message that names the fix."""
from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from andrea_edu.attention import reference_attention
from andrea_edu.dispatch import (
    BACKENDS,
    TOLERANCE,
    Backend,
    Decision,
    attention,
    choose_backend,
    compare_to_reference,
)
from andrea_edu.kernels.limits import V1_MAX_HEAD_DIM, V2_HEAD_DIMS, V3_HEAD_DIMS
from andrea_edu.kernels.launch import has_gpu

HAS_GPU = has_gpu()
NO_GPU = "no CUDA GPU visible to torch (torch.cuda.is_available() is False)"


def loop_attention(q, k, v, causal):
    """Attention one (b, h, query row) at a time in float64: an independent statement."""
    B, nh, T, hs = q.shape
    out = torch.zeros(B, nh, T, hs, dtype=torch.float64)
    for b in range(B):
        for h in range(nh):
            for i in range(T):
                n = i + 1 if causal else T
                s = [float(q[b, h, i].double() @ k[b, h, j].double()) / math.sqrt(hs)
                     for j in range(n)]
                mx = max(s)
                w = [math.exp(x - mx) for x in s]
                z = sum(w)
                out[b, h, i] = sum(wj / z * v[b, h, j].double() for j, wj in enumerate(w))
    return out


shapes = st.fixed_dictionaries({
    "B": st.integers(1, 2), "nh": st.integers(1, 3), "T": st.integers(1, 12),
    "hs": st.sampled_from([1, 3, 8, 16, 24]), "causal": st.booleans(),
    "seed": st.integers(0, 2**16)})


@settings(max_examples=25, deadline=None)
@given(s=shapes)
def test_reference_sdpa_emulator_agree_with_a_loop(s):
    g = torch.Generator().manual_seed(s["seed"])
    q, k, v = (torch.randn(s["B"], s["nh"], s["T"], s["hs"], generator=g) for _ in range(3))
    want = loop_attention(q, k, v, s["causal"])
    for backend in ("reference", "sdpa", "emulator", "auto"):
        out = attention(q, k, v, causal=s["causal"], backend=backend)
        assert out.shape == q.shape and out.dtype == q.dtype
        assert (out.double() - want).abs().max() < 1e-5, backend


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_low_precision_on_cpu_within_tolerance(dtype):
    q, k, v = (torch.randn(2, 3, 37, 64).to(dtype) for _ in range(3))
    for backend in ("reference", "emulator"):
        for causal in (False, True):
            out = attention(q, k, v, causal=causal, backend=backend)
            assert out.dtype == dtype
            assert compare_to_reference(out, q, k, v, causal)["passed"]


def test_tolerance_check_can_fail():
    q, k, v = (torch.randn(1, 2, 9, 16) for _ in range(3))
    out = reference_attention(q, k, v)
    assert compare_to_reference(out, q, k, v, False)["passed"]
    bad = out.clone()
    bad[0, 1, 3, 5] += 10 * TOLERANCE[torch.float32][0]
    res = compare_to_reference(bad, q, k, v, False)
    assert not res["passed"] and res["max_abs_err"] > TOLERANCE[torch.float32][0]


# ------------------------------------------------------------------ the dispatcher


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_choose_backend_for_every_head_dim(dtype):
    for hd in range(1, 300):
        d = choose_backend(hd, dtype, "cuda")
        tensor_cores = dtype != torch.float32 and hd % 16 == 0 and hd <= 128
        if tensor_cores and hd in (32, 64, 96, 128):
            assert (d.backend, d.kernel, d.fallbacks_considered) == ("cuda-flash", "v3", ())
            assert "sm_80" in d.reason and "mma.sync" in d.reason
        elif tensor_cores:
            assert (d.backend, d.kernel) == ("cuda-wmma", "v2")
            assert d.fallbacks_considered == (
                f"cuda-flash: head_dim={hd} is not one of cuda-flash's compiled head_dims "
                f"[32, 64, 96, 128]",)
            assert "cuda-flash unavailable" in d.reason
        elif hd <= V1_MAX_HEAD_DIM:
            assert (d.backend, d.kernel) == ("cuda-naive", "v1")
            assert [f.split(":")[0] for f in d.fallbacks_considered] == ["cuda-flash",
                                                                         "cuda-wmma"]
            assert "cuda-wmma unavailable, ran cuda-naive" in d.reason
        else:
            assert (d.backend, d.kernel) == ("sdpa", None)
            assert len(d.fallbacks_considered) == 3 and "torch's sdpa" in d.reason


def test_the_source_texts_head_dims():
    d72 = choose_backend(72, torch.float16, "cuda")
    assert d72.reason == "head_dim=72 is not a multiple of 16: cuda-wmma unavailable, ran cuda-naive"
    assert choose_backend(64, torch.bfloat16, "cuda").backend == "cuda-flash"
    assert choose_backend(32, torch.bfloat16, "cuda").backend == "cuda-flash"
    assert choose_backend(64, torch.bfloat16, "cuda", sm=90).backend == "cuda-flash"
    assert choose_backend(48, torch.bfloat16, "cuda", sm=90).backend == "cuda-wmma"
    fp32 = choose_backend(64, torch.float32, "cuda")
    assert fp32.backend == "cuda-naive" and "dtype=float32" in fp32.reason
    old = choose_backend(64, torch.bfloat16, "cuda", sm=75)
    assert old.backend == "cuda-naive" and "sm_80" in old.reason
    pre = choose_backend(64, torch.float16, "cuda", sm=75)   # fp16 WMMA runs on sm_75
    assert pre.backend == "cuda-wmma" and pre.fallbacks_considered == (
        "cuda-flash: cuda-flash needs sm_80 or newer (cp.async, bf16 mma.sync); "
        "this GPU is sm_75",)
    assert choose_backend(144, torch.float16, "cuda").fallbacks_considered == (
        "cuda-flash: head_dim=144 is not one of cuda-flash's compiled head_dims "
        "[32, 64, 96, 128]",
        "cuda-wmma: head_dim=144 is above the largest compiled tensor-core tile (128)",)


def test_choose_backend_on_cpu_and_explicit_requests():
    d = choose_backend(64, torch.float16, "cpu")
    assert d.backend == "reference" and "CPU" in d.reason and "emulator" in d.reason
    assert choose_backend(64, torch.float16, "cpu", "sdpa").backend == "sdpa"
    for hd, kernel in ((64, "v3"), (48, "v2"), (72, "v1"), (64, "v1")):
        dt = torch.float32 if (hd, kernel) == (64, "v1") else torch.float16
        e = choose_backend(hd, dt, "cpu", "emulator")
        assert (e.backend, e.kernel, e.requested) == ("emulator", kernel, "emulator")
    forced = choose_backend(72, torch.float16, "cuda", "cuda-wmma")
    assert forced.backend == "cuda-naive" and forced.requested == "cuda-wmma"
    assert choose_backend(64, torch.float16, "cuda", "cuda-wmma").kernel == "v2"  # as asked
    flash = choose_backend(48, torch.float16, "cuda", "cuda-flash")          # falls back
    assert (flash.backend, flash.requested) == ("cuda-wmma", "cuda-flash")
    assert choose_backend(72, torch.float16, "cuda", "cuda-flash").backend == "cuda-naive"
    assert choose_backend(64, torch.float16, "cuda", "cuda-naive").kernel == "v1"
    with pytest.raises(ValueError, match=r"backend='cuda-naive' needs CUDA tensors.*'emulator'"):
        choose_backend(64, torch.float16, "cpu", "cuda-naive")
    with pytest.raises(ValueError, match=r"cannot run head_dim=300.*'sdpa'"):
        choose_backend(300, torch.float16, "cuda", "cuda-wmma")


@pytest.mark.parametrize("args, exc, match", [
    ((64, torch.float16, "cuda", "flash"), ValueError, r"backend='flash' is not one of"),
    ((64, torch.int8, "cuda"), ValueError, r"dtype=torch.int8 is not supported.*float32"),
    ((0, torch.float16, "cuda"), ValueError, r"head_dim=0 must be a positive int"),
    ((64, torch.float16, "mps"), ValueError, r"device_type='mps'.*'cpu', 'cuda'"),
])
def test_choose_backend_errors(args, exc, match):
    with pytest.raises(exc, match=match):
        choose_backend(*args)


def test_return_decision_and_non_contiguous_copy_note():
    B, T, nh, hs = 2, 11, 3, 16
    x = torch.randn(B, T, nh * hs)                                # (B, T, C)
    q = x.view(B, T, nh, hs).transpose(1, 2)                      # (B, nh, T, hs), strided
    out, d = attention(q, q, q, causal=True, backend="emulator", return_decision=True)
    assert isinstance(d, Decision) and d.backend == "emulator"
    assert d.notes and "q, k, v not contiguous" in d.notes[0] and ".contiguous()" in d.notes[0]
    assert torch.allclose(out, reference_attention(q, q, q, True), atol=1e-5)
    out2, d2 = attention(q, q, q, backend="reference", return_decision=True)
    assert d2.notes == ()                                         # torch reads any strides
    assert set(BACKENDS) == {"auto", "reference", "sdpa", "emulator", "cpu-sim", "cuda-naive",
                             "cuda-wmma", "cuda-flash-padded", "cuda-flash"}


def _t(*shape, dtype=torch.float32):
    return torch.randn(*shape).to(dtype)


@pytest.mark.parametrize("make, exc, match", [
    (lambda: (_t(2, 5, 8), _t(2, 5, 8), _t(2, 5, 8)), ValueError, r"q must have shape \[B, n_head"),
    (lambda: ([1.0], _t(1, 1, 2, 4), _t(1, 1, 2, 4)), TypeError, r"q must be a torch.Tensor"),
    (lambda: (_t(1, 1, 2, 4, dtype=torch.float64),) * 3, TypeError,
     r"q.dtype=torch.float64 is not supported.*float16"),
    (lambda: (_t(1, 2, 3, 4), _t(1, 2, 4, 4), _t(1, 2, 3, 4)), ValueError,
     r"k.shape=\(1, 2, 4, 4\) differs from q.shape"),
    (lambda: (_t(1, 2, 3, 4), _t(1, 2, 3, 4, dtype=torch.float16), _t(1, 2, 3, 4)), TypeError,
     r"k.dtype=torch.float16 differs"),
    (lambda: (_t(1, 2, 3, 4), _t(1, 2, 3, 4), torch.empty(1, 2, 3, 4, device="meta")),
     ValueError, r"v.device=meta differs from q.device=cpu"),
    (lambda: (_t(1, 2, 0, 4),) * 3, ValueError, r"empty dimension"),
])
def test_validation_errors(make, exc, match):
    with pytest.raises(exc, match=match):
        attention(*make())


def test_argument_errors():
    q = _t(1, 1, 3, 8)
    with pytest.raises(TypeError, match=r"causal=1 must be True or False"):
        attention(q, q, q, causal=1)  # type: ignore[arg-type]  # the wrong type under test
    with pytest.raises(ValueError, match=r"backend='gpu' is not one of"):
        attention(q, q, q, backend="gpu")
    with pytest.raises(ValueError, match=r"needs CUDA tensors.*backend='emulator'"):
        attention(q, q, q, backend="cuda-wmma")


def test_a_backend_is_attention_with_its_name_fixed():
    """dispatch.Backend (what a model runs): the same output and decision as attention() with
    that backend and pad; a name or pad outside the allowed values is refused in one line."""
    q, k, v = (_t(2, 3, 9, 16) for _ in range(3))
    emu = Backend("emulator")
    assert emu.name == "emulator" and Backend("auto", pad=True).name == "auto+pad"
    assert torch.equal(emu(q, k, v, causal=True), attention(q, k, v, True, "emulator"))
    out, d = emu.with_decision(q, k, v, causal=True)
    assert torch.equal(out, attention(q, k, v, True, "emulator")) and d.backend == "emulator"
    assert Backend().with_decision(q, k, v)[1].backend == "reference"  # auto, on the CPU
    for bad, match in ((dict(backend="flash"), r"backend='flash' is not one of \('auto', "
                        r"'reference', 'sdpa'"), (dict(pad="yes"), r"pad='yes' must be True or False")):
        with pytest.raises(ValueError, match=match) as e:
            Backend(**bad)  # type: ignore[arg-type]  # the wrong values under test
        assert "\n" not in str(e.value)


# ------------------------------------------------------------------ on a GPU


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_GPU, reason=NO_GPU)
@pytest.mark.parametrize("hs, dtype, backend", [
    (64, torch.float16, "cuda-flash"), (64, torch.bfloat16, "cuda-flash"),
    (48, torch.float16, "cuda-wmma"), (72, torch.float16, "cuda-naive"),
    (64, torch.float32, "cuda-naive"), (32, torch.bfloat16, "cuda-flash"),
    (300, torch.float16, "sdpa")])
def test_auto_on_gpu_runs_the_kernel_it_names(hs, dtype, backend):
    if backend == "cuda-flash" and torch.cuda.get_device_capability()[0] < 8:
        pytest.skip("cuda-flash needs sm_80+: this GPU falls back (test_choose_backend_*)")
    B, T, nh = 2, 77, 4
    x = torch.randn(B, T, nh * hs, device="cuda").to(dtype)       # (B, T, C)
    q = x.view(B, T, nh, hs).transpose(1, 2)                      # (B, nh, T, hs), strided
    for causal in (False, True):
        out, d = attention(q, q, q, causal=causal, return_decision=True)
        assert d.backend == backend and out.device == q.device and out.dtype == dtype
        if backend != "sdpa":  # torch's own kernels: their precision is not ours to test
            assert d.notes and "copied" in d.notes[0]
            assert compare_to_reference(out, q, q, q, causal)["passed"]


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_GPU, reason=NO_GPU)
def test_every_v2_head_dim_on_gpu():
    for hs in V2_HEAD_DIMS:
        q, k, v = (torch.randn(1, 3, 130, hs, device="cuda", dtype=torch.float16)
                   for _ in range(3))
        for causal in (False, True):
            out, d = attention(q, k, v, causal=causal, backend="cuda-wmma",
                               return_decision=True)
            assert d.backend == "cuda-wmma"
            assert compare_to_reference(out, q, k, v, causal)["passed"], hs


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_GPU, reason=NO_GPU)
def test_every_v3_head_dim_on_gpu_and_a_misaligned_input():
    if torch.cuda.get_device_capability()[0] < 8:
        pytest.skip("cuda-flash needs sm_80+")
    for hs in V3_HEAD_DIMS:
        for dtype in (torch.float16, torch.bfloat16):
            q, k, v = (torch.randn(2, 3, 200, hs, device="cuda").to(dtype) for _ in range(3))
            for causal in (False, True):
                out, d = attention(q, k, v, causal=causal, return_decision=True)
                assert (d.backend, d.kernel) == ("cuda-flash", "v3")
                assert compare_to_reference(out, q, k, v, causal)["passed"], (hs, dtype)
    flat = torch.randn(1 * 2 * 70 * 64 + 1, device="cuda", dtype=torch.float16)
    q = flat[1:].view(1, 2, 70, 64)                               # 2 bytes off 16-byte alignment
    out, d = attention(q, q, q, causal=True, return_decision=True)
    assert d.backend == "cuda-flash" and any("16-byte aligned" in n for n in d.notes)
    assert compare_to_reference(out, q, q, q, True)["passed"]


def test_forward_only_backends_and_autograd():
    d = choose_backend(64, torch.float16, "cuda", requires_grad=True)
    assert d.backend == "sdpa" and "forward-only" in d.reason
    assert choose_backend(64, torch.float16, "cpu", requires_grad=True).backend == "reference"
    for backend in ("emulator", "cuda-wmma", "cuda-naive"):
        with pytest.raises(ValueError, match=r"forward-only.*torch.no_grad\(\)"):
            choose_backend(64, torch.float16, "cuda", backend, requires_grad=True)
    q = torch.randn(1, 2, 5, 8, requires_grad=True)
    with pytest.raises(ValueError, match="forward-only"):
        attention(q, q, q, backend="emulator")
    with torch.no_grad():
        assert attention(q, q, q, backend="emulator").shape == q.shape
    out = attention(q, q, q, causal=True)                         # auto: reference on the CPU
    out.sum().backward()
    assert q.grad is not None and torch.isfinite(q.grad).all()


def test_old_gpu_limits_follow_the_kernels_shared_memory():
    from andrea_edu import kernels as cuda
    assert choose_backend(160, torch.float32, "cuda", sm=75).backend == "sdpa"
    assert choose_backend(160, torch.float32, "cuda", sm=80).backend == "cuda-naive"
    assert choose_backend(128, torch.float32, "cuda", sm=75).backend == "cuda-naive"
    assert cuda.shared_bytes("v1", 128, torch.float32) <= 64 * 1024 < cuda.shared_bytes(
        "v1", 129, torch.float32)                                 # sm_75 allows 64 KB a block
