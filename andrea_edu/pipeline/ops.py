"""What each step of the forward pass ran: aten ops on any device, CUDA kernel names on a GPU.

Introduced in the chapter "The final picture" (the table "Which kernel each step ran"); used by
`pipeline.timing.time_steps` and by "Reading the pipeline".

    with OpRecorder() as rec:                     # every aten op torch dispatches, per step
        pipeline.model_in_steps(model, idx, rec.mark)
    rec.ops["qkv"]                                # ['aten.view.default', 'aten.mm.default', ...]
    main_ops(rec.ops["qkv"])                      # ['mm']
    ops, kernels = profile_steps(model, idx)      # torch.profiler: op names and CUDA kernels
"""
from __future__ import annotations

from typing import Any

import torch

from andrea_edu.bench.aten import AtenOps
from andrea_edu.pipeline.steps import model_in_steps

# aten ops that move no data or only check it: hidden by main_ops
_BOOKKEEPING = {"view", "_unsafe_view", "expand", "t", "transpose", "slice", "split", "min",
                "max", "lt", "ge", "_local_scalar_dense", "alias", "detach", "unsqueeze"}


def main_ops(ops) -> list[str]:
    """Aten op names ("aten.mm.default") shortened ("mm") and without the bookkeeping (views,
    reshapes, the token-id range check); a step made only of views keeps them ("transpose")."""
    short = list(dict.fromkeys(o.removeprefix("aten.").split(".")[0] for o in ops))
    return [o for o in short if o not in _BOOKKEEPING] or short


class OpRecorder(AtenOps):
    """Every aten op that runs (the one op counter, andrea_edu.bench.aten), attributed to the
    step whose mark comes next: `with OpRecorder() as rec: model_in_steps(model, idx, rec.mark)`,
    then rec.ops[name] (full names, 'aten.mm.default', each once, in order)."""

    def __init__(self):
        super().__init__()
        self.ops: dict[str, list[str]] = {}
        self._marked = 0  # calls[:_marked] belong to steps already marked

    def mark(self, layer, name, out, **info):
        seen = self.ops.setdefault(name, [])
        seen += [op for op in dict.fromkeys(str(f) for f in self.calls[self._marked:])
                 if op not in seen]
        self._marked = len(self.calls)
        return out


def profile_steps(model, idx, cuda: bool = True) -> tuple[dict, dict]:
    """One torch.profiler pass over the marked forward: ({step: top-level profiler op names},
    {step: CUDA kernel names}). Each step runs inside its own record_function range; range k
    (opened at the k-th mark, or at the start for k = 0) holds the ops of step k+1."""
    from torch.profiler import ProfilerActivity, profile, record_function

    names: list[str] = []
    ranges: list[Any] = []  # torch.profiler.record_function contexts, entered by hand

    def mark(layer, name, out, **info):
        ranges[-1].__exit__(None, None, None)
        names.append(name)
        ranges.append(record_function(f"andrea#{len(names)}"))
        ranges[-1].__enter__()
        return out

    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with torch.no_grad(), profile(activities=acts) as prof:
        ranges.append(record_function("andrea#0"))
        ranges[-1].__enter__()
        model_in_steps(model, idx, mark)
        ranges[-1].__exit__(None, None, None)
        if cuda:
            torch.cuda.synchronize()
    ops: dict = {}
    kernels: dict = {}

    def walk(e, acc):
        acc += [k.name for k in getattr(e, "kernels", []) if k.name not in acc]
        for c in e.cpu_children:
            walk(c, acc)

    for e in prof.events():
        if e.name.startswith("andrea#") and int(e.name[7:]) < len(names):
            step = names[int(e.name[7:])]  # range k holds the ops of step k+1, names[k]
            seen = ops.setdefault(step, [])
            seen += [c.name for c in e.cpu_children if c.name not in seen]
            walk(e, kernels.setdefault(step, []))
    return ops, {k: v for k, v in kernels.items() if v}
