"""Kernel v3 (attention_v3_flash.cu) run on the CPU by andrea_edu/kernels/host_sim, against the fp32 reference.

The .cu file is compiled by g++ with -DANDREA_PTX_EMULATED: its inline-asm PTX layer (mma.sync,
ldmatrix, cp.async, cvt, ex2) is replaced by andrea_edu/kernels/host_sim/ptx_sim.h, which follows the PTX
ISA's fragment tables (checked on their own in tests/test_ptx_layouts.py). Every block of the
grid runs with one fiber per CUDA thread, lanes and threads resumed in a random order at every
barrier and every warp-wide instruction; unwritten shared memory, cp.async destinations not yet
waited for and unwritten outputs all read NaN. Cases: seq_len not a multiple of any tile
(1, 7, 65, 130), batch 1, one head and several, causal and not, fp16 and bf16, head_dim
32/64/96/128, and inputs scaled so the softmax is peaked. Mutation tests show that a wrong
fragment index, a missing cp.async wait, a wait placed after the barrier and a missing barrier
each make the run fail. Grid, threads and shared memory come from andrea_edu.kernels, exactly
what the launcher passes on a GPU.

The padded specializations (attention_v3_flash<T, HD, RD>, backend cuda-flash-padded, issue 39)
run here too, at the head_dims whose code paths differ: 72 (fp16 and bf16: 16-byte chunks, 80
wide, one m16 tile per warp), 8 (bf16: 16 wide, two m16 tiles per warp, one real chunk of two),
40 (fp16: 48 wide, two m16 tiles), 120 (bf16: 128 wide), 70 (fp16) and 100 (bf16): rows not
16-byte aligned, copied element by element. The other head_dims 8..128 (every multiple of 8)
are checked on the Python emulator (tests/test_kernel_pad.py): each build costs ~2.5 s here.
Mutations of the padded paths: a pad left unzeroed, a pad column written out and an off-by-one
in the real width each fail (an unzeroed pad reads the simulator's NaN poison).
"""
from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import torch

from andrea_edu.dispatch import compare_to_reference
from andrea_edu.kernels import registry
from andrea_edu.kernels.grid import grid_shape
from andrea_edu.kernels.nvrtc import shared_bytes
from andrea_edu.kernels.toolkit import kernel_constants, kernel_source

HERE = Path(__file__).parents[1] / "andrea_edu" / "kernels" / "host_sim"  # the simulator (package data)
CXX = shutil.which("g++") or shutil.which("c++") or ""  # "": none found, every test skips
pytestmark = pytest.mark.skipif(not CXX, reason="no host C++ compiler (g++) found")
_CT = {torch.float16: "__half", torch.bfloat16: "__nv_bfloat16"}


def version_of(hs: int, dtype) -> str:
    """v3 at its own widths, else the padded v3 (the dispatcher's choice with pad=True)."""
    spec, _ = registry.walk(hs, dtype, pad=True)
    assert spec is not None and spec.kernel == "attention_v3_flash", (hs, spec)
    return spec.version


def v3_launch(B: int, nh: int, T: int, hs: int, dtype) -> tuple[int, int, int, int]:
    """(grid_x, grid_y, threads, dynamic shared bytes): what kernels.launch passes on a GPU."""
    ver = version_of(hs, dtype)
    gx, gy, _ = grid_shape(ver, B, nh, T, head_dim=hs)
    return gx, gy, kernel_constants("v3")["V3_THREADS"], shared_bytes(ver, hs, dtype)


def host_source(mutate: tuple | None = None) -> str:
    """The .cu text with its `extern __shared__` array pointed at the simulator's buffer, and
    optionally one deliberate bug (old, new) for the mutation tests."""
    src = kernel_source("v3")
    if mutate:
        assert src.count(mutate[0]) == 1, f"mutation target not unique: {mutate[0]!r}"
        src = src.replace(*mutate)
    src, n = re.subn(r"extern __shared__ (?:__align__\(\d+\) )?([\w ]+?) (\w+)\[\];",
                     r"\1* \2 = static_cast<\1*>(::sim::g_smem);", src)
    assert n == 1, "expected exactly one extern __shared__ declaration"
    return src


