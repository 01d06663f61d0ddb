"""The CUDA kernels' grid, run block by block on the CPU (chapter "One kernel, many heads").

    out, trace = emulate(q, k, v, causal=False, kernel="v1" | "v2" | "v3" | None, trace=True)

q, k, v: [B, nh, T, hs] tensors (any dtype the kernels take; math in fp32, rounded to q.dtype
at the end). kernel=None picks the tensor-core kernel the GPU dispatcher would run on an sm_80+
GPU (v3 for fp16/bf16 with head_dim in V3_HEAD_DIMS, else v2 for head_dim in V2_HEAD_DIMS,
else v1).

Each block runs the same loops as its kernel (kernels/attention_v1.cu, attention_v2_wmma.cu,
attention_v3_flash.cu):
the same grid mapping, query tiles, K/V tiles, zero-filled tails, causal mask and online
softmax (running max m, running sum l, rescale by alpha = exp(m_old - m_new)). Tile sizes are
read from the .cu files (andrea_edu.kernels.nvrtc.kernel_constants), so the mirror cannot drift.
Inside a block the work of its threads is vectorized with torch (a tile's scores are one
matmul); blocks run one after another in grid order. What is not mirrored: the order of
floating-point additions inside a dot product, and which lane does what.
v2 and v3 round P to q.dtype before P V, as the kernels do (a no-op for fp32, which the
emulator accepts so that the algorithm can be checked exactly; the GPU kernels take fp16/bf16).
v3's block is split further, as the kernel splits it: 4 warps of 32 query rows each (16 when
head_dim > 64; blocks of 128 or 64 rows) take the block's 64-key tile in turn; the softmax runs in exp2 form on raw scores (c = scale * log2 e,
p = exp2(s c - m c)), and masks are applied only on the tiles the kernel masks (a key past T,
or causal and a key above one of the warp's rows). Its query tiles run heaviest first
(blockIdx.y = 0 takes the last tile). The trace's running max is in units of scaled scores for
every kernel (v3's raw max times scale).

The Trace lists, for every block in launch order, its grid index, the (b, h) it handled, its
query tiles and, per query tile, the K/V tiles it staged in order with the running max and sum
of each query row after that tile (trace=False skips recording).
"""
from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass, field

import torch

from andrea_edu.kernels.limits import (V1_MAX_HEAD_DIM, V2_HEAD_DIMS, V3_HEAD_DIMS,
                                      v2_ineligibility, v3_ineligibility, validate_qkv)
from andrea_edu.kernels.toolkit import block_rows, kernel_constants


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


@dataclass
class BlockRecord:
    """One thread block: its grid index (blockIdx.x, blockIdx.y) and what it computed."""
    order: int                     # position in the launch order used by the emulator
    grid_index: tuple
    b: int
    h: int
    q_tiles: list = field(default_factory=list)  # [QTile]


@dataclass
class Trace:
    """What every block of one emulated launch did (for figures and tests)."""
    kernel: str
    grid: tuple                    # (gridDim.x, gridDim.y, gridDim.z)
    threads_per_block: int
    shape: tuple                   # (B, nh, T, hs)
    causal: bool
    blocks: list = field(default_factory=list)  # [BlockRecord]

    @property
    def n_blocks(self) -> int:
        return len(self.blocks)

    def summary(self) -> dict:
        """kernel, grid, blocks, threads per block and K/V tile loads, for a caption."""
        return dict(kernel=self.kernel, grid=self.grid, n_blocks=self.n_blocks,
                    threads_per_block=self.threads_per_block, shape=self.shape,
                    causal=self.causal, kv_tiles_loaded=self.kv_tiles_loaded())

    def kv_tiles_loaded(self) -> int:
        """K/V tile loads over the whole launch (each is one trip to global memory)."""
        return sum(len(t.steps) for blk in self.blocks for t in blk.q_tiles)

    def to_rows(self) -> list[dict]:
        """One dict per (block, query tile, K/V step): a flat table for plotting."""
        rows = []
        for blk in self.blocks:
            for t in blk.q_tiles:
                for s, st in enumerate(t.steps):
                    rows.append(dict(
                        order=blk.order, grid_x=blk.grid_index[0], grid_y=blk.grid_index[1],
                        b=blk.b, h=blk.h, q_start=t.q_start, q_stop=t.q_stop, step=s,
                        k_start=st.k_start, k_stop=st.k_stop,
                        row_max=None if st.row_max is None else st.row_max.tolist(),
                        row_sum=None if st.row_sum is None else st.row_sum.tolist()))
        return rows


