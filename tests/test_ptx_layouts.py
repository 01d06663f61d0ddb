"""The host simulator's PTX instructions, checked on their own against the PTX ISA's tables.

A kernel and a simulator written by the same hand can share one misunderstanding, so the tables
here are written a second time, in another form: as the ISA's *figures* draw them (8x8 blocks,
thread T(4r + c/2) holding row r, columns c and c+1 of a block), not as the formulas
andrea_edu/kernels/host_sim/ptx_sim.h uses. andrea_edu/kernels/host_sim/ptx_probe.cpp runs one warp of the emulated
instruction on operands chosen here and prints what each lane holds.

Sources (PTX ISA, NVIDIA):
  "Matrix Fragments for mma.m16n8k16 with floating point type"  (A: a0..a7, B: b0..b3, C/D: c0..c3)
  "Warp-level matrix load instruction: ldmatrix"                (x1/x2/x4, .trans)
  "Data Movement and Conversion Instructions: cp.async", "cp.async.commit_group",
  "cp.async.wait_group"; "Data Movement and Conversion Instructions: shfl.sync"
"""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch

HERE = Path(__file__).parents[1] / "andrea_edu" / "kernels" / "host_sim"  # the simulator (package data)
CXX = shutil.which("g++") or shutil.which("c++") or ""  # "": none found, every test skips
pytestmark = pytest.mark.skipif(not CXX, reason="no host C++ compiler (g++) found")