@pytest.fixture(scope="module")
def build(tmp_path_factory):
    root = tmp_path_factory.mktemp("host_sim_v3")
    built: dict = {}

    def _build(hs: int, dtype, mutate=None):
        key = (hs, dtype, mutate)
        if key not in built:
            tag = f"v3_{hs}_{_CT[dtype]}_{len(built)}"
            spec = registry.get(version_of(hs, dtype))
            targs = ",".join([_CT[dtype], *map(str, spec.template_args(spec.tile(hs, dtype)))])
            cu = root / f"{tag}.cu"
            cu.write_text(host_source(mutate))
            exe = root / tag
            cmd = [CXX, "-std=c++17", "-O1", "-w", "-fno-strict-aliasing",
                   f"-I{HERE}", f"-I{HERE / 'include'}", "-DANDREA_PTX_EMULATED",
                   "-include", str(HERE / "ptx_sim.h"), f"-DSIM_T={_CT[dtype]}",
                   f"-DSIM_KERNEL=andrea::attention_v3_flash<{targs}>",
                   f"-DANDREA_SMEM_BYTES={shared_bytes(spec.version, hs, dtype)}",
                   f'-DKERNEL_FILE="{cu}"', str(HERE / "harness.cpp"), "-o", str(exe)]
            run = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
            assert run.returncode == 0, run.stderr[-4000:]
            built[key] = exe
        return built[key]

    return _build


def run_v3(build, tmp_path, B, nh, T, hs, dtype, causal, seed=0, peak=1.0, mutate=None,
           order_seed=None):
    """Run v3 on the host; returns (out, q, k, v). `seed` draws the inputs (and, unless
    `order_seed` is given, the thread order at barriers); `peak` scales q: large -> peaked."""
    exe = build(hs, dtype, mutate)
    g = torch.Generator().manual_seed(seed)
    q = (torch.randn(B, nh, T, hs, generator=g) * peak).to(dtype)
    k, v = (torch.randn(B, nh, T, hs, generator=g).to(dtype) for _ in range(2))
    inp, outp = tmp_path / "in.bin", tmp_path / "out.bin"
    inp.write_bytes(b"".join(t.contiguous().view(torch.uint8).numpy().tobytes()
                             for t in (q, k, v)))
    gx, gy, threads, smem = v3_launch(B, nh, T, hs, dtype)
    run = subprocess.run([str(exe), str(inp), str(outp), str(T), str(hs), str(int(causal)),
                          str(gx), str(gy), str(threads), str(smem),
                          str(seed if order_seed is None else order_seed)],
                         capture_output=True, text=True, timeout=300)
    if run.returncode != 0:
        raise RuntimeError(f"rc={run.returncode} {run.stderr[-2000:]}")
    raw = bytearray(outp.read_bytes())
    out = torch.frombuffer(raw, dtype=torch.uint8).view(dtype).view(B, nh, T, hs)
    return out, q, k, v


CASES = [  # B, nh, T, hs, dtype, peak: tails of every tile, one head, batch 1, seq_len 1
    (1, 1, 1, 64, torch.float16, 1.0),
    (1, 2, 7, 32, torch.bfloat16, 1.0),
    (2, 1, 65, 64, torch.bfloat16, 1.0),
    (1, 1, 130, 128, torch.float16, 1.0),
    (1, 3, 33, 96, torch.float16, 1.0),
    (1, 1, 70, 64, torch.float16, 12.0),      # peaked: scores spread over ~100 (fp16 exp2)
    (1, 1, 65, 32, torch.bfloat16, 12.0),
    (1, 2, 200, 32, torch.float16, 1.0),      # 2 blocks of 128 rows; the diagonal spans 2 tiles
]


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("B, nh, T, hs, dtype, peak", CASES)
def test_v3_on_host_matches_reference(build, tmp_path, B, nh, T, hs, dtype, peak, causal):
    out, q, k, v = run_v3(build, tmp_path, B, nh, T, hs, dtype, causal, seed=T + hs, peak=peak)
    assert not torch.isnan(out.float()).any(), "an output element was never written"
    res = compare_to_reference(out, q, k, v, causal)
    assert res["passed"], res


def test_v3_on_host_is_the_same_for_other_barrier_orders(build, tmp_path):
    """The order in which threads resume at barriers must not change a single bit."""
    outs = [run_v3(build, tmp_path, 1, 2, 70, 64, torch.float16, True, seed=5, order_seed=o)[0]
            for o in (11, 12, 13)]
    assert all(torch.equal(outs[0], o) for o in outs[1:])


