"""Tests of andrea_edu.kernels.nvrtc / cuda_toolkit / cuda_launch / occupancy.

On any machine: NVRTC compiles every specialization to PTX and CUBIN for sm_80, sm_89 and
sm_90 (no GPU needed); the tensor-core instructions are in v2 and not in v1; ptxas' resource
report agrees with cuobjdump's; every error says what is wrong and the fix.
On a GPU (marker `gpu`): both kernels agree with the reference over awkward shapes.
"""
from __future__ import annotations

import math
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from andrea_edu import kernels as cuda
from andrea_edu.kernels import nvrtc, registry
from andrea_edu.kernels import launch as cuda_launch, toolkit as cuda_toolkit, occupancy
from andrea_edu.attention import reference_attention
from andrea_edu.dispatch import TOLERANCE, compare_to_reference
from andrea_edu.kernels.limits import V2_HEAD_DIMS

HAS_GPU = cuda.has_gpu()
NO_GPU = "no CUDA GPU visible to torch (torch.cuda.is_available() is False)"


@pytest.fixture(scope="module")
def all_kernels():
    """Every specialization for every arch (disk-cached: a cold cache costs ~15 s on 2 cores)."""
    t0 = time.perf_counter()
    ks = cuda.compile_all(cuda.ARCHS)
    print(f"\ncompile_all: {len(ks)} kernels in {time.perf_counter() - t0:.2f} s "
          f"(compile seconds summed: {sum(k.compile_seconds for k in ks):.1f})")
    return ks


# ------------------------------------------------------------------ compilation, no GPU


def test_every_specialization_compiles_for_each_arch(all_kernels):
    specs = cuda.specializations()
    assert len(all_kernels) == len(specs) * len(cuda.ARCHS)
    seen = set()
    for ck in all_kernels:
        seen.add((ck.version, ck.max_head_dim, ck.dtype, ck.arch))
        assert f".target {ck.arch}" in ck.ptx
        assert f".entry {ck.lowered_name}" in ck.ptx
        assert ck.cubin[:4] == b"\x7fELF"
        r = ck.resources
        assert 0 < r.registers <= 255
        assert r.dynamic_shared_bytes == cuda.shared_bytes(ck.version, ck.max_head_dim, ck.dtype)
        assert r.shared_bytes == r.static_shared_bytes + r.dynamic_shared_bytes > 0
        # The SASS is an independent witness of what ptxas's log says about spills: a local
        # store (STL) exactly when the log counts spill stores, a local load (LDL) exactly when
        # it counts spill loads. Checked on every specialization for one arch (disassembling
        # all three archs' kernels would triple the test's cost; the log parser is the same).
        sass = ck.sass() if ck.arch == cuda.ARCHS[-1] else None
        if sass is not None:
            what = (ck.version, ck.max_head_dim, ck.dtype, ck.arch)
            assert (r.spill_stores > 0) == bool(re.search(r"\bSTL\b", sass)), what
            assert (r.spill_loads > 0) == bool(re.search(r"\bLDL\b", sass)), what
        assert (r.stack_bytes > 0) >= (r.spill_stores > 0)  # a spill needs a stack frame
        assert ck.compile_seconds > 0
    assert seen == {(v, hd, dt, a) for a in cuda.ARCHS for (v, hd, dt) in specs}