# --- the ISA's figures, as (row, col) -> (lane, element) ---------------------------------------
def _block(rows, cols, first_elem):
    """One 8x8 block of a figure: T(4r + c//2) holds (r, c) as element first_elem + c % 2."""
    return {(r0 + r, c0 + c): (4 * r + c // 2, first_elem + c % 2)
            for r0, c0 in [(rows, cols)] for r in range(8) for c in range(8)}


# A, 16x16 .row: a0,a1 top-left block; a2,a3 bottom-left; a4,a5 top-right; a6,a7 bottom-right.
ISA_A = {**_block(0, 0, 0), **_block(8, 0, 2), **_block(0, 8, 4), **_block(8, 8, 6)}
# B, 16x8 .col: the figure draws it by columns: thread T(4n + k//2) holds (k, n) and (k+1, n);
# b0,b1 for k in 0..7, b2,b3 for k in 8..15.
ISA_B = {(k0 + k, n): (4 * n + k // 2, e0 + k % 2)
         for k0, e0 in [(0, 0), (8, 2)] for k in range(8) for n in range(8)}
# C/D, 16x8 fp32: c0,c1 rows 0..7; c2,c3 rows 8..15.
ISA_C = {**_block(0, 0, 0), **_block(8, 0, 2)}


def test_isa_tables_are_complete_and_match_the_figures_spot_checks():
    assert sorted(ISA_A) == [(r, c) for r in range(16) for c in range(16)]
    assert sorted(set(ISA_A.values())) == [(l, e) for l in range(32) for e in range(8)]
    assert sorted(set(ISA_B.values())) == [(l, e) for l in range(32) for e in range(4)]
    assert sorted(set(ISA_C.values())) == [(l, e) for l in range(32) for e in range(4)]
    # Entries read off the ISA's figures directly.
    assert ISA_A[(0, 0)] == (0, 0) and ISA_A[(0, 1)] == (0, 1) and ISA_A[(0, 2)] == (1, 0)
    assert ISA_A[(8, 0)] == (0, 2) and ISA_A[(0, 8)] == (0, 4) and ISA_A[(15, 15)] == (31, 7)
    assert ISA_A[(1, 0)] == (4, 0) and ISA_A[(7, 6)] == (31, 0)
    assert ISA_B[(0, 0)] == (0, 0) and ISA_B[(1, 0)] == (0, 1) and ISA_B[(2, 0)] == (1, 0)
    assert ISA_B[(8, 0)] == (0, 2) and ISA_B[(0, 1)] == (4, 0) and ISA_B[(15, 7)] == (31, 3)
    assert ISA_C[(0, 0)] == (0, 0) and ISA_C[(8, 1)] == (0, 3) and ISA_C[(15, 7)] == (31, 3)


# --- the probe -----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def probe(tmp_path_factory):
    exe = tmp_path_factory.mktemp("ptx_probe") / "ptx_probe"
    run = subprocess.run([CXX, "-std=c++17", "-O1", "-w", f"-I{HERE}", f"-I{HERE / 'include'}",
                          str(HERE / "ptx_probe.cpp"), "-o", str(exe)],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-4000:]

    def _run(*args, stdin: str = "", check: bool = True):
        r = subprocess.run([str(exe), *map(str, args)], input=stdin, capture_output=True,
                           text=True, timeout=60)
        if check:
            assert r.returncode == 0, r.stderr
        return r

    return _run


def test_simulator_fragment_tables_match_the_isa(probe):
    """Which (row, col) each lane holds in a0..a7, b0..b3, c0..c3, as the simulator says."""
    lines = probe("layout").stdout.split("\n")[:32]
    for lane, line in enumerate(lines):
        v = list(map(int, line.split()))
        pairs = list(zip(v[0::2], v[1::2]))
        for i, rc in enumerate(pairs[:8]):
            assert ISA_A[rc] == (lane, i), ("A", lane, i, rc)
        for i, rc in enumerate(pairs[8:12]):
            assert ISA_B[rc] == (lane, i), ("B", lane, i, rc)
        for i, rc in enumerate(pairs[12:16]):
            assert ISA_C[rc] == (lane, i), ("C", lane, i, rc)


def _bits(x: torch.Tensor) -> np.ndarray:
    return x.contiguous().view(torch.int16).numpy().astype(np.uint16).astype(np.uint32)


@pytest.mark.parametrize("dtype, name", [(torch.float16, "f16"), (torch.bfloat16, "bf16")])
def test_emulated_mma_m16n8k16_computes_a_times_b_plus_c(probe, dtype, name):
    """Registers packed from the ISA's tables, D unpacked with them: D == A B + C."""
    g = torch.Generator().manual_seed(3)
    A = torch.randn(16, 16, generator=g).to(dtype)
    B = torch.randn(16, 8, generator=g).to(dtype)
    C = torch.randn(16, 8, generator=g)
    ab, bb = _bits(A), _bits(B)
    a = np.zeros((32, 8), np.uint32)
    b = np.zeros((32, 4), np.uint32)
    c = np.zeros((32, 4), np.float32)
    for (r, col), (lane, e) in ISA_A.items():
        a[lane, e] = ab[r, col]
    for (k, n), (lane, e) in ISA_B.items():
        b[lane, e] = bb[k, n]
    for (r, col), (lane, e) in ISA_C.items():
        c[lane, e] = C[r, col]
    regs = lambda x, n: [int(x[2 * j]) | (int(x[2 * j + 1]) << 16) for j in range(n)]  # noqa: E731
    stdin = "\n".join(" ".join([*(f"{w:x}" for w in regs(a[l], 4)),
                                *(f"{w:x}" for w in regs(b[l], 2)),
                                *(repr(float(x)) for x in c[l])]) for l in range(32))
    d = np.array([list(map(float, ln.split())) for ln in
                  probe("mma", name, stdin=stdin).stdout.split("\n")[:32]])
    D = np.zeros((16, 8))
    for (r, col), (lane, e) in ISA_C.items():
        D[r, col] = d[lane, e]
    want = A.double().numpy() @ B.double().numpy() + C.double().numpy()
    np.testing.assert_allclose(D, want, rtol=1e-5, atol=1e-5)


def _ldmatrix_expected(offsets, n, trans, lane):
    """What lane `lane` receives, per the ISA: rows of matrix i come from threads 8i..8i+7."""
    out = []
    for i in range(n):
        if not trans:    # (row l/4, columns 2(l%4), +1)
            row = offsets[8 * i + lane // 4]
            lo, hi = row + 2 * (lane % 4), row + 2 * (lane % 4) + 1
        else:            # (rows 2(l%4), +1; column l/4)
            lo = offsets[8 * i + 2 * (lane % 4)] + lane // 4
            hi = offsets[8 * i + 2 * (lane % 4) + 1] + lane // 4
        out.append(lo | (hi << 16))      # the buffer holds element e == e
    return out


@pytest.mark.parametrize("trans", [0, 1])
@pytest.mark.parametrize("n", [1, 2, 4])
def test_emulated_ldmatrix_follows_the_isa(probe, n, trans):
    """Rows scattered at random 16-byte-aligned places; lanes past 8n give misaligned addresses,
    which the ISA says are not used (x1 reads threads 0-7, x2 threads 0-15)."""
    rng = np.random.default_rng(10 * n + trans)
    rows = rng.choice(4096 // 8, size=32, replace=False) * 8      # element offsets
    offsets = [int(o) if lane < 8 * n else int(o) + 3 for lane, o in enumerate(rows)]
    lines = probe("ldmatrix", n, trans, stdin="\n".join(map(str, offsets))).stdout.split("\n")
    for lane in range(32):
        got = [int(w, 16) for w in lines[lane].split()]
        assert got == _ldmatrix_expected(offsets, n, trans, lane), (lane, n, trans)


def test_emulated_ldmatrix_rejects_a_misaligned_row_address(probe):
    offsets = [8 * l for l in range(32)]
    offsets[5] += 1                                               # used by x1: must fail
    r = probe("ldmatrix", 1, 0, stdin="\n".join(map(str, offsets)), check=False)
    assert r.returncode == 3 and "16-byte aligned" in r.stderr


def test_emulated_cp_async_is_invisible_until_its_group_is_waited_for(probe):
    """Groups complete oldest first; wait_group N leaves N in flight; an uncommitted copy is not
    waited for; src-size 0 zero-fills; another thread sees the data after the barrier."""
    steps = {ln.split()[0]: list(map(int, ln.split()[1:]))
             for ln in probe("cpasync").stdout.strip().split("\n")}
    nan = 0xFFFF
    assert steps["before"] == [7, 7, 7, 7]
    assert steps["issued"] == [nan, nan, nan, nan]                # undefined until waited: NaN
    assert steps["wait2"] == [100, nan, nan, nan]                 # group 1 done, 2 in flight
    assert steps["wait1"] == [100, 108, nan, nan]
    assert steps["wait0"] == [100, 108, 0, nan]                   # zero-fill; 4th not committed
    assert steps["commit_wait0"] == [100, 108, 0, 124]
    assert steps["other_thread_after_barrier"] == [100, 108, 0, 124]


def test_simulator_rejects_a_thread_that_exits_with_copies_in_flight(probe):
    r = probe("cpasync_leak", check=False)
    assert r.returncode == 3 and "never waited" in r.stderr


def test_emulated_shuffles(probe):
    out = np.array([list(map(int, ln.split())) for ln in
                    probe("shfl").stdout.strip().split("\n")])
    lanes = np.arange(32)
    assert (out[:, 0] == 10 * (lanes ^ 1)).all()
    assert (out[:, 1] == 10 * (lanes ^ 2)).all()
    assert (out[:, 2] == 10 * (lanes ^ 16)).all()
    assert (out[:, 3] == 10 * ((7 * lanes) % 32)).all()