def _online_step(qt, kt, vt, m, l, acc, valid, scale, p_dtype):
    """One K/V tile of the online softmax for a tile of query rows (the kernels' inner loop).

    qt (R, hs), kt/vt (C, hs) zero-filled past T; m/l (R,), acc (R, hs); valid (R, C) bool,
    or None when every (row, key) pair of the tile is allowed (masking nothing is a no-op).
    """
    s = torch.mm(qt, kt.T).mul_(scale)                       # (R, C) scores
    if valid is not None:
        s.masked_fill_(~valid, float("-inf"))                # keys past T, or j > i (causal)
    m_new = torch.maximum(m, s.amax(dim=1))                  # (R,)
    m_use = torch.where(torch.isneginf(m_new), 0.0, m_new)   # a row masked so far: no NaN
    p = torch.exp(s - m_use[:, None])                        # (R, C); exp(-inf) = 0 when masked
    alpha = torch.exp(m - m_use)                             # (R,) 0 on the first tile
    l = alpha * l + p.sum(dim=1)
    if p_dtype is not None:                                  # v2: P goes to tensor cores
        p = p.to(p_dtype).float()
    acc = torch.addmm(acc * alpha[:, None], p, vt)           # (R, hs)
    return m_new, l, acc


def _padded(x, rows):
    """x (T, hs) in fp32, zero-filled to `rows` rows (the kernels' zero-filled tails)."""
    t = torch.zeros(rows, x.shape[1], dtype=torch.float32)
    t[:x.shape[0]] = x
    return t


def _mask(q0, R, k0, C, T, causal, always=False):
    """valid (R, C) for query rows q0.. and keys k0.., or None when all pairs are valid
    (always=True: the tensor even then)."""
    if not always and k0 + C <= T and (not causal or k0 + C - 1 <= q0):
        return None
    i = q0 + torch.arange(R)[:, None]                        # (R, 1)
    j = k0 + torch.arange(C)[None, :]                        # (1, C)
    valid = j < T
    return valid & (j <= i) if causal else valid.expand(R, C)


