"""A head read as two circuits: where it looks (QK) and what it writes (OV).

Introduced in the chapter "Heads on real text"; it joins two earlier chapters: the per-head
projections W_Q^h, W_K^h, W_V^h of "Three matrices per head" (columns h*hs:(h+1)*hs of c_attn's
three blocks) and the row blocks of W_O of "The output projection W_O" (rows h*hs:(h+1)*hs).

With X the layer's input (after ln_1), rows are positions, weights stored [in, out] (X . W):

    scores of head h   = (X W_Q^h)(X W_K^h)^T / sqrt(hs)  = X . QK^h . X^T / sqrt(hs)
    output of head h   = A^h (X W_V^h) W_O[h rows]       = A^h . X . OV^h
    QK^h = W_Q^h W_K^h^T   [C, C]: which pairs of residual directions make a query attend to a key
    OV^h = W_V^h W_O[h]    [C, C]: what the head writes into the residual for what it reads

Both have rank <= hs. Two readings used by the chapter (both are the *direct* path: they put
embeddings straight into the layer's ln_1 and read the output straight through the tied
unembedding wte^T, ignoring the other layers, ln_f and, with GPT-2's biases, the bias terms; a
statement about layer 0 holds exactly up to those, deeper layers only approximately):

positional QK   X_t = ln_1(wpe[t] + e_mean), e_mean the mean token embedding: the attention
                pattern a head would draw from positions alone. A previous-token head puts its
                maximum on t-1.
token OV        M = ln_1(wte + p_mean) . OV^h . wte^T  [V, V]: row x is the change of the logits
                when the head attends to a token x. A copying head raises x's own logit: its
                copy rate (the share of tokens whose own logit is their row's largest) is far above
                chance, 1/V.
"""
from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F

from ..model import AndreaModel


def _split(model: AndreaModel, layer: int, head: int):
    """(W_Q^h, W_K^h, W_V^h, W_O^h): [C, hs] x 3 and [hs, C], views of the model's weights."""
    cfg = model.cfg
    C, nh, hs = cfg.d_model, cfg.n_head, cfg.head_dim
    if not (isinstance(layer, int) and 0 <= layer < cfg.n_layer):
        raise ValueError(f"layer={layer!r} must be an int in 0..{cfg.n_layer - 1}")
    if not (isinstance(head, int) and 0 <= head < nh):
        raise ValueError(f"head={head!r} must be an int in 0..{nh - 1}")
    att = model.blocks[layer].attn
    W = att.c_attn.detach()  # (C, 3C) = [W_Q | W_K | W_V]
    cols = slice(head * hs, (head + 1) * hs)
    W_Q, W_K, W_V = (W[:, i * C: (i + 1) * C][:, cols] for i in range(3))  # 3 x (C, hs)
    W_O = att.W_O.detach()[cols, :]  # (hs, C): the row block that reads head h
    return W_Q, W_K, W_V, W_O


def qk(model: AndreaModel, layer: int, head: int) -> torch.Tensor:
    """QK^h = W_Q^h W_K^h^T, (C, C)."""
    W_Q, W_K, _, _ = _split(model, layer, head)
    return W_Q @ W_K.T  # (C, hs) @ (hs, C) -> (C, C)


def ov(model: AndreaModel, layer: int, head: int) -> torch.Tensor:
    """OV^h = W_V^h W_O[h rows], (C, C)."""
    _, _, W_V, W_O = _split(model, layer, head)
    return W_V @ W_O  # (C, hs) @ (hs, C) -> (C, C)


@torch.no_grad()
def positional_pattern(model: AndreaModel, layer: int, head: int, T: int | None = None,
                       token_weights: torch.Tensor | None = None) -> torch.Tensor:
    """(T, T) causal softmax of the head's scores on position-only inputs ln_1(wpe[t] + e_mean);
    e_mean is the mean token embedding, weighted by `token_weights` (V,) when given."""
    T = model.cfg.block_size if T is None else T
    wte = model.wte.detach()
    w = torch.full((wte.shape[0],), 1.0 / wte.shape[0]) if token_weights is None else \
        token_weights.float() / token_weights.float().sum()
    e_mean = w @ wte  # (C,)
    X = model.blocks[layer].ln_1(model.wpe.detach()[:T] + e_mean)  # (T, C)
    W_Q, W_K, _, _ = _split(model, layer, head)
    s = (X @ W_Q) @ (X @ W_K).T / math.sqrt(W_Q.shape[1])  # (T, T) = X QK X^T / sqrt(hs)
    mask = torch.ones(T, T, dtype=torch.bool).tril()
    return torch.softmax(s.masked_fill(~mask, float("-inf")), dim=-1)  # (T, T)