def test_compiles_without_cache_and_really_runs_nvrtc(tmp_path, monkeypatch):
    monkeypatch.setenv("ANDREA_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(nvrtc, "_MEMORY", {})
    ck = cuda.compile_attention("v2", 32, torch.bfloat16, "sm_80", use_cache=False)
    assert not ck.from_cache and ck.compile_seconds > 0
    assert not list(tmp_path.iterdir())  # use_cache=False writes nothing
    ck1 = cuda.compile_attention("v2", 32, torch.bfloat16, "sm_80")
    assert sorted(p.suffix for p in tmp_path.iterdir()) == [".cubin", ".json", ".ptx"]
    assert cuda.compile_attention("v2", 32, torch.bfloat16, "sm_80") is ck1  # memory cache
    monkeypatch.setattr(nvrtc, "_MEMORY", {})
    ck2 = cuda.compile_attention("v2", 32, torch.bfloat16, "sm_80")       # disk cache
    assert ck2.from_cache and ck2.ptx == ck1.ptx and ck2.cubin == ck1.cubin
    assert ck2.resources == ck1.resources


def test_v1_head_dims_share_specializations():
    a = cuda.compile_attention("v1", 72, torch.float16)
    b = cuda.compile_attention("v1", 100, torch.float16)
    c = cuda.compile_attention("v1", 64, torch.float16)
    assert a is b and a.max_head_dim == 128 and c.max_head_dim == 64
    for hd in range(1, 257):
        tile = nvrtc._tile("v1", hd, torch.float32)
        assert 32 * tile >= hd and tile in cuda.V1_CHUNK_SIZES
        assert tile == 1 or 32 * (tile // 2) < hd  # the smallest chunk count that covers hd


def test_tensor_cores_in_v2_and_not_in_v1(all_kernels):
    for ck in all_kernels:
        tc = ck.tensor_core_instructions()
        if ck.version == "v2":
            assert tc and all("m16n16k16.f32" in line for line in tc)  # fp32 accumulators
            # S = Q K^T: (BK/16) x (HD/16) mma; O += P V: (HD/16) x (BK/16): per K/V tile
            c = cuda.kernel_constants("v2")
            assert len(tc) == 2 * (c["V2_BK"] // 16) * (ck.tile // 16)
        elif ck.version in ("v3", "v3p"):   # v3p: v3 compiled at the padded width
            kind = "bf16.bf16" if ck.dtype == torch.bfloat16 else "f16.f16"
            assert tc and all(f"mma.sync.aligned.m16n8k16.row.col.f32.{kind}.f32" in line
                              for line in tc)
            # per warp and K/V tile, per m16 tile of the warp (2 up to head_dim 64, else 1):
            # S (BK/8 n8 tiles x HD/16 k-steps), O (HD/8 x BK/16)
            c = cuda.kernel_constants("v3")
            hd = registry.get(ck.version).width(ck.tile)   # v3: the tile; v3p: 72 -> 80
            mt = 2 if hd <= c["V3_NARROW_HD"] else 1
            assert len(tc) == mt * 2 * (c["V3_BK"] // 8) * (hd // 16)
        else:
            assert tc == [] and not ck.has_tensor_core_instructions()
    v2 = cuda.compile_attention("v2", 64, torch.float16, "sm_90")
    assert v2.has_tensor_core_instructions()
    assert not cuda.compile_attention("v1", 64, torch.float16, "sm_90").has_tensor_core_instructions()


def test_sass_shows_hmma_for_v2_only():
    v2 = cuda.compile_attention("v2", 64, torch.float16, "sm_90")
    sass = v2.sass()
    if sass is None:
        pytest.skip("cuobjdump/nvdisasm not found: pip install nvidia-cuda-cuobjdump "
                    "nvidia-cuda-nvdisasm")
    assert "HMMA" in sass
    v1_sass = cuda.compile_attention("v1", 64, torch.float16, "sm_90").sass()
    assert v1_sass is not None and "HMMA" not in v1_sass


def test_ptxas_registers_agree_with_cuobjdump():
    tool = cuda_toolkit.find_binary("cuobjdump")
    if tool is None:
        pytest.skip("cuobjdump not found: pip install nvidia-cuda-cuobjdump")
    for version, hd, dt in (("v1", 32, torch.float32), ("v2", 128, torch.bfloat16)):
        ck = cuda.compile_attention(version, hd, dt, "sm_90")
        with tempfile.TemporaryDirectory() as tmp:
            p = Path(tmp) / "k.cubin"
            p.write_bytes(ck.cubin)
            txt = subprocess.run([tool, "--dump-resource-usage", str(p)], capture_output=True,
                                 text=True, check=True).stdout
        reg, stack = re.search(r"REG:(\d+)", txt), re.search(r"STACK:(\d+)", txt)
        assert reg and stack, txt
        assert int(reg.group(1)) == ck.resources.registers
        assert int(stack.group(1)) == ck.resources.stack_bytes


def test_parse_ptxas_log_reads_its_own_function():
    log = ("ptxas info    : Compiling entry function 'f' for 'sm_90'\n"
           "ptxas info    : Function properties for f\n"
           "ptxas         .     16 bytes stack frame, 12 bytes spill stores, 8 bytes spill loads\n"
           "ptxas info    : Used 40 registers, used 1 barriers, 512 bytes smem\n"
           "ptxas info    : Compiling entry function 'g' for 'sm_90'\n"
           "ptxas info    : Function properties for g\n"
           "ptxas info    : Used 99 registers\n")
    r = cuda.parse_ptxas_log(log, "f", dynamic_shared=1000)
    assert (r.registers, r.stack_bytes, r.spill_stores, r.spill_loads) == (40, 16, 12, 8)
    assert (r.static_shared_bytes, r.dynamic_shared_bytes, r.shared_bytes) == (512, 1000, 1512)
    assert cuda.parse_ptxas_log(log, "g").registers == 99
    with pytest.raises(cuda.CompileError, match="no entry for h"):
        cuda.parse_ptxas_log(log, "h")


def test_shared_memory_claims_of_the_kernel_headers():
    for hd in V2_HEAD_DIMS:  # v2 fits 64 KB (sm_75's opt-in limit) at every head_dim
        assert cuda.shared_bytes("v2", hd, torch.float16) <= 64 * 1024
    assert cuda.shared_bytes("v2", 64, torch.float16) <= 48 * 1024  # no opt-in needed
    assert cuda.shared_bytes("v1", 128, torch.float32) <= 48 * 1024
    assert cuda.shared_bytes("v1", 256, torch.float32) > 48 * 1024  # the launcher opts in
    # v1 and v2 both stage K/V tiles: more head_dim, more shared memory
    v1 = [cuda.shared_bytes("v1", 32 * c, torch.float32) for c in cuda.V1_CHUNK_SIZES]
    assert v1 == sorted(v1) and len(set(v1)) == len(v1)


def test_grid_and_threads():
    c1, c2 = cuda.kernel_constants("v1"), cuda.kernel_constants("v2")
    assert c1["V1_BR"] == c1["V1_WARPS"] * c1["V1_ROWS_PER_WARP"] and c1["V1_BC"] == 32
    assert c2["V2_BQ"] == 16 * c2["V2_WARPS"]
    v1 = cuda.compile_attention("v1", 64, torch.float32)
    v2 = cuda.compile_attention("v2", 64, torch.float16)
    assert v1.threads_per_block == v2.threads_per_block == 128
    assert v1.grid(8, 12, 1024) == (96, 1, 1)                    # one block per (batch, head)
    assert v2.grid(8, 12, 1024) == (96, math.ceil(1024 / c2["V2_BQ"]), 1)
    assert v2.grid(1, 1, 1) == (1, 1, 1) and v2.grid(2, 3, 65) == (6, 2, 1)


# ------------------------------------------------------------------ errors


@pytest.mark.parametrize("args, match", [
    (("v9", 64, torch.float16), r"version='v9'.*\('v1', 'v2', 'v3p', 'v3'"),
    (("v1", 64, torch.float64), r"dtype=torch.float64.*allowed"),
    (("v1", 0, torch.float32), r"head_dim=0 must be a positive int"),
    (("v1", 300, torch.float32), r"head_dim=300 is above cuda-naive's maximum 256: use "
                                 r"backend='sdpa'$"),
    (("v2", 72, torch.float16), r"v2 \(cuda-wmma\) is not compiled for head_dim=72, "
                                r"dtype=float16: head_dim=72 is not a multiple of 16: use "
                                r"version='v1'"),
    (("v2", 64, torch.float32), r"v2 \(cuda-wmma\) is not compiled.*dtype=float32 is not "
                                r"supported.*: use version='v1' \(backend='cuda-naive'\)"),
])
def test_compile_argument_errors(args, match):
    with pytest.raises(ValueError, match=match):
        cuda.compile_attention(*args)


@pytest.mark.parametrize("arch", ["90", "sm90", "compute_90", ""])
def test_bad_arch(arch):
    with pytest.raises(ValueError, match=r"arch=.* must be a string like 'sm_90' \(the book compiles for sm_80"):
        cuda.compile_attention("v1", 32, torch.float32, arch)


def test_missing_nvrtc_names_the_packages(monkeypatch):
    monkeypatch.setitem(sys.modules, "cuda.bindings.nvrtc", None)
    monkeypatch.setattr(nvrtc, "_MEMORY", {})
    with pytest.raises(cuda.NvrtcUnavailableError, match=r"cuda-bindings.*cuda-toolkit\[nvrtc,cudart,crt\]"):
        cuda.compile_attention("v1", 32, torch.float32)
    with pytest.raises(cuda.NvrtcUnavailableError):
        cuda.nvrtc_version()
    info = cuda.device_info()
    assert info["nvrtc"] is None and "cuda-bindings" in info["nvrtc_error"]


def test_missing_headers_names_the_packages(monkeypatch, tmp_path):
    monkeypatch.setattr(cuda_toolkit, "_header_candidates", lambda: [tmp_path])
    monkeypatch.setattr(nvrtc, "_MEMORY", {})
    with pytest.raises(cuda.NvrtcUnavailableError, match=r"cuda_fp16.h.*cuda-toolkit\[nvrtc"):
        cuda.compile_attention("v1", 32, torch.float32, use_cache=False)


def test_compile_error_carries_nvrtc_log(monkeypatch):
    good = cuda_toolkit.kernel_source("v1")
    monkeypatch.setattr(cuda_toolkit, "kernel_source",
                        lambda v: good.replace("const int tid", "const int tid = oops;\n  int x"))
    with pytest.raises(cuda.CompileError) as e:
        cuda.compile_attention("v1", 32, torch.float32, use_cache=False)
    assert '"oops" is undefined' in e.value.log and '"oops" is undefined' in str(e.value)
    assert "attention_v1" in str(e.value) and "sm_90" in str(e.value)


def test_no_gpu_error_suggests_emulator(monkeypatch):
    monkeypatch.setattr(cuda_launch, "has_gpu", lambda: False)
    with pytest.raises(cuda_launch.GpuUnavailableError, match="backend='emulator'"):
        cuda_launch.require_gpu()


def test_old_driver_names_both_versions(monkeypatch):
    with pytest.raises(cuda_launch.DriverTooOldError, match=r"CUDA 12\.8 but NVRTC is 13\.0"):
        cuda_launch.check_driver(driver_version=12080, nvrtc=(13, 0))
    monkeypatch.setattr(cuda_launch, "_driver_version", lambda: 12040)
    with pytest.raises(cuda_launch.DriverTooOldError, match=r"12\.4.*pip install"):
        cuda_launch.check_driver(nvrtc=(13, 0))
    cuda_launch.check_driver(driver_version=13020, nvrtc=(13, 0))  # newer driver: fine
    cuda_launch.check_driver(driver_version=13000, nvrtc=(13, 1))  # minor-version compatible


def _qkv(*shape, dtype=torch.float32, device="cpu") -> tuple[torch.Tensor, torch.Tensor,
                                                               torch.Tensor]:
    q, k, v = (torch.randn(*shape, device=device).to(dtype) for _ in range(3))
    return q, k, v


def test_launch_input_errors():
    q, k, v = _qkv(1, 2, 5, 32)
    with pytest.raises(ValueError, match=r"device cpu.*\.cuda\(\).*backend='emulator'"):
        cuda.launch_attention(q, k, v)
    with pytest.raises(ValueError, match=r"q is not contiguous.*q\.contiguous\(\)"):
        cuda.launch_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2))
    with pytest.raises(TypeError, match=r"float64.*allowed"):
        cuda.launch_attention(*_qkv(1, 2, 5, 32, dtype=torch.float64))
    with pytest.raises(ValueError, match=r"head_dim=300 is above.*256.*sdpa"):
        cuda.launch_attention(*_qkv(1, 1, 3, 300))
    with pytest.raises(ValueError, match=r"v2 \(cuda-wmma\) cannot run this: head_dim=72.*version='v1'"):
        cuda.launch_attention(*_qkv(1, 1, 3, 72, dtype=torch.float16), version="v2")
    with pytest.raises(ValueError, match=r"version='v9'"):
        cuda.launch_attention(q, k, v, version="v9")
    with pytest.raises(TypeError, match=r"causal"):
        cuda.launch_attention(q, k, v, causal="yes")  # type: ignore[arg-type]  # under test


def test_v3_launch_input_errors():
    """v3's own checks run before any GPU is needed: its head_dims and dtypes, 16-byte
    aligned rows (cp.async copies 16 bytes from each row's start)."""
    with pytest.raises(ValueError, match=r"v3 \(cuda-flash\) cannot run this.*head_dim=48.*version='v2'"):
        cuda.launch_attention(*_qkv(1, 1, 3, 48, dtype=torch.float16), version="v3")
    with pytest.raises(ValueError, match=r"v3 \(cuda-flash\) cannot run this.*float32.*cuda-naive"):
        cuda.launch_attention(*_qkv(1, 1, 3, 64), version="v3")
    big = torch.randn(1 * 1 * 3 * 64 + 1).to(torch.float16)
    shifted = big[1:].view(1, 1, 3, 64)                 # contiguous, 2 bytes off alignment
    q, k, v = _qkv(1, 1, 3, 64, dtype=torch.float16)
    with pytest.raises(ValueError, match=r"q's data is not 16-byte aligned.*clone"):
        cuda.launch_attention(shifted, k, v, version="v3")
    with pytest.raises(ValueError, match=r"device cpu"):       # aligned: the device check next
        cuda.launch_attention(q, k, v, version="v3")


def test_device_info_without_gpu_or_with_one():
    info = cuda.device_info()
    assert info["gpu"] == HAS_GPU and info["torch"] == torch.__version__
    assert info["nvrtc"] == "%d.%d" % cuda.nvrtc_version()
    if not HAS_GPU:
        assert "is_available" in info["reason"]


# ------------------------------------------------------------------ occupancy (pure)


def test_blocks_per_sm_from_first_principles():
    R = cuda.Resources
    # 256 threads = 8 warps; 32 regs -> 1024 regs per warp -> 64 warps -> 8 blocks; threads: 8
    assert occupancy.blocks_per_sm(R(32, 0, 0, 0, 0, 0, 0), 256, occupancy.H200) == 8
    # 128 threads, 80 regs -> 2560 per warp -> 25 warps -> 6 blocks of 4 warps
    assert occupancy.blocks_per_sm(R(80, 0, 0, 0, 0, 0, 0), 128, occupancy.H200) == 6
    # 40 KB shared + 1 KB reserved per block: floor(228 / 41) = 5 on an H200, floor(100/41) = 2
    res = R(32, 40 * 1024, 0, 40 * 1024, 0, 0, 0)
    occ = occupancy.occupancy(res, 128, occupancy.H200)
    assert occ["blocks_per_sm"] == 5 and occ["limiting"] == "shared memory"
    assert occupancy.blocks_per_sm(res, 128, occupancy.RTX_4090) == 2
    # over the per-block limit: cannot launch
    assert occupancy.blocks_per_sm(R(32, 228 * 1024, 0, 0, 0, 0, 0), 128) == 0
    assert occupancy.blocks_per_sm(dict(registers=16, shared_bytes=0), 32, occupancy.RTX_4090) == 24


def test_presets_and_grid_fill():
    assert (occupancy.H200["sms"], occupancy.H200["arch"]) == (132, "sm_90")
    assert (occupancy.RTX_4090["sms"], occupancy.RTX_4090["arch"]) == (128, "sm_89")
    fill = occupancy.grid_fill(8 * 12, 2)   # one block per (batch, head), B=8, nh=12
    assert fill["idle_sms"] == 132 - 96 and fill["waves"] == 1
    fill = occupancy.grid_fill(96 * 16, 5)
    assert fill["idle_sms"] == 0 and fill["waves"] == math.ceil(1536 / (132 * 5))
    with pytest.raises(ValueError, match="n_blocks=-1"):
        occupancy.grid_fill(-1, 1)
    with pytest.raises(ValueError, match="threads_per_block=0"):
        occupancy.occupancy(dict(registers=1, shared_bytes=0), 0)


# ------------------------------------------------------------------ on a GPU


shapes = st.fixed_dictionaries({
    "B": st.integers(1, 3), "nh": st.integers(1, 6), "T": st.integers(1, 80),
    "hs": st.sampled_from([1, 8, 16, 24, 32, 64, 72, 128]), "causal": st.booleans(),
    "dtype": st.sampled_from([torch.float32, torch.float16, torch.bfloat16]),
    "seed": st.integers(0, 2**16)})


@pytest.mark.parametrize("version", ["v1", "v2", "v3"])
@settings(max_examples=60, deadline=None)
@given(s=shapes)
@pytest.mark.gpu
@pytest.mark.skipif(not HAS_GPU, reason=NO_GPU)
def test_kernels_match_reference_on_gpu(version, s):
    if version == "v2" and (s["hs"] % 16 or s["dtype"] == torch.float32):
        return  # not a v2 case: the dispatcher sends it to v1 (tested in test_attention)
    if version == "v3" and (s["hs"] not in cuda.V3_HEAD_DIMS or s["dtype"] == torch.float32
                            or torch.cuda.get_device_capability()[0] < 8):
        return  # not a v3 case (tested in test_attention: the dispatcher falls back)
    g = torch.Generator(device="cuda").manual_seed(s["seed"])
    q, k, v = (torch.randn(s["B"], s["nh"], s["T"], s["hs"], device="cuda", generator=g)
               .to(s["dtype"]) for _ in range(3))
    out = cuda.launch_attention(q, k, v, causal=s["causal"], version=version)
    assert out.shape == q.shape and out.dtype == q.dtype and out.device == q.device
    res = compare_to_reference(out, q, k, v, s["causal"])
    assert res["passed"], (res, TOLERANCE[s["dtype"]])


@pytest.mark.parametrize("hs", [64, 128])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.gpu
@pytest.mark.skipif(not HAS_GPU, reason=NO_GPU)
def test_big_shapes_and_emulator_agreement_on_gpu(hs, dtype, causal):
    from andrea_edu.kernels.emulator import emulate
    q, k, v = _qkv(2, 12, 1000, hs, dtype=dtype, device="cuda")
    v3 = torch.cuda.get_device_capability()[0] >= 8
    for version in ("v1", "v2", "v3") if v3 else ("v1", "v2"):
        out = cuda.launch_attention(q, k, v, causal=causal, version=version)
        assert compare_to_reference(out, q, k, v, causal)["passed"], version
        if version == "v1":
            continue
        emu, _ = emulate(q[:1, :2], k[:1, :2], v[:1, :2], causal=causal, kernel=version,
                         trace=False)
        atol, rtol = TOLERANCE[dtype]
        torch.testing.assert_close(out[:1, :2].float(), emu.float(), atol=atol / 2,
                                   rtol=rtol / 2)


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_GPU, reason=NO_GPU)
def test_runs_on_torchs_current_stream():
    q, k, v = _qkv(4, 12, 512, 64, dtype=torch.float16, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        q2 = q * 1.0                     # queued on `side`; the kernel must follow it there
        out = cuda.launch_attention(q2, k, v, version="v2")
    side.synchronize()
    ref = reference_attention(q, k, v)
    assert (out.float() - ref.float()).abs().max() < 2e-3