def _run_block_v1(qh, kh, vh, oh, causal, scale, record, c):
    """attention_v1's block: every query tile of one (b, h), K/V streamed 32 rows at a time."""
    T, hs = qh.shape
    BR, BC = c["V1_BR"], c["V1_BC"]
    qp = _padded(qh, -(-T // BR) * BR)                       # (T rounded up to BR, hs)
    kp, vp = (_padded(x, -(-T // BC) * BC) for x in (kh, vh))  # (T rounded up to BC, hs)
    for q0 in range(0, T, BR):
        qt = qp[q0:q0 + BR]                                  # (BR, hs) staged Q tile
        m = torch.full((BR,), float("-inf"))
        l = torch.zeros(BR)
        acc = torch.zeros(BR, hs)                            # (BR, hs)
        n = min(BR, T - q0)
        tile = QTile(q0, q0 + n)
        kv_end = min(T, q0 + BR) if causal else T
        for k0 in range(0, kv_end, BC):
            m, l, acc = _online_step(qt, kp[k0:k0 + BC], vp[k0:k0 + BC], m, l, acc,
                                     _mask(q0, BR, k0, BC, T, causal), scale, None)
            if record:
                tile.steps.append(KVStep(k0, min(k0 + BC, T), m[:n].clone(), l[:n].clone()))
        oh[q0:q0 + n] = acc[:n] / l[:n, None]
        if record:
            yield tile


def _run_block_v2(qh, kh, vh, oh, qtile, causal, scale, record, c, p_dtype):
    """attention_v2_wmma's block: one 64-row query tile of one (b, h), K/V 32 rows at a time."""
    T, hs = qh.shape
    BQ, BK = c["V2_BQ"], c["V2_BK"]
    q0 = qtile * BQ
    qt = _padded(qh[q0:q0 + BQ], BQ)                         # (BQ, hs) staged Q tile
    kp, vp = (_padded(x, -(-T // BK) * BK) for x in (kh, vh))  # (T rounded up to BK, hs)
    m = torch.full((BQ,), float("-inf"))
    l = torch.zeros(BQ)
    acc = torch.zeros(BQ, hs)                                # (BQ, hs): the kernel's sO
    n = min(BQ, T - q0)
    tile = QTile(q0, q0 + n)
    kv_end = min(T, q0 + BQ) if causal else T
    for k0 in range(0, kv_end, BK):
        m, l, acc = _online_step(qt, kp[k0:k0 + BK], vp[k0:k0 + BK], m, l, acc,
                                 _mask(q0, BQ, k0, BK, T, causal), scale, p_dtype)
        if record:
            tile.steps.append(KVStep(k0, min(k0 + BK, T), m[:n].clone(), l[:n].clone()))
    oh[q0:q0 + n] = acc[:n] / l[:n, None]
    if record:
        yield tile


def _run_block_v3(qh, kh, vh, oh, qtile, causal, scale, record, c, p_dtype):
    """attention_v3_flash's block: one 64-row query tile, 4 warps of 16 rows, 64-key tiles;
    the online softmax in exp2 form on raw scores, masks only where the kernel masks."""
    T, hs = qh.shape
    BQ, BK, W = block_rows("v3", hs), c["V3_BK"], c["V3_WARPS"]
    R = BQ // W                                              # rows per warp: 32, or 16 (hs > 64)
    log2e = 1.4426950408889634
    cc = scale * log2e                                       # exp(x scale) = exp2(x cc)
    q0 = qtile * BQ
    qt = _padded(qh[q0:q0 + BQ], BQ)                         # (BQ, hs) staged Q (zeros past T)
    kp, vp = (_padded(x, -(-T // BK) * BK) for x in (kh, vh))  # (T rounded up to BK, hs)
    m = torch.full((W, R), float("-inf"))                    # per warp, per row: raw max
    l = torch.zeros(W, R)
    o = torch.zeros(W, R, hs)                                # the warps' O registers
    n = min(BQ, T - q0)
    tile = QTile(q0, q0 + n)
    kv_end = min(T, q0 + BQ) if causal else T
    for k0 in range(0, kv_end, BK):
        kt, vt = kp[k0:k0 + BK], vp[k0:k0 + BK]              # (BK, hs) the block's K/V tile
        for w in range(W):
            r0 = q0 + w * R                                  # this warp's first query row
            if causal and k0 > r0 + R - 1:                   # the whole tile is above its rows:
                continue                                     # the kernel's warp skips it
            s = torch.mm(qt[w * R:(w + 1) * R], kt.T)        # (R, BK) raw scores
            if k0 + BK > T or (causal and k0 + BK - 1 > r0):  # the kernel's warp-level test
                s.masked_fill_(~_mask(r0, R, k0, BK, T, causal, always=True), float("-inf"))
            m_new = torch.maximum(m[w], s.amax(dim=1))       # (R,)
            mc = torch.where(torch.isneginf(m_new), 0.0, m_new * cc)
            p = torch.exp2(s * cc - mc[:, None])             # (R, BK)
            alpha = torch.exp2(m[w] * cc - mc)               # (R,) 0 on the first tile
            l[w] = alpha * l[w] + p.sum(dim=1)
            if p_dtype is not None:                          # P re-packed to fp16/bf16
                p = p.to(p_dtype).float()
            o[w] = torch.addmm(o[w] * alpha[:, None], p, vt)  # (R, hs)
            m[w] = m_new
        if record:
            tile.steps.append(KVStep(k0, min(k0 + BK, T), (m.reshape(-1)[:n] * scale).clone(),
                                     l.reshape(-1)[:n].clone()))
    oh[q0:q0 + n] = (o.reshape(BQ, hs) / l.reshape(BQ, 1))[:n]
    if record:
        yield tile


@contextlib.contextmanager
def _one_thread():
    """Per-tile tensors are tiny: torch's intra-op threads only add synchronization (measured
    on a busy 2-core machine: 0.2 s single-threaded against several seconds with 2 threads)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def emulate(q, k, v, causal: bool = False, kernel: str | None = None, trace: bool = True):
    """Run kernel v1, v2 or v3's grid on the CPU; returns (out (B, nh, T, hs), Trace or None)."""
    B, nh, T, hs = validate_qkv(q, k, v)
    if not isinstance(causal, bool):
        raise TypeError(f"causal={causal!r} must be True or False")
    if torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v)):
        raise ValueError("emulate() is forward-only (like the kernels it emulates): the inputs "
                         "require grad and no gradient would flow back; call it under "
                         "torch.no_grad(), or pass q.detach(), k.detach(), v.detach()")
    if kernel is None:
        kernel = ("v3" if v3_ineligibility(hs, q.dtype) is None else
                  "v2" if v2_ineligibility(hs, q.dtype) is None else "v1")
    if kernel not in ("v1", "v2", "v3"):
        raise ValueError(f"kernel={kernel!r} is not one of ('v1', 'v2', 'v3', None)")
    if kernel == "v1" and hs > V1_MAX_HEAD_DIM:
        raise ValueError(f"head_dim={hs} is above v1's maximum {V1_MAX_HEAD_DIM}")
    if kernel == "v2" and hs not in V2_HEAD_DIMS:
        raise ValueError(f"kernel='v2' needs head_dim in {list(V2_HEAD_DIMS)} (multiples of 16); "
                         f"got head_dim={hs}: use kernel='v1'")
    if kernel == "v3" and hs not in V3_HEAD_DIMS:
        raise ValueError(f"kernel='v3' needs head_dim in {list(V3_HEAD_DIMS)}; got "
                         f"head_dim={hs}: use kernel='v2' or 'v1'")
    c = kernel_constants(kernel)
    scale = 1.0 / math.sqrt(hs)
    qc, kc, vc = (t.detach().cpu().float() for t in (q, k, v))  # exact: fp16/bf16 fit fp32
    out = torch.empty(B, nh, T, hs, dtype=torch.float32)     # (B, nh, T, hs)
    if kernel == "v1":
        grid = (B * nh, 1, 1)
        threads = c["V1_THREADS"]
    else:
        grid = (B * nh, math.ceil(T / block_rows(kernel, hs)), 1)
        threads = c[f"{kernel.upper()}_THREADS"]
    p_dtype = q.dtype if q.dtype != torch.float32 else None
    tr = Trace(kernel, grid, threads, (B, nh, T, hs), causal) if trace else None
    with _one_thread():
        _run_grid(qc, kc, vc, out, grid, nh, kernel, causal, scale, tr, c, p_dtype)
    return out.to(device=q.device, dtype=q.dtype), tr


def _run_grid(qc, kc, vc, out, grid, nh, kernel, causal, scale, tr, c, p_dtype):
    """Every block of the grid in launch order (blockIdx.x fastest), recording into tr."""
    order = 0
    for y in range(grid[1]):                                 # blockIdx.x varies fastest
        for x in range(grid[0]):
            b, h = divmod(x, nh)                             # blockIdx.x = b * nh + h
            args = (qc[b, h], kc[b, h], vc[b, h], out[b, h])  # each (T, hs)
            if kernel == "v1":
                tiles = list(_run_block_v1(*args, causal, scale, tr is not None, c))
            elif kernel == "v3":                             # heaviest query tile first
                tiles = list(_run_block_v3(*args, grid[1] - 1 - y, causal, scale,
                                           tr is not None, c, p_dtype))
            else:
                tiles = list(_run_block_v2(*args, y, causal, scale, tr is not None, c, p_dtype))
            if tr is not None:
                tr.blocks.append(BlockRecord(order, (x, y), b, h, tiles))
            order += 1
