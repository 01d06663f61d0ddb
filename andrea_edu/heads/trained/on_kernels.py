"""One layer of a trained model through the book's kernels: real q, k, v at head_dim 32
(chapter "Why heads specialize").

The encoder keeps one layer's q, k, v (1, nh, T, hs) for a sentence; each kernel version's
emulator (andrea_edu.kernels.emulator: its grid, tiles and online softmax, block by block) runs
them in every dtype the version takes, and its output is compared with the model's own attention
output for that layer (fp32, through `reference_attention`), and with the fp32 reference on
the same rounded inputs, whose tolerance (dispatch.TOLERANCE) the kernels are held to.

    layer_case(model, text, layer) -> (q, k, v, model_out)
    through_kernels(q, k, v, model_out) -> [row per (kernel, dtype)]
"""
from __future__ import annotations

import torch

from ...dispatch import TOLERANCE, compare_to_reference
from ...kernels import emulator, registry


def layer_case(model, text: str, layer: int):
    if not 0 <= layer < model.cfg.n_layer:
        raise ValueError(f"layer must be in 0..{model.cfg.n_layer - 1}, got {layer!r}")
    f = model.run_texts([text], keep_qkv=(layer,))[0]
    q, k, v = f.qkv[layer]
    return q, k, v, f.heads[layer]


def through_kernels(q, k, v, model_out) -> list[dict]:
    """For each registered kernel version and each dtype it takes at this head_dim: the emulated
    output's max abs difference from the model's output, from the fp32 reference on the same
    rounded inputs, and whether it is within that dtype's tolerance."""
    hs = q.shape[-1]
    rows = []
    for spec in registry.specs():
        for dt in (torch.float32,) + tuple(d for d in spec.dtypes if d != torch.float32):
            if spec.ineligibility(hs, dt, None) is not None or spec.emulator_refusal(hs):
                continue
            qd, kd, vd = (t.to(dt) for t in (q, k, v))
            with torch.no_grad():
                out, _ = emulator.emulate(qd, kd, vd, causal=False, kernel=spec.version,
                                          trace=False)
            ref = compare_to_reference(out, qd, kd, vd, causal=False)
            rows.append({"kernel": spec.version, "dtype": str(dt).replace("torch.", ""),
                         "vs_model": float((out.float() - model_out.float()).abs().max()),
                         "vs_reference": float(ref["max_abs_err"]), "passed": bool(ref["passed"]),
                         "atol": TOLERANCE[dt][0]})
    return rows
