"""The one ATen op counter: which aten ops a piece of code really dispatches.

Introduced in the chapter "Three matrices per head, or one big matrix" (BLAS calls per way of
projecting); used by "The output projection W_O", "How CUDA stores the heads" (hidden copies),
"Why twelve heads, not one wider head" (which SDPA kernel ran), the benchmarks' records, and
"The final picture" / "Reading the pipeline" (the ops of each forward step, andrea_edu.pipeline.ops).

    with AtenOps() as rec:              # every aten op torch dispatches, in order
        fn()
    rec.counts()                        # {'mm': 36, 'view': 72, ...}
    count_aten_ops(fn)                  # the same, in one call
    blas_calls(fn)                      # matmul calls: mm, addmm, bmm, baddbmm

The ops are seen at torch's dispatcher (a TorchDispatchMode, a private but long-stable torch API),
so the ops inside torch's own functions count too: a copy hidden in a matmul shows up.
"""
from __future__ import annotations

from collections import Counter

from torch.utils._python_dispatch import TorchDispatchMode

BLAS_OPS = ("mm", "addmm", "bmm", "baddbmm")  # aten ops that are one matmul (BLAS) call


class AtenOps(TorchDispatchMode):
    """Records every aten op that runs inside `with AtenOps() as rec:`, in order, in `rec.calls`
    (the op overloads: str(op) is e.g. 'aten.mm.default')."""

    def __init__(self):
        super().__init__()
        self.calls: list = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.calls.append(func)
        return func(*args, **(kwargs or {}))

    def counts(self) -> dict[str, int]:
        """{aten op name: calls}, e.g. {'mm': 36, 'view': 72}, sorted by name."""
        return dict(sorted(Counter(f.overloadpacket.__name__ for f in self.calls).items()))


def count_aten_ops(fn) -> dict[str, int]:
    """{aten op name: calls} that fn() dispatches (e.g. {'mm': 36, ...}): BLAS calls, copies."""
    with AtenOps() as rec:
        fn()
    return rec.counts()


def blas_calls(fn) -> int:
    """How many matmul (BLAS) calls fn() dispatches, counted at torch's dispatcher."""
    ops = count_aten_ops(fn)
    return sum(ops.get(op, 0) for op in BLAS_OPS)
