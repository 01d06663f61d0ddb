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
read from the .cu files (KernelSpec.constants, kernels.spec), so the mirror cannot drift.
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

The LaunchTrace lists, for every block in launch order, its grid index, the (b, h) it handled, its
query tiles and, per query tile, the K/V tiles it staged in order with the running max and sum
of each query row after that tile (trace=False skips recording).
"""
from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass, field

import torch

from andrea_edu.kernels import registry
from andrea_edu.kernels.block_steps import KVStep, QTile  # noqa: F401  (the LaunchTrace's records)
from andrea_edu.kernels.limits import validate_qkv


@dataclass
class BlockRecord:
    """One thread block: its grid index (blockIdx.x, blockIdx.y) and what it computed."""
    order: int                     # position in the launch order used by the emulator
    grid_index: tuple
    b: int
    h: int
    q_tiles: list = field(default_factory=list)  # [QTile]


@dataclass
class LaunchTrace:
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
    """Run kernel v1, v2 or v3's grid on the CPU; returns (out (B, nh, T, hs), LaunchTrace or None)."""
    B, nh, T, hs = validate_qkv(q, k, v)
    if not isinstance(causal, bool):
        raise TypeError(f"causal={causal!r} must be True or False")
    if torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v)):
        raise ValueError("emulate() is forward-only (like the kernels it emulates): the inputs "
                         "require grad and no gradient would flow back; call it under "
                         "torch.no_grad(), or pass q.detach(), k.detach(), v.detach()")
    if kernel is None:   # the kernel the GPU dispatcher would run on an sm_80+ GPU
        dispatched, _ = registry.walk(hs, q.dtype)
        kernel = dispatched.version if dispatched is not None else registry.versions()[0]
    if kernel not in registry.versions():
        raise ValueError(f"kernel={kernel!r} is not one of {registry.versions() + (None,)}")
    spec = registry.get(kernel)
    why = spec.emulator_refusal(hs)
    if why is not None:
        runs = [s.version for s in registry.preferred() if s.emulator_refusal(hs) is None]
        raise ValueError(why + (f": use kernel={runs[0]!r}" if runs else ""))
    c = spec.constants()
    scale = 1.0 / math.sqrt(hs)
    qc, kc, vc = (t.detach().cpu().float() for t in (q, k, v))  # exact: fp16/bf16 fit fp32
    out = torch.empty(B, nh, T, hs, dtype=torch.float32)     # (B, nh, T, hs)
    grid = spec.grid(B, nh, T, hs)
    threads = spec.threads
    p_dtype = q.dtype if q.dtype != torch.float32 else None
    tr = LaunchTrace(kernel, grid, threads, (B, nh, T, hs), causal) if trace else None
    with _one_thread():
        _run_grid(qc, kc, vc, out, grid, nh, spec, causal, scale, tr, c, p_dtype)
    return out.to(device=q.device, dtype=q.dtype), tr


def _run_grid(qc, kc, vc, out, grid, nh, spec, causal, scale, tr, c, p_dtype):
    """Every block of the grid in launch order (blockIdx.x fastest), recording into tr."""
    order = 0
    for y in range(grid[1]):                                 # blockIdx.x varies fastest
        qtile = grid[1] - 1 - y if spec.reverse_query_tiles else y  # v3: heaviest tile first
        for x in range(grid[0]):
            b, h = divmod(x, nh)                             # blockIdx.x = b * nh + h
            args = (qc[b, h], kc[b, h], vc[b, h], out[b, h])  # each (T, hs)
            tiles = list(spec.emulate_block(*args, qtile, causal, scale, tr is not None, c,
                                            p_dtype))
            if tr is not None:
                tr.blocks.append(BlockRecord(order, (x, y), b, h, tiles))
            order += 1
