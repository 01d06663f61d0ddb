"""Scaled dot-product attention over all heads at once, in plain torch: the lesson.

Introduced in the chapter "One kernel, many heads" (every kernel is checked against it); the
model (`andrea_edu.model`) runs it by default.

    reference_attention(q, k, v, causal=False) -> (B, nh, T, hs)   the fp32 reference
    softmax_scores(scores, causal) -> (..., T, T)                   the one softmax of scores

q, k, v: tensors of shape [B, nh, T, hs] (batch, n_head, seq_len, head_dim), same shape, dtype
and device, checked by `kernels.limits.validate_qkv` (the one check of q, k, v; float16,
bfloat16, float32 and float64 here). The output has q's shape and dtype; the arithmetic is fp32
(float64 inputs: float64), rounded once at the end, as the CUDA kernels accumulate in fp32.

The CUDA kernels, their CPU emulator and simulator, and torch's SDPA are reached through the
dispatcher `andrea_edu.dispatch` (which backend ran, and why), which checks each of them against
this function.
"""
from __future__ import annotations

import math

import torch

from andrea_edu.kernels.limits import REFERENCE_DTYPES, validate_qkv


def reference_attention(q, k, v, causal: bool = False):
    """softmax(q k^T / sqrt(hs) [+ causal mask]) v in fp32 (float64 inputs: in float64),
    rounded to q's dtype at the end. q, k, v: [B, n_head, seq_len, head_dim], one floating
    dtype; anything else is refused with one line naming the argument."""
    if not isinstance(causal, bool):
        raise TypeError(f"causal={causal!r} must be True or False")
    validate_qkv(q, k, v, REFERENCE_DTYPES)
    T, hs = q.shape[-2], q.shape[-1]
    wide = torch.float64 if q.dtype == torch.float64 else torch.float32
    if q.device.type == "cpu":  # scores and probabilities (B, nh, T, T) in `wide`, the mask (T, T)
        from andrea_edu.layout import memory_problem
        need = 2 * q.shape[0] * q.shape[1] * T * T * (8 if wide == torch.float64 else 4) + T * T
        too_big = memory_problem(f"reference attention at seq_len={T} (its [B, n_head, T, T] "
                                 f"scores)", need)
        if too_big:
            raise ValueError(f"{too_big}; torch's sdpa computes it in tiles "
                             f"(andrea_edu.dispatch.attention(..., backend='sdpa'))")
    qf, kf, vf = q.to(wide), k.to(wide), v.to(wide)
    att = softmax_scores((qf @ kf.transpose(-2, -1)) * (1.0 / math.sqrt(hs)), causal)  # (B, nh, T, T)
    return (att @ vf).to(q.dtype)  # (B, nh, T, hs)


def softmax_scores(scores: torch.Tensor, causal: bool) -> torch.Tensor:
    """The one softmax of attention scores in the library: softmax over the last dimension
    (the keys), with the causal mask (query t sees keys 0..t) when `causal`.
    scores: (..., T, T) -> probabilities (..., T, T), each row summing to 1."""
    if causal:
        T = scores.shape[-1]
        mask = torch.ones(T, T, dtype=torch.bool, device=scores.device).tril()  # (T, T)
        scores = scores.masked_fill(~mask, float("-inf"))
    return torch.softmax(scores, dim=-1)
