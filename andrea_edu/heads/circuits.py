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

positional QK   X_t = the layer-0 input at position t averaged over tokens,
                sum_x w_x ln_1(wte[x] + wpe[t]): the attention pattern a head draws from positions
                alone. A purely positional previous-token head puts its maximum on t-1; a head whose
                preference for t-1 comes from the tokens themselves does not.
token OV        M = ln_1(wte + p_mean) . OV^h . wte^T  [V, V]: row x is the change of the logits
                when the head attends to a token x. A copying head raises x's own logit: its
                copy rate (the share of tokens whose own logit is their row's largest) is far above
                chance, 1/V.
"""
from __future__ import annotations

import math

import numpy as np
import torch

from ..attention import softmax_scores
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
def positional_inputs(model: AndreaModel, layer: int, T: int, token_weights=None,
                      chunk: int = 4096) -> torch.Tensor:
    """(T, C): X_t = sum_x w_x ln_1(wte[x] + wpe[t]), the layer's input at position t averaged over
    the tokens (weights w: `token_weights` (V,), e.g. the corpus's frequencies, else uniform).
    Since x at the query and y at the key are averaged independently, X_t QK X_s^T is exactly the
    token-averaged score between positions t and s."""
    wte, wpe = model.wte.detach(), model.wpe.detach()[:T]
    V = wte.shape[0]
    w = torch.full((V,), 1.0 / V) if token_weights is None else \
        torch.as_tensor(np.asarray(token_weights, dtype=np.float64), dtype=torch.float32)
    w = w / w.sum()  # (V,)
    ln = model.blocks[layer].ln_1
    X = torch.zeros(T, wte.shape[1])
    for a in range(0, V, chunk):
        Xc = ln(wte[a: a + chunk, None, :] + wpe[None, :, :])  # (chunk, T, C)
        X += (w[a: a + chunk, None, None] * Xc).sum(dim=0)
    return X  # (T, C)


@torch.no_grad()
def positional_pattern(model: AndreaModel, layer: int, head: int, T: int | None = None,
                       token_weights=None) -> torch.Tensor:
    """(T, T) causal softmax of the head's token-averaged scores between positions (see
    `positional_inputs`): the attention pattern the head draws from positions alone."""
    T = model.cfg.block_size if T is None else T
    X = positional_inputs(model, layer, T, token_weights)  # (T, C)
    W_Q, W_K, _, _ = _split(model, layer, head)
    s = (X @ W_Q) @ (X @ W_K).T / math.sqrt(W_Q.shape[1])  # (T, T) = X QK X^T / sqrt(hs)
    return causal_softmax(s)


def offset_profile(pattern: torch.Tensor, depth: int = 3, from_row: int = 16) -> np.ndarray:
    """(depth,): mean weight of rows t >= from_row on keys t, t-1, ..., t-depth+1; works for one
    (T, T) pattern or a stack (..., T, T) of real attention maps (averaged over the stack)."""
    T = pattern.shape[-1]
    rows = torch.arange(from_row, T)
    return np.array([float(pattern[..., rows, rows - d].mean()) for d in range(depth)])


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
def token_ov(model: AndreaModel, layer: int, head: int, ln_f: bool = False) -> torch.Tensor:
    """M (V, V) = ln_1(wte + p_mean) . OV^h . wte^T: row x, the logits the head adds when it
    attends to token x (the direct path, see the module docstring). ln_f=True puts the final
    LayerNorm's linear part in front of the unembedding: what the head writes is centred (its
    mean over the d_model coordinates removed) and multiplied by ln_f's weight; the division by
    the residual's standard deviation (one number per position, set by the whole residual, not
    by this head) and ln_f's bias (the same for every row) are left out."""
    if not isinstance(ln_f, bool):
        raise ValueError(f"ln_f={ln_f!r} is not allowed; True or False")
    p_mean = model.wpe.detach().mean(dim=0)  # (C,)
    E = model.blocks[layer].ln_1(model.wte.detach() + p_mean)  # (V, C)
    out = E @ ov(model, layer, head)  # (V, C): what the head writes, per attended token
    if ln_f:
        out = (out - out.mean(dim=-1, keepdim=True)) * model.ln_f.weight.detach()
    return out @ model.wte.detach().T  # (V, C)(C, V) -> (V, V)


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


def ov_table(model: AndreaModel, tokens=None, k: int = 1, ln_f: bool = False) -> np.ndarray:
    """(L, nh, 2): per head, its top-k copy rate on `tokens` and its eigenvalue copying score
    (ln_f: through the final LayerNorm's linear part, see `token_ov`)."""
    if not isinstance(ln_f, bool):
        raise ValueError(f"ln_f={ln_f!r} is not allowed; True or False")
    L, nh = model.cfg.n_layer, model.cfg.n_head
    out = np.zeros((L, nh, 2))
    for l in range(L):
        for h in range(nh):
            M = token_ov(model, l, h, ln_f)
            out[l, h] = copy_rates(M, tokens, k), eigen_copying(M)
    return out


def positional_table(model: AndreaModel, T: int | None = None, depth: int = 3,
                     token_weights=None) -> np.ndarray:
    """(L, nh, depth): per head, its positional pattern's mean weight on keys t, t-1, ...
    (rows t >= T/4, away from the first positions)."""
    T = model.cfg.block_size if T is None else T
    L, nh = model.cfg.n_layer, model.cfg.n_head
    out = np.zeros((L, nh, depth))
    for l in range(L):
        for h in range(nh):
            P = positional_pattern(model, l, h, T, token_weights)
            out[l, h] = offset_profile(P, depth, from_row=T // 4)
    return out


@torch.no_grad()
def scores_via_qk(model: AndreaModel, layer: int, head: int, x: torch.Tensor) -> torch.Tensor:
    """The head's pre-softmax scores for residual inputs x (B, T, C) computed through QK^h:
    ln_1(x) . QK^h . ln_1(x)^T / sqrt(hs) -> (B, T, T). Equal to the model's own q k^T / sqrt(hs)
    when the layer has no query/key biases (the tests check it)."""
    X = model.blocks[layer].ln_1(x)  # (B, T, C)
    return X @ qk(model, layer, head) @ X.transpose(1, 2) / math.sqrt(model.cfg.head_dim)


def causal_softmax(s: torch.Tensor) -> torch.Tensor:
    """(..., T, T) scores -> causal attention probabilities (attention.softmax_scores)."""
    return softmax_scores(s, causal=True)
