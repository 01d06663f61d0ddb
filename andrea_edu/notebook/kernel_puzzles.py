"""Kernel puzzles of the chapter "One kernel, many heads": four small CUDA kernels a reader writes.

Each puzzle is one piece of the attention kernels, small enough for a cell: the causal mask, a
row maximum with warp shuffles, a K tile staged in shared memory, and the online-softmax
rescale. A puzzle holds its statement, hints, a starter kernel (it compiles and runs, but is not
yet right), a solution (hidden in the book) and the case it is graded on: the launch and the
inputs (seeded, awkward sizes: T = 37, not a multiple of any tile) and the expected output,
computed here in plain torch. `grade` runs the reader's kernel with kernel_cell.run_kernel on
the CPU simulator and returns its Report, whose sentence says what is wrong in plain words.

    PUZZLES {name: Puzzle}                 grade(name, source) -> kernel_cell.Report
    text(name) -> Markdown: the statement, and the hints folded away (a chapter shows it)
    solutions() -> Markdown: every solution kernel with its grade (the chapter's hidden cell)
    Puzzle.case() -> (grid, block, args, expect, shared_bytes)
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from andrea_edu.attention import softmax_scores
from andrea_edu.notebook.kernel_cell import Report, run_kernel

B, H, T, D = 1, 2, 37, 16        # the graded case: T a multiple of no tile, two heads


def _inputs(*shape, seed: int = 0) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


@dataclass(frozen=True)
class Puzzle:
    """One puzzle: what to write, hints, the starter and the solution kernels, and how it is
    graded (case() -> grid, block, args, expect, shared_bytes)."""
    name: str
    title: str
    statement: str
    hints: tuple[str, ...]
    starter: str
    solution: str
    case: Callable[[], tuple]


# ------------------------------------------------------------------ 1. the causal mask
MASK_SOLUTION = r"""#include <math_constants.h>
// One block per (batch*head, query row i); the threads stride over the T key columns j.
__global__ void causal_mask(const float* scores, float* masked, int T) {
  int i = blockIdx.y;                                    // query row
  const float* s = scores + ((size_t)blockIdx.x * T + i) * T;
  float* m = masked + ((size_t)blockIdx.x * T + i) * T;
  for (int j = threadIdx.x; j < T; j += blockDim.x)      // T may exceed the block
    m[j] = j <= i ? s[j] : -CUDART_INF_F;                // query i sees keys 0..i
}
"""
MASK_STARTER = MASK_SOLUTION.replace("j <= i ? s[j] : -CUDART_INF_F", "s[j]  /* TODO: mask */")


def _mask_case():
    s = _inputs(B, H, T, T, seed=1)                                   # (B, H, T, T)
    keep = torch.ones(T, T, dtype=torch.bool).tril()
    want = s.masked_fill(~keep, float("-inf"))
    return (B * H, T), (32,), (s, torch.empty_like(s), T), want, 0


# ------------------------------------------------------------------ 2. row max, warp shuffles
ROWMAX_SOLUTION = r"""// One warp (32 threads) per score row: each lane takes every 32nd column, then the lanes
// combine their maxima in five butterfly steps, after which every lane holds the row's max.
__global__ void row_max(const float* scores, float* row_max_out, int T) {
  const float* s = scores + (size_t)blockIdx.x * T;
  float m = -3.0e38f;
  for (int j = threadIdx.x; j < T; j += 32) m = fmaxf(m, s[j]);
  for (int offset = 16; offset > 0; offset /= 2)
    m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, offset));
  if (threadIdx.x == 0) row_max_out[blockIdx.x] = m;
}
"""
ROWMAX_STARTER = ROWMAX_SOLUTION.replace(
    "  for (int offset = 16; offset > 0; offset /= 2)\n"
    "    m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, offset));\n",
    "  // TODO: combine the 32 lanes' maxima with __shfl_xor_sync\n")


def _rowmax_case():
    s = _inputs(B, H, T, T, seed=2)                                   # (B, H, T, T)
    return (B * H * T,), (32,), (s, torch.empty(B, H, T), T), s.amax(-1), 0


# ------------------------------------------------------------------ 3. a K tile in shared memory
KTILE_SOLUTION = r"""// One block per (batch*head, tile of 32 keys): the block stages its K tile in shared memory
// once, then every thread reuses it for its query rows: S[i, j] = q_i . k_j for the tile's keys.
constexpr int D = 16, BK = 32;
__global__ void tile_scores(const float* q, const float* k, float* scores, int T) {
  __shared__ float kt[BK][D];
  const size_t bh = blockIdx.x;
  const int j0 = blockIdx.y * BK;                         // first key of this tile
  for (int e = threadIdx.x; e < BK * D; e += blockDim.x) {
    int j = e / D, d = e % D;
    if (j0 + j < T) kt[j][d] = k[(bh * T + j0 + j) * D + d];   // the last tile is short
  }
  __syncthreads();                                        // the whole tile, before anyone reads it
  for (int i = threadIdx.x; i < T; i += blockDim.x)
    for (int j = 0; j < BK && j0 + j < T; ++j) {
      float s = 0.0f;
      for (int d = 0; d < D; ++d) s += q[(bh * T + i) * D + d] * kt[j][d];
      scores[(bh * T + i) * T + j0 + j] = s;
    }
}
"""
KTILE_STARTER = KTILE_SOLUTION.replace(
    "  __syncthreads();                                        // the whole tile, before anyone "
    "reads it\n", "  // TODO: is the tile ready for every thread here?\n")


def _ktile_case():
    q, k = _inputs(B, H, T, D, seed=3), _inputs(B, H, T, D, seed=4)  # (B, H, T, D)
    return (B * H, -(-T // 32)), (64,), (q, k, torch.empty(B, H, T, T), T), q @ k.transpose(-2, -1), 0


# ------------------------------------------------------------------ 4. the online-softmax rescale
ONLINE_SOLUTION = r"""// One thread per row of scores: softmax in one pass over the row, as the kernels do over K/V
// tiles. m: the largest score so far; l: the sum of exp(score - m) so far. When a new score
// raises the maximum, everything summed so far was measured against the old one and shrinks
// by exp(m_old - m_new).
__global__ void online_softmax(const float* scores, float* probs, int rows, int T) {
  int r = blockIdx.x * blockDim.x + threadIdx.x;
  if (r >= rows) return;
  const float* s = scores + (size_t)r * T;
  float m = -3.0e38f, l = 0.0f;
  for (int j = 0; j < T; ++j) {
    float m_new = fmaxf(m, s[j]);
    l = l * expf(m - m_new) + expf(s[j] - m_new);         // rescale, then add the new term
    m = m_new;
  }
  for (int j = 0; j < T; ++j) probs[(size_t)r * T + j] = expf(s[j] - m) / l;
}
"""
ONLINE_STARTER = ONLINE_SOLUTION.replace(
    "l = l * expf(m - m_new) + expf(s[j] - m_new);         // rescale, then add the new term",
    "l = l + expf(s[j] - m_new);                           // TODO: what about the old terms?")


def _online_case():
    s = 3 * _inputs(B, H, T, T, seed=5)                               # (B, H, T, T), peaked
    return (-(-B * H * T // 32),), (32,), (s, torch.empty_like(s), B * H * T, T), \
        softmax_scores(s, causal=False), 0


PUZZLES = {p.name: p for p in (
    Puzzle("mask", "The causal mask",
           "Write `causal_mask`: copy a (batch, head)'s T x T scores, replacing every score of a "
           "key the query may not see (a later position) by minus infinity.",
           ("Query row `i` may see keys `0..i`: its own position included.",
            "The block has 32 threads and T = 37 columns: each thread handles columns "
            "`threadIdx.x`, `threadIdx.x + blockDim.x`, ...",
            "`CUDART_INF_F` (from `math_constants.h`) is +infinity."),
           MASK_STARTER, MASK_SOLUTION, _mask_case),
    Puzzle("rowmax", "The row maximum with warp shuffles",
           "Write the reduction in `row_max`: after each lane has the maximum of its columns, "
           "combine the 32 lanes' values without shared memory, so lane 0 can write the row's "
           "maximum.",
           ("`__shfl_xor_sync(0xffffffff, m, o)` gives each lane the `m` of lane `lane ^ o`.",
            "Offsets 16, 8, 4, 2, 1: after five steps every lane has seen every other lane.",
            "Every lane of the warp must take part in each shuffle: no shuffle inside "
            "`if (threadIdx.x == 0)`."),
           ROWMAX_STARTER, ROWMAX_SOLUTION, _rowmax_case),
    Puzzle("ktile", "A K tile in shared memory",
           "`tile_scores` stages a tile of 32 keys in shared memory, then each thread computes "
           "scores from it. Make it correct: every thread must see the whole tile.",
           ("Threads of a block do not run in step: one may reach the scores loop while another "
            "is still copying its part of the tile.",
            "One line between the copy and the reads makes every thread wait for all the "
            "others.",
            "The simulator resumes threads in a random order at each barrier: run it twice and "
            "compare."),
           KTILE_STARTER, KTILE_SOLUTION, _ktile_case),
    Puzzle("online", "The online-softmax rescale",
           "`online_softmax` computes a softmax in one pass, keeping the running maximum `m` "
           "and the running sum `l` of `exp(score - m)`. Fix the update of `l`.",
           ("When the maximum grows from `m` to `m_new`, every term already in `l` was "
            "`exp(s - m)`; it should now be `exp(s - m_new)`.",
            "`exp(s - m_new) = exp(s - m) * exp(m - m_new)`: one factor rescales the whole sum.",
            "The kernels rescale their output accumulator `O` by the same factor."),
           ONLINE_STARTER, ONLINE_SOLUTION, _online_case),
)}


def grade(name: str, source: str, evidence: bool = False) -> Report:
    """Run the reader's kernel for puzzle `name` on its graded case; the Report says whether it
    is right and, if not, what is wrong in one sentence. evidence: also compile it with NVRTC."""
    if name not in PUZZLES:
        raise ValueError(f"name={name!r} is not one of {sorted(PUZZLES)}")
    grid, block, args, expect, shared = PUZZLES[name].case()
    return run_kernel(source, grid, block, *args, expect=expect, shared_bytes=shared,
                      evidence=evidence)


def text(name: str) -> str:
    """Puzzle `name` as the chapter shows it: its title, its statement and its hints, each hint
    folded in a <details> element."""
    p = PUZZLES[name]
    hints = "\n".join(f"<details><summary>Hint {i}</summary>\n\n{h}\n\n</details>"
                      for i, h in enumerate(p.hints, 1))
    return f"**Puzzle: {p.title}.** {p.statement}\n\n{hints}"


def solutions() -> str:
    """Every puzzle's solution kernel, each followed by its grade (run here, not written)."""
    return "\n\n".join(f"**{p.title}**\n\n```cuda\n{p.solution}```\n\n{grade(n, p.solution)}"
                         for n, p in PUZZLES.items())
