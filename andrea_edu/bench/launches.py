"""One launch for all heads against one launch per (batch, head): the measurement behind the
chapter "One kernel, many heads".

    batched_vs_looped(B, n_head, T, head_dim, backend="reference", ...) -> LaunchComparison

Both paths go through the dispatcher (andrea_edu.dispatch), so with a CUDA backend each call is
one kernel launch: the loop launches B * n_head grids of one block each where the batched call
launches one grid of B * n_head blocks. Validated (batched == looped) before anything is timed,
then timed in turns by the book's one timer (bench.timing.time_fns), on the current torch threads.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from andrea_edu.dispatch import attention
from andrea_edu.bench import timing
from andrea_edu.kernels.grid import _pos_int


# ---------------------------------------------------------------- one launch vs many
@dataclass(frozen=True)
class LaunchComparison:
    """attention() once over [B, nh, T, hs] vs once per (b, h) on [1, 1, T, hs] slices."""

    shape: tuple  # (B, nh, T, hs)
    backend: str
    device: str
    calls_batched: int  # 1
    calls_looped: int  # B * nh
    batched_s: float  # median seconds
    looped_s: float  # median seconds
    max_abs_diff: float  # batched vs looped outputs (validated before timing)
    repeats: int  # timed rounds (bench.timing.time_fns: at least CPU_MIN_REPEATS on a CPU)

    @property
    def ratio(self) -> float:
        """looped / batched: how many times slower the per-head loop is."""
        return self.looped_s / self.batched_s

    @property
    def per_call_s(self) -> float:
        """What each extra call adds, on average: (looped - batched) / (calls_looped - 1). The
        same blocks do the same work either way, so this is the cost of a call (with a CUDA
        backend, of a launch); noise can make it negative when calls are cheap."""
        return (self.looped_s - self.batched_s) / max(self.calls_looped - self.calls_batched, 1)


def batched_vs_looped(B: int, n_head: int, T: int, head_dim: int, backend: str = "reference",
                      causal: bool = True, dtype=torch.float32, device: str = "cpu",
                      repeats: int = 5, warmup: int = 1) -> LaunchComparison:
    """Time one attention() call for all heads against a Python loop of one call per (b, h).

    With a CUDA backend each call is one kernel launch, so the loop launches B * n_head grids
    of one block each where the batched call launches one grid of B * n_head blocks.
    """
    for name, value in (("B", B), ("n_head", n_head), ("T", T), ("head_dim", head_dim),
                        ("repeats", repeats)):
        _pos_int(name, value)
    if device not in ("cpu", "cuda"):
        raise ValueError(f"device must be 'cpu' or 'cuda', got {device!r}")
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(B, n_head, T, head_dim, generator=g).to(device, dtype)
               for _ in range(3))  # (B, nh, T, hs) each, contiguous

    def batched():
        return attention(q, k, v, causal=causal, backend=backend)  # (B, nh, T, hs)

    def looped():
        out = torch.empty_like(q)  # (B, nh, T, hs)
        for b in range(B):
            for h in range(n_head):
                sl = (slice(b, b + 1), slice(h, h + 1))  # one (b, h): [1, 1, T, hs], contiguous
                out[sl] = attention(q[sl], k[sl], v[sl], causal=causal, backend=backend)
        return out

    diff = (batched().float() - looped().float()).abs().max().item()
    tol = 1e-5 if dtype == torch.float32 else 1e-2
    if not diff <= tol:
        raise RuntimeError(f"batched and per-head outputs differ by {diff:g} > {tol:g}: not timed")
    # the book's one timer: turns, and on a GPU queued calls between one pair of CUDA events
    # (the loop's Python path is the subject here: with 96 launches the queue drains, and the
    # events then measure the host's pace, which the timing dict flags as host_bound)
    t = timing.time_fns({"batched": batched, "looped": looped}, device, repeats=repeats,
                        warmup=warmup, threads=None)
    return LaunchComparison((B, n_head, T, head_dim), backend, device, 1, B * n_head,
                            t["batched"]["median_ms"] / 1e3, t["looped"]["median_ms"] / 1e3, diff,
                            t["batched"]["repeats"])