# Deliberate bugs: each must make the on-host run disagree with the reference (or crash).
MUTATIONS = {
    # K's ldmatrix x4: matrices 1 and 2 swapped (dims +8 vs keys +8): a wrong B fragment.
    "wrong K fragment index": (
        "          ptx::mma_16816<T>(s[mt][2 * np], qf[mt][kk], b[0], b[1]);",
        "          ptx::mma_16816<T>(s[mt][2 * np], qf[mt][kk], b[0], b[2]);"),
    # P's A fragment: rows g and g+8 exchanged in registers 1 and 2 (a2a3 <-> a4a5).
    "wrong P fragment index": (
        "        p[mt][1] = ptx::pack2<T>(s[mt][2 * kk][2], s[mt][2 * kk][3]);",
        "        p[mt][1] = ptx::pack2<T>(s[mt][2 * kk + 1][0], s[mt][2 * kk + 1][1]);"),
    # The wait before each tile's barrier: tile j+1's copies are never waited for.
    "missing cp.async wait": ("    ptx::cp_async_wait<0>();                    // tile j has "
                              "landed", "    // (wait removed)                    // tile j has "
                              "landed"),
    # The wait after the barrier: each thread waits for its own copies, but others may read
    # its rows before that (they read NaN in the simulator).
    "cp.async wait after the barrier": (
        "    ptx::cp_async_wait<0>();                    // tile j has landed (this thread's "
        "copies)\n    __syncthreads();",
        "    __syncthreads();\n    ptx::cp_async_wait<0>();"),
    # No barrier at the top of the loop: a warp's prefetch of tile j+1 overwrites the buffer
    # another warp is still reading for tile j-1 (and tile j is not visible to all).
    "missing barrier before the prefetch": (
        "    __syncthreads();                            // ... everyone's; all done with tile "
        "j-1 and Q", "    // (barrier removed)"),
}


@pytest.mark.parametrize("name", list(MUTATIONS))
def test_v3_mutation_is_caught(build, tmp_path, name):
    try:
        out, q, k, v = run_v3(build, tmp_path, 1, 1, 130, 64, torch.float16, False,
                              mutate=MUTATIONS[name])
    except RuntimeError:
        return                                  # the simulator stopped it (a check failed)
    assert not compare_to_reference(out, q, k, v, False)["passed"], name


# ------------------------------------------------------------------ the padded kernel (RD < HD)
PADDED_CASES = [  # B, nh, T, hs, dtype, peak: see the module docstring for why these head_dims
    (1, 2, 70, 72, torch.float16, 1.0),
    (2, 1, 65, 72, torch.bfloat16, 1.0),
    (1, 1, 130, 8, torch.bfloat16, 1.0),
    (1, 2, 33, 40, torch.float16, 1.0),
    (1, 1, 65, 120, torch.bfloat16, 1.0),
    (1, 2, 66, 70, torch.float16, 1.0),
    (1, 1, 70, 100, torch.bfloat16, 1.0),
    (1, 1, 7, 72, torch.float16, 12.0),       # peaked
]


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("B, nh, T, hs, dtype, peak", PADDED_CASES)
def test_padded_v3_on_host_matches_reference(build, tmp_path, B, nh, T, hs, dtype, peak, causal):
    assert version_of(hs, dtype) == "v3p"
    out, q, k, v = run_v3(build, tmp_path, B, nh, T, hs, dtype, causal, seed=T + hs, peak=peak)
    assert not torch.isnan(out.float()).any(), "an output element was never written"
    res = compare_to_reference(out, q, k, v, causal)
    assert res["passed"], res


PAD_MUTATIONS = {  # (head_dim, (old, new)): a deliberate bug in the padded paths
    # The pad chunks are skipped instead of zero-filled: shared memory keeps what was there.
    "pad left unzeroed (16-byte chunks)": (72, (
        "          ptx::cp_async_16(dst + soff[it], ok ? from : src, ok);",
        "          if (real) ptx::cp_async_16(dst + soff[it], ok ? from : src, ok);")),
    "pad left unzeroed (2-byte elements)": (70, (
        "            d[e] = ok ? f[e] : (unsigned short)0;",
        "            if (ok) d[e] = f[e];")),
    # The epilogue writes every computed column: the pad's zeros land on the next row.
    "pad column written out": (72, (
        "        if (i < seq_len && col < RD)", "        if (i < seq_len)")),
    # One chunk too many counted as real: the next row's first 8 elements land in the pad.
    "off-by-one in the real width (chunks)": (72, (
        "          const bool real = cc < RD / 8;", "          const bool real = cc <= RD / 8;")),
    # One element too many counted as real on the way out: column RD overwrites the next row.
    "off-by-one in the real width (store)": (70, (
        "if (i < seq_len && col + e < RD) oh[", "if (i < seq_len && col + e <= RD) oh[")),
}


@pytest.mark.parametrize("name", list(PAD_MUTATIONS))
def test_padded_v3_mutation_is_caught(build, tmp_path, name):
    hs, mutate = PAD_MUTATIONS[name]
    try:
        out, q, k, v = run_v3(build, tmp_path, 1, 2, 70, hs, torch.float16, False, mutate=mutate)
    except RuntimeError:
        return                                  # the simulator stopped it (a check failed)
    assert not compare_to_reference(out, q, k, v, False)["passed"], name
