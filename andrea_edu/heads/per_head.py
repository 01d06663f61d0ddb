"""What is read off each head's own weights, gradients and outputs, rather than off a labelled
batch: output correlations between the heads of a layer, the heads' outputs before W_O, and the
norms of each head's parameters and of their gradients.

Introduced in the chapter "Why heads specialize" (`heads.training` records them at every step
and probe; `heads.gradient_pressure` reads them); `head_outputs` serves the chapter "The output
projection W_O". The measures on a labelled batch (scores, losses, ablations) are `heads.measures`.

correlation     C[l, h, h']: Pearson correlation between heads h and h' of layer l's contributions
                to the residual stream (head_h . W_O[rows of h]), flattened over windows,
                positions and features.
gradient norm   G[step, l, h]: the Frobenius norm of the loss gradient with respect to head h's own
                parameters: its columns of W_Q, W_K, W_V (in c_attn) and its rows of W_O, at
                every training step, before the optimizer moves them.
"""
from __future__ import annotations

import numpy as np
import torch

from andrea_edu.attention import reference_attention
from andrea_edu.heads.batch import Batch
from andrea_edu.model import AndreaModel
from andrea_edu.projections import head_contributions, project_c_attn


@torch.no_grad()
def head_output_correlations(model: AndreaModel, batch: Batch) -> np.ndarray:
    """C (L, nh, nh): Pearson correlation between the heads' contributions to the residual
    stream (head_h . W_O[rows of h], flattened over batch, positions and features), from the
    heads' outputs `head_outputs` reads."""
    out = []
    for block, y in zip(model.blocks, head_outputs(model, batch.idx)):  # (B, nh, T, hs) each
        att = block.attn
        contrib = head_contributions(y, att.W_O).flatten(1)  # (nh, B*T*C)
        c = torch.corrcoef(contrib).reshape(att.n_head, att.n_head)  # (nh, nh), also for nh = 1
        out.append(c.nan_to_num(0.0).numpy())
    return np.stack(out)  # (L, nh, nh)


@torch.no_grad()
def head_outputs(model: AndreaModel, idx: torch.Tensor) -> list[torch.Tensor]:
    """Every layer's head outputs for `idx`, before W_O: one (B, nh, T, hs) tensor per layer, the
    `y` that `output_projection(y, W_O)` turns into the layer's attention output (chapter "The
    output projection W_O", exercise: how many heads feed each output dimension of a trained W_O)."""
    inputs: list[torch.Tensor] = []
    hooks = [b.attn.register_forward_hook(lambda m, a, o: inputs.append(a[0]))
             for b in model.blocks]
    try:
        model(idx)
    finally:
        for hk in hooks:
            hk.remove()
    out = []
    for block, x in zip(model.blocks, inputs):
        att = block.attn
        q, k, v = project_c_attn(x, att.c_attn, att.n_head)  # 3 x (B, nh, T, hs)
        if att.b_attn is not None:
            b_q, b_k, b_v = att.b_attn.view(3, att.n_head, 1, att.head_dim)  # 3 x (nh, 1, hs)
            q, k, v = q + b_q, k + b_k, v + b_v
        out.append(reference_attention(q, k, v, causal=True))  # (B, nh, T, hs)
    return out


def max_other_correlation(corr: np.ndarray) -> np.ndarray:
    """(L, nh, nh) correlations -> (L, nh): each head's largest correlation with another head
    of its layer (0 for a layer with a single head)."""
    L, nh, _ = corr.shape
    if nh == 1:
        return np.zeros((L, 1))
    return (corr - 2 * np.eye(nh)).max(axis=-1)  # the diagonal (1) never wins


def head_grad_norms(model: AndreaModel) -> torch.Tensor:
    """G (L, nh): norm of the current .grad over each head's W_Q/W_K/W_V columns and W_O rows."""
    C, nh, hs = model.cfg.d_model, model.cfg.n_head, model.cfg.head_dim
    out = torch.zeros(model.cfg.n_layer, nh)
    for l, block in enumerate(model.blocks):
        g_attn, g_o = block.attn.c_attn.grad, block.attn.W_O.grad
        if g_attn is None or g_o is None:
            raise ValueError(f"head_grad_norms: layer {l}'s attention weights have no .grad; "
                             f"call loss.backward() first")
        gq = g_attn.view(C, 3, nh, hs)  # (C, q|k|v, nh, hs)
        go = g_o.view(nh, hs, C)  # (nh, hs, C): row block h reads head h
        sq = gq.pow(2).sum(dim=(0, 1, 3)) + go.pow(2).sum(dim=(1, 2))  # (nh,)
        out[l] = sq.sqrt()
    return out


@torch.no_grad()
def head_param_norms(model: AndreaModel) -> torch.Tensor:
    """(L, nh): norm of each head's own parameters, its W_Q/W_K/W_V columns and W_O rows (the
    parameters whose gradient `head_grad_norms` measures)."""
    C, nh, hs = model.cfg.d_model, model.cfg.n_head, model.cfg.head_dim
    out = torch.zeros(model.cfg.n_layer, nh)
    for l, block in enumerate(model.blocks):
        wq = block.attn.c_attn.view(C, 3, nh, hs)  # (C, q|k|v, nh, hs), as in head_grad_norms
        wo = block.attn.W_O.view(nh, hs, C)
        out[l] = (wq.pow(2).sum(dim=(0, 1, 3)) + wo.pow(2).sum(dim=(1, 2))).sqrt()
    return out
