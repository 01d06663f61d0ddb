"""Kernels written in a notebook cell (andrea_edu.notebook.kernel_cell) and the kernel puzzles
(andrea_edu.notebook.kernel_puzzles), graded on the CPU simulator.

Each puzzle: its reference solution passes; its starter fails; at least two planted wrong
solutions fail with the sentence a learner should read (a wrong value at a named place, a
missing __syncthreads, an out-of-bounds read, a deadlock, uninitialised shared memory, an
element never written). The naive kernel of "One kernel, many heads" is checked the same way.
NVRTC evidence is left out (evidence=False) except in one test, to keep the file fast; the
simulator builds are cached by content, so a second run compiles nothing.
"""
from __future__ import annotations

import math
import re
import shutil

import pytest
import torch

from andrea_edu.attention import reference_attention
from andrea_edu.notebook import cuda_magic, kernel_cell
from andrea_edu.notebook.kernel_puzzles import PUZZLES, grade

pytestmark = pytest.mark.skipif(not (shutil.which("g++") or shutil.which("c++")),
                                reason="no host C++ compiler (g++) found")


@pytest.mark.parametrize("name", sorted(PUZZLES))
def test_the_reference_solution_passes_and_the_starter_does_not(name):
    assert grade(name, PUZZLES[name].solution).ok
    r = grade(name, PUZZLES[name].starter)
    assert not r.ok and r.verdict


def _planted(name: str, old: str, new: str) -> str:
    src = PUZZLES[name].solution
    assert src.count(old) == 1, f"planted fault's target not unique in {name}: {old!r}"
    return src.replace(old, new)


PLANTED = [  # puzzle, old, new, kind, the sentence the learner reads (a regex)
    ("mask", "j <= i ?", "j < i ?", "wrong",
     r"masked at \(batch 0, head 0, row 0, column 0\) is -inf, expected -?\d"),
    ("mask", "j < T; j += blockDim.x", "j < T && j < 32; j += blockDim.x", "unwritten",
     r"masked at \(batch 0, head 0, row 0, column 32\) is NaN: no thread wrote it"),
    ("mask", "j < T; j += blockDim.x", "j <= T; j += blockDim.x", "out-of-bounds",
     r"out-of-bounds access: (scores|masked) is 10952 bytes long; block \(1,36,0\)"),
    ("rowmax", "offset = 16", "offset = 8", "wrong",
     r"row_max_out at index \(0, 0, \d+\) is .*, expected "),
    ("rowmax", "  for (int offset = 16", "  if (threadIdx.x == 0) for (int offset = 16", "deadlock",
     r"deadlock: a barrier that not every thread reaches"),
    ("ktile", "  __syncthreads();", "", "missing-sync",
     r"a missing __syncthreads\(\): scores at \(batch \d, head \d, row \d+, column \d+\)"),
    ("ktile", "e < BK * D;", "e < BK * D / 2;", "uninitialised-shared",
     r"scores at .* is NaN: it read shared memory that no thread wrote"),
    ("ktile", "if (j0 + j < T) kt", "kt", "out-of-bounds",
     r"out-of-bounds access: k is 4736 bytes long; .* bytes past its end"),
    ("online", "l * expf(m - m_new)", "l * expf(m_new - m)", "nan",
     r"probs at \(batch 0, head 0, row 0, column 0\) is NaN: computed as NaN \(0/0, inf - inf"),
    ("online", "expf(s[j] - m) / l", "expf(s[j] - m) / (l + 1.0f)", "wrong",
     r"probs at \(batch 0, head 0, row 0, column \d+\) is .*, expected "),
    ("online", "if (r >= rows) return;", "", "out-of-bounds",
     r"out-of-bounds access: (scores|probs) is 10952 bytes long"),
]


@pytest.mark.parametrize("name, old, new, kind, says", PLANTED,
                         ids=[f"{p[0]}-{p[3]}" for p in PLANTED])
def test_a_planted_fault_fails_with_the_message_a_learner_should_see(name, old, new, kind, says):
    r = grade(name, _planted(name, old, new))
    assert not r.ok and r.kind == kind, r
    assert re.search(says, r.verdict), r.verdict