def previous_token_share(pattern: torch.Tensor) -> float:
    """Share of query rows t >= 1 of a (T, T) pattern whose largest weight is on key t-1."""
    T = pattern.shape[0]
    am = pattern[1:].argmax(dim=-1)  # (T-1,)
    return float((am == torch.arange(T - 1)).float().mean())


def mean_previous_weight(pattern: torch.Tensor) -> float:
    """Mean weight of rows t >= 1 on key t-1."""
    T = pattern.shape[0]
    return float(pattern[torch.arange(1, T), torch.arange(T - 1)].mean())


@torch.no_grad()
def token_ov(model: AndreaModel, layer: int, head: int) -> torch.Tensor:
    """M (V, V) = ln_1(wte + p_mean) . OV^h . wte^T: row x, the logits the head adds when it
    attends to token x (the direct path, see the module docstring)."""
    p_mean = model.wpe.detach().mean(dim=0)  # (C,)
    E = model.blocks[layer].ln_1(model.wte.detach() + p_mean)  # (V, C)
    return E @ ov(model, layer, head) @ model.wte.detach().T  # (V, C)(C, C)(C, V) -> (V, V)


def copy_rates(M: torch.Tensor, tokens=None, k: int = 1) -> float:
    """Share of rows x (of `tokens`, all by default) whose own logit M[x, x] is among the row's
    k largest (restricted to the same tokens). Chance: k / len(tokens)."""
    idx = torch.arange(M.shape[0]) if tokens is None else torch.as_tensor(list(tokens))
    sub = M[idx][:, idx]  # (n, n)
    top = sub.topk(k, dim=-1).indices  # (n, k)
    return float((top == torch.arange(len(idx))[:, None]).any(dim=-1).float().mean())


def eigen_copying(M: torch.Tensor) -> float:
    """sum(Re lambda) / sum|lambda| over M's eigenvalues: +1 a pure copier, -1 a pure suppressor,
    near 0 neither (the 'copying score' of Elhage et al., 2021)."""
    ev = torch.linalg.eigvals(M.double())
    return float(ev.real.sum() / ev.abs().sum())


def ov_table(model: AndreaModel, tokens=None, k: int = 1) -> np.ndarray:
    """(L, nh, 2): per head, its top-k copy rate on `tokens` and its eigenvalue copying score."""
    L, nh = model.cfg.n_layer, model.cfg.n_head
    out = np.zeros((L, nh, 2))
    for l in range(L):
        for h in range(nh):
            M = token_ov(model, l, h)
            out[l, h] = copy_rates(M, tokens, k), eigen_copying(M)
    return out


def positional_table(model: AndreaModel, T: int | None = None) -> np.ndarray:
    """(L, nh, 2): per head, its positional pattern's share of rows peaking at t-1 and its mean
    weight on t-1."""
    L, nh = model.cfg.n_layer, model.cfg.n_head
    out = np.zeros((L, nh, 2))
    for l in range(L):
        for h in range(nh):
            P = positional_pattern(model, l, h, T)
            out[l, h] = previous_token_share(P), mean_previous_weight(P)
    return out


@torch.no_grad()
def scores_via_qk(model: AndreaModel, layer: int, head: int, x: torch.Tensor) -> torch.Tensor:
    """The head's pre-softmax scores for residual inputs x (B, T, C) computed through QK^h:
    ln_1(x) . QK^h . ln_1(x)^T / sqrt(hs) -> (B, T, T). Equal to the model's own q k^T / sqrt(hs)
    when the layer has no query/key biases (the tests check it)."""
    X = model.blocks[layer].ln_1(x)  # (B, T, C)
    return X @ qk(model, layer, head) @ X.transpose(1, 2) / math.sqrt(model.cfg.head_dim)


def causal_softmax(s: torch.Tensor) -> torch.Tensor:
    T = s.shape[-1]
    mask = torch.ones(T, T, dtype=torch.bool, device=s.device).tril()
    return F.softmax(s.masked_fill(~mask, float("-inf")), dim=-1)
