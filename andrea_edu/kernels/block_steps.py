"""The pieces every kernel's block is built from, on the CPU: a staged tile zero-filled past T,
the (query, key) mask, one step of the online softmax (its m/l/o rescale written once, in
`online_rescale`, for every kernel), and the records a trace keeps.

Used by each spec's emulator block function (kernels/v1.py, v2.py, v3.py) and by
kernels.emulator, which runs those blocks in launch order. Chapter "One kernel, many heads".
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch


@dataclass
class KVStep:
    """One K/V tile staged in shared memory, and the running softmax state after it."""
    k_start: int
    k_stop: int                    # exclusive, clipped to T (the kernel zero-fills past it)
    row_max: torch.Tensor | None   # (rows,) running max m of the tile's query rows < T
    row_sum: torch.Tensor | None   # (rows,) running sum l


@dataclass
class QTile:
    """A tile of query rows a block computed: rows [q_start, q_stop) of one (b, h)."""
    q_start: int
    q_stop: int
    steps: list = field(default_factory=list)   # [KVStep] in the order they were loaded


def online_step(qt, kt, vt, m, l, acc, valid, scale, p_dtype):
    """One K/V tile of the online softmax for a tile of query rows (v1's and v2's inner loop):
    scaled scores, masked, then `online_rescale`.

    qt (R, hs), kt/vt (C, hs) zero-filled past T; m/l (R,), acc (R, hs); valid (R, C) bool,
    or None when every (row, key) pair of the tile is allowed (masking nothing is a no-op).
    """
    s = torch.mm(qt, kt.T).mul_(scale)                       # (R, C) scores
    if valid is not None:
        s.masked_fill_(~valid, float("-inf"))                # keys past T, or j > i (causal)
    return online_rescale(s, m, l, acc, vt, p_dtype)


def query_tile(qt, kp, vp, oh, q0, BK, causal, scale, record, p_dtype) -> QTile:
    """One staged tile of query rows q0.. against every K/V tile of BK rows it may see, as
    v1's block does for each of its query tiles and v2's block for its one: `online_step` per
    K/V tile, then O = acc / l written to oh's rows below T. Returns the QTile (its KVSteps
    recorded when `record`).

    qt (BQ, hs) zero-filled past T; kp, vp (T rounded up to BK, hs) zero-filled; oh (T, hs).
    """
    BQ, hs = qt.shape
    T = oh.shape[0]
    m = torch.full((BQ,), float("-inf"))                     # (BQ,) running max
    l = torch.zeros(BQ)                                      # (BQ,) running sum
    acc = torch.zeros(BQ, hs)                                # (BQ, hs) unnormalised O
    n = min(BQ, T - q0)
    tile = QTile(q0, q0 + n)
    kv_end = min(T, q0 + BQ) if causal else T                # causal: no key past the last row
    for k0 in range(0, kv_end, BK):
        m, l, acc = online_step(qt, kp[k0:k0 + BK], vp[k0:k0 + BK], m, l, acc,
                                mask(q0, BQ, k0, BK, T, causal), scale, p_dtype)
        if record:
            tile.steps.append(KVStep(k0, min(k0 + BK, T), m[:n].clone(), l[:n].clone()))
    oh[q0:q0 + n] = acc[:n] / l[:n, None]
    return tile


def online_rescale(s, m, l, acc, vt, p_dtype, cc=None):
    """The online softmax's update for one K/V tile, every kernel's: the new running max m,
    the old sum l and output acc rescaled by alpha = exp(m_old - m_new), the tile's p = exp(s - m)
    added to l and p @ v to acc. Returns (m_new, l, acc).

    s (R, C) the tile's masked scores (-inf where masked); m, l (R,); acc (R, hs); vt (C, hs).
    cc None: s is already scaled and the kernel uses exp (v1, v2). cc = scale * log2(e): s is
    raw q.k and the kernel uses exp2 on s * cc, as FlashAttention-2 does (v3); m stays raw.
    p_dtype: P rounded to the tensor cores' input type before p @ v (None: P stays fp32).
    """
    m_new = torch.maximum(m, s.amax(dim=1))                  # (R,)
    if cc is None:
        m_use = torch.where(torch.isneginf(m_new), 0.0, m_new)   # a row masked so far: no NaN
        p = torch.exp(s - m_use[:, None])                    # (R, C); exp(-inf) = 0 when masked
        alpha = torch.exp(m - m_use)                         # (R,) 0 on the first tile
    else:
        mc = torch.where(torch.isneginf(m_new), 0.0, m_new * cc)
        p = torch.exp2(s * cc - mc[:, None])                 # (R, C)
        alpha = torch.exp2(m * cc - mc)                      # (R,) 0 on the first tile
    l = alpha * l + p.sum(dim=1)
    if p_dtype is not None:                                  # P goes to tensor cores
        p = p.to(p_dtype).float()
    acc = torch.addmm(acc * alpha[:, None], p, vt)           # (R, hs)
    return m_new, l, acc


def padded(x, rows):
    """x (T, hs) in fp32, zero-filled to `rows` rows (the kernels' zero-filled tails)."""
    t = torch.zeros(rows, x.shape[1], dtype=torch.float32)
    t[:x.shape[0]] = x
    return t


def mask(q0, R, k0, C, T, causal, always=False):
    """valid (R, C) for query rows q0.. and keys k0.., or None when all pairs are valid
    (always=True: the tensor even then)."""
    if not always and k0 + C <= T and (not causal or k0 + C - 1 <= q0):
        return None
    i = q0 + torch.arange(R)[:, None]                        # (R, 1)
    j = k0 + torch.arange(C)[None, :]                        # (1, C)
    valid = j < T
    return valid & (j <= i) if causal else valid.expand(R, C)
