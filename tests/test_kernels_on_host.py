"""The .cu files themselves, run on the CPU: a check of the kernels' code for machines with no GPU.

andrea_edu/kernels/host_sim compiles a kernel specialization with the host C++ compiler (g++) against
stand-in headers and runs every block of its grid with one cooperative fiber per CUDA thread,
resuming threads in a random order at every barrier. The output must match the fp32 reference
with the GPU tolerances. This exercises the kernels' own indexing, tails, masks and barrier
placement; reads past the end of a buffer crash on a guard page, unwritten shared memory and
unwritten outputs are NaN, and WMMA alignment/ldm rules are checked. It does not model the real
WMMA lane layout or GPU timing. Skipped when no C++ compiler is found.
The grid, threads and shared-memory size come from andrea_edu.kernels.nvrtc, exactly what the launcher
passes on a GPU, so the launcher's numbers are checked too.
"""
from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import torch

from andrea_edu import kernels as cuda
from andrea_edu.dispatch import compare_to_reference
from andrea_edu.kernels.nvrtc import _tile

HERE = Path(__file__).parents[1] / "andrea_edu" / "kernels" / "host_sim"  # the simulator (package data)
CXX = shutil.which("g++") or shutil.which("c++") or ""  # "": none found, every test skips
pytestmark = pytest.mark.skipif(not CXX, reason="no host C++ compiler (g++) found")
_CT = {torch.float32: "float", torch.float16: "__half", torch.bfloat16: "__nv_bfloat16"}


def _host_source(version: str, mutate: tuple | None = None) -> str:
    """The kernel's .cu text with its `extern __shared__` array pointed at the simulator's buffer
    (and, for the tests that show the checker has teeth, one deliberate bug: (old, new))."""
    src = cuda.kernel_source(version)
    if mutate:
        assert mutate[0] in src
        src = src.replace(*mutate)
    src, n = re.subn(r"extern __shared__ (?:__align__\(\d+\) )?([\w ]+?) (\w+)\[\];",
                     r"\1* \2 = static_cast<\1*>(::sim::g_smem);", src)
    assert n == 1, "expected exactly one extern __shared__ declaration"
    return src


@pytest.fixture(scope="module")
def build(tmp_path_factory):
    """Compile (once per specialization) the harness for one kernel; returns the binary."""
    root = tmp_path_factory.mktemp("host_sim")
    built: dict = {}

    def _build(version, head_dim, dtype, mutate=None):
        ck_tile = _tile(version, head_dim, dtype)
        key = (version, ck_tile, dtype, mutate)
        if key not in built:
            tag = f"{version}_{ck_tile}_{_CT[dtype]}_{len(built)}"
            cu = root / f"{tag}.cu"
            cu.write_text(_host_source(version, mutate))
            fn = "attention_v1" if version == "v1" else "attention_v2_wmma"
            exe = root / tag
            cmd = [CXX, "-std=c++17", "-O2", "-w", f"-I{HERE}", f"-I{HERE / 'include'}",
                   f"-DSIM_T={_CT[dtype]}", f"-DSIM_KERNEL=andrea::{fn}<{_CT[dtype]},{ck_tile}>",
                   f"-DANDREA_SMEM_BYTES={cuda.shared_bytes(version, head_dim, dtype)}",
                   f'-DKERNEL_FILE="{cu}"', str(HERE / "harness.cpp"), "-o", str(exe)]
            run = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
            assert run.returncode == 0, run.stderr[-4000:]
            built[key] = exe
        return built[key]

    return _build


def _run(build, tmp_path, version, B, nh, T, hs, dtype, causal, seed=0, mutate=None,
         smem_delta=0):
    exe = build(version, hs, dtype, mutate)
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(B, nh, T, hs, generator=g).to(dtype) for _ in range(3))
    inp, outp = tmp_path / "in.bin", tmp_path / "out.bin"
    inp.write_bytes(b"".join(t.contiguous().view(torch.uint8).numpy().tobytes()
                             for t in (q, k, v)))
    ck = cuda.compile_attention(version, hs, dtype)          # grid/threads/smem as launched
    gx, gy, _ = ck.grid(B, nh, T)
    run = subprocess.run([str(exe), str(inp), str(outp), str(T), str(hs), str(int(causal)),
                          str(gx), str(gy), str(ck.threads_per_block),
                          str(ck.resources.dynamic_shared_bytes + smem_delta), str(seed)],
                         capture_output=True, text=True, timeout=300)
    if run.returncode != 0:
        raise RuntimeError(f"rc={run.returncode} {run.stderr[-2000:]}")
    raw = bytearray(outp.read_bytes())
    out = torch.frombuffer(raw, dtype=torch.uint8).view(dtype).view(B, nh, T, hs)
    return out, q, k, v


CASES = [  # version, B, nh, T, hs, dtype: tails of every tile, one head, batch 1, seq_len 1
    ("v1", 1, 2, 37, 24, torch.float32),
    ("v1", 2, 1, 33, 72, torch.float16),
    ("v1", 1, 1, 17, 1, torch.bfloat16),
    ("v2", 1, 2, 70, 64, torch.float16),
    ("v2", 2, 1, 33, 16, torch.bfloat16),
    ("v2", 1, 1, 1, 128, torch.float16),
]


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("version, B, nh, T, hs, dtype", CASES)
def test_kernel_source_on_host_matches_reference(build, tmp_path, version, B, nh, T, hs, dtype,
                                                 causal):
    out, q, k, v = _run(build, tmp_path, version, B, nh, T, hs, dtype, causal, seed=T + hs)
    assert not torch.isnan(out.float()).any(), "an output element was never written"
    res = compare_to_reference(out, q, k, v, causal)
    assert res["passed"], res


@pytest.mark.slow
@pytest.mark.parametrize("version, hs, dtype", [("v1", 256, torch.float32),
                                                ("v2", 96, torch.bfloat16),
                                                ("v1", 128, torch.bfloat16)])
def test_kernel_source_on_host_big_head_dims(build, tmp_path, version, hs, dtype):
    for causal in (False, True):
        out, q, k, v = _run(build, tmp_path, version, 1, 1, 40, hs, dtype, causal)
        assert compare_to_reference(out, q, k, v, causal)["passed"]


def test_checker_catches_a_missing_barrier(build, tmp_path):
    """Without the __syncthreads after staging K/V, warps read a half-written tile."""
    bug = ("      __syncthreads();                           // tiles (and sQ) visible to every warp\n",
           "")
    out, q, k, v = _run(build, tmp_path, "v1", 1, 2, 37, 24, torch.float32, True, mutate=bug)
    assert not compare_to_reference(out, q, k, v, True)["passed"]


def test_checker_catches_too_little_shared_memory(build, tmp_path):
    """128 bytes less shared memory than the kernel's carve-up uses (keeping the base aligned):
    the last warp's accumulator runs into the guard page."""
    with pytest.raises(RuntimeError, match=r"rc=-11|rc=139"):
        _run(build, tmp_path, "v2", 1, 2, 70, 64, torch.float16, False, smem_delta=-128)