NAIVE = r"""
__global__ void naive_attention(const float* q, const float* k, const float* v, float* out,
                                int rows, int T, int D, float scale, int causal) {
  int row = blockIdx.x * blockDim.x + threadIdx.x;
  if (row >= rows) return;
  int t = row % T;
  const float* kh = k + (row - t) * D;
  const float* vh = v + (row - t) * D;
  int keys = causal ? t + 1 : T;
  float m = -3.0e38f, l = 0.0f;
  for (int j = 0; j < keys; ++j) {
    float s = 0.0f;
    for (int d = 0; d < D; ++d) s += q[row * D + d] * kh[j * D + d];
    m = fmaxf(m, s * scale);
  }
  for (int d = 0; d < D; ++d) out[row * D + d] = 0.0f;
  for (int j = 0; j < keys; ++j) {
    float s = 0.0f;
    for (int d = 0; d < D; ++d) s += q[row * D + d] * kh[j * D + d];
    float p = expf(s * scale - m);
    l += p;
    for (int d = 0; d < D; ++d) out[row * D + d] += p * vh[j * D + d];
  }
  for (int d = 0; d < D; ++d) out[row * D + d] /= l;
}
"""


def _naive(src, B=1, H=2, T=37, D=24, causal=True, blocks=None):
    q, k, v = (torch.randn(B, H, T, D, generator=torch.Generator().manual_seed(i))
               for i in range(3))
    rows = B * H * T
    return kernel_cell.run_kernel(src, (blocks or -(-rows // 32),), (32,), q, k, v,
                                  torch.empty_like(q), rows, T, D, 1 / math.sqrt(D), int(causal),
                                  expect=reference_attention(q, k, v, causal), evidence=False)


def test_the_naive_kernel_matches_the_reference_and_its_faults_are_named():
    for causal in (False, True):
        assert _naive(NAIVE, causal=causal).ok
    r = _naive(NAIVE.replace("causal ? t + 1 : T", "causal ? t + 2 : T"))
    assert r.kind == "out-of-bounds" and "past its end" in r.verdict, r
    r = _naive(NAIVE, blocks=2)                                  # 64 of 74 rows
    assert r.kind == "unwritten" and "(batch 0, head 1, row 27, column 0)" in r.verdict, r


def test_a_write_race_is_called_a_race():
    src = """__global__ void last_writer(float* out) {
      __shared__ float slot;
      slot = (float)threadIdx.x;                  // every thread writes the one slot
      __syncthreads();
      out[threadIdx.x] = slot;
    }"""
    r = kernel_cell.run_kernel(src, (1,), (64,), torch.empty(64), expect=torch.zeros(64),
                               evidence=False)
    assert r.kind == "race" and "under one barrier order (seed 1)" in r.verdict, r


def test_bad_arguments_are_one_line_naming_the_parameter():
    with pytest.raises(TypeError, match=r"args: q is a const float\*; pass a torch.float32 tensor, "
                                        r"got torch.float16"):
        kernel_cell.run_kernel(NAIVE, (1,), (32,), torch.zeros(4, dtype=torch.float16),
                               *[torch.zeros(4)] * 3, 1, 1, 1, 1.0, 0)
    with pytest.raises(ValueError, match=r"args: naive_attention takes 9 arguments"):
        kernel_cell.run_kernel(NAIVE, (1,), (32,), torch.zeros(4))
    with pytest.raises(ValueError, match=r"exactly one __global__ void function"):
        kernel_cell.parameters("int main() {}")


def test_the_cuda_cell_stores_the_source_and_reports_nvrtc_or_why_not():
    ns: dict = {}
    line = cuda_magic.cuda("naive", NAIVE, ns)
    assert ns["naive"] == NAIVE
    assert re.match(r"naive: (sm_80: \d+ registers, .* PTX lines|NVRTC not used)", line), line
    graded = cuda_magic.cuda("m --grade mask", PUZZLES["mask"].solution, ns)
    assert "puzzle 'mask': ok: causal_mask matches" in graded and ns["m"] == PUZZLES["mask"].solution
    with pytest.raises(ValueError, match="PUZZLE must be one of"):
        cuda_magic.cuda("m --grade nothing", NAIVE, ns)
    with pytest.raises(ValueError, match="NAME a Python identifier"):
        cuda_magic.cuda("2x", NAIVE, ns)
    broken = cuda_magic.cuda("b", NAIVE.replace("float s = 0.0f;", "float s = 0.0f", 1), ns)
    assert "NVRTC could not compile naive_attention" in broken or "NVRTC not used" in broken



def test_the_chapter_shows_each_puzzles_starter_as_the_grader_knows_it():
    """One kernel, many heads holds each starter kernel in a cell a reader edits: the same text
    as kernel_puzzles' (so the grade a reader sees is the grade tested here)."""
    import json
    from pathlib import Path
    nb = json.loads((Path(__file__).parents[1] / "book" / "one_kernel_many_heads.ipynb").read_text())
    code = ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code"]
    for name, p in PUZZLES.items():
        cell = next(c for c in code if f'kernel_puzzles.grade("{name}", my_{name})' in c)
        assert f'my_{name} = r"""\n{p.starter}"""' in cell, name
