"""What a kernel version is, in one record: `KernelSpec` (one per .cu file, in kernels/v1.py,
v2.py, v3.py; gathered in kernels.registry).

A spec holds the kernel's name and source file, who may run it (head_dim, dtype, GPU) and why
not, its tiles and block, its launch grid, the shared memory it asks for, the emulator's block
function, the SASS loop plan and the time model's work per launch. Its limits are one function
(`ineligibility`); the compiler's, the launcher's, the GPU's and the emulator's refusals are
derived from it here. The compiler, the launcher,
the emulator, the SASS reader, the time model and the dispatcher ask the spec; none of them
branches on a version name.

Shared memory is derived here once (`KernelSpec.shared_bytes`, from the spec's `smem_layout`)
and handed to the .cu as `-DANDREA_SMEM_BYTES=<bytes>`; each kernel `static_assert`s that its
carve-up ends exactly there, so the two cannot drift apart without NVRTC refusing to compile.

Tile sizes stay in the .cu (`constexpr int V2_BK = 32;`): `constants()` reads them from the
file, so the CPU mirror and the SASS plan use the numbers the GPU compiles.
"""
from __future__ import annotations

import functools
import importlib.resources
import math
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import torch

CTYPE = {torch.float32: "float", torch.float16: "__half", torch.bfloat16: "__nv_bfloat16"}


def dtype_name(dtype) -> str:
    """"float16" for torch.float16 (the words every message uses)."""
    return str(dtype).replace("torch.", "")


_SOURCE_TEXT: dict[tuple, str] = {}   # (path, size, mtime_ns) -> the .cu text


@functools.lru_cache(maxsize=32)
def parse_constants(text: str, where: str = "") -> dict:
    """The file-level `constexpr int NAME = ...;` of a .cu text, evaluated in order (ints and
    earlier names only)."""
    consts: dict = {}
    for name, expr in re.findall(r"^constexpr int (\w+) = ([^;]+);", text, flags=re.M):
        if not re.fullmatch(r"[\w\s*+()-]+", expr):
            raise ValueError(f"cannot read constexpr {name} = {expr} in {where}")
        consts[name] = int(eval(expr, {"__builtins__": {}}, dict(consts)))  # ints and names only
    return consts


@dataclass(frozen=True)
class KernelSpec:
    """One kernel version. The callables take the .cu constants `c` (constants()) where tile
    sizes matter, so a spec that points at another .cu with other sizes reuses them as they are.

    version        "v1": the name every API takes (compile_attention("v1", ...), kernel="v1")
    backend        the dispatcher's name for it, e.g. "cuda-naive"
    kernel         the __global__ template in the .cu, e.g. "attention_v1"
    source         the .cu file name; source_dir None = this package's kernels folder
    prefix         the .cu constants' prefix ("V1_": V1_THREADS, V1_WARPS, ...)
    keys_const     the constant holding the keys of one K/V tile ("BC" for v1, else "BK")
    head_dims      head_dims compiled (for v1 the largest each CHUNKS covers), with `dtypes`
    min_sm         oldest GPU architecture (10 * major + minor) it compiles for
    walks_all_query_tiles  one block per (b, h) walks every query tile (grid.y = 1);
                   False: one block per (b, h, query tile)
    reverse_query_tiles    blockIdx.y = 0 takes the last query tile (heaviest causal first)
    warp_skips_causal_tiles  a warp skips a K/V tile wholly above its rows (the time model)
    row_alignment  bytes q, k, v must be aligned to (v3's cp.async: 16); 0 for none
    smem_floor(head_dim, c) -> shared-memory bytes a warp cannot avoid per K/V tile, where the
                   SASS count overstates them (v1's broadcast reads); None: the count stands
    ineligibility(head_dim, dtype, sm) -> None or the one reason it cannot run: the spec's one
                   limits function (head_dim, dtype, GPU); sm None: no GPU named, head_dim and
                   dtype only. Every other refusal derives from it (the methods tile,
                   compile_refusal, gpu_refusal, launch_refusal, emulator_refusal below), so no
                   stop can let through what the dispatcher refuses, nor refuse what it sends.
    tile_of(head_dim) -> the template's tile argument for a head_dim the spec runs
    template_args(tile) -> the template's int arguments after the dtype, from the tile: (tile,)
                   for one (v1's CHUNKS, v2's and v3's HD); the padded v3 passes (80, 72):
                   the width it computes and the real head_dim (kernels/v3pad.py)
    width(head_dim) -> the columns of the head slice the kernel computes per row: head_dim, or
                   the padded width (72 -> 80); head_dim / width is the useful fraction
    pads           runs a head_dim inside a wider kernel, computing zeros in the pad: the
                   dispatcher takes it only when asked to (choose_backend(..., pad=True))
    max_head_dim(tile) -> the largest head_dim one tile runs
    smem_layout(c, tile, element_bytes) -> ((buffer, bytes), ...) in carve-up order
    block_rows(c, head_dim) -> query rows of one block (v1: of one query tile)
    emulate_block(qh, kh, vh, oh, qtile, causal, scale, record, c, p_dtype, head_dim)
                   -> iterator of QTile: the block's loops on the CPU (kernels.emulator)
    trip_plan(head_dim, c) -> plan(body_mix) for the SASS reader's inner loops (kernels.sass)
    chosen(head_dim, dtype, sm, previous) -> the dispatcher's sentence when it runs;
                   previous: (backend, reason) of the better kernel that could not, or None
    emulating(previous) -> what the emulator's decision says it emulates
    color          the colour the figures draw it in (None: one from PALETTE by its place in
                   the registry, registry.color)
    """

    version: str
    backend: str
    kernel: str
    source: str
    prefix: str
    head_dims: tuple
    dtypes: tuple
    ineligibility: Callable[..., str | None]
    tile_of: Callable[[int], int]
    smem_layout: Callable[[dict, int, int], tuple]
    emulate_block: Callable[..., Any]
    trip_plan: Callable[[int, dict], Callable]
    chosen: Callable[..., str]
    emulating: Callable[..., str]
    block_rows: Callable[[dict, int], int]
    max_head_dim: Callable[[int], int] = lambda tile: tile  # noqa: E731
    template_args: Callable[[int], tuple] = lambda tile: (tile,)  # noqa: E731
    width: Callable[[int], int] = lambda head_dim: head_dim  # noqa: E731
    pads: bool = False
    keys_const: str = "BK"
    min_sm: int = 75
    walks_all_query_tiles: bool = False
    reverse_query_tiles: bool = False
    warp_skips_causal_tiles: bool = False
    row_alignment: int = 0
    smem_floor: Callable[[int, dict], int] | None = None
    source_dir: Path | None = None
    color: str | None = None

    # ------------------------------------------------------------ refusals, from the one rule
    def _why(self, head_dim: int, dtype) -> str | None:
        """The reason with no GPU named: what the kernel's code and specializations allow."""
        return self.ineligibility(head_dim, dtype, None)

    def tile(self, head_dim: int, dtype) -> int:
        """The template's tile argument for (head_dim, dtype); ValueError when the spec's
        limits refuse the case (nothing is compiled for it)."""
        why = self._why(head_dim, dtype)
        if why is not None:
            raise ValueError(f"{self.version} ({self.backend}) is not compiled for "
                             f"head_dim={head_dim}, dtype={dtype_name(dtype)}: {why}")
        return self.tile_of(head_dim)

    def compile_refusal(self, head_dim: int, dtype, arch_number: int, arch: str) -> str | None:
        """Why NVRTC is not asked to compile (head_dim, dtype) for `arch`, or None: the limits
        with the target's architecture as the GPU."""
        why = self._why(head_dim, dtype) or self.ineligibility(head_dim, dtype, arch_number)
        return None if why is None else f"arch={arch!r}: {why}"

    def gpu_refusal(self, head_dim: int, dtype, sm: int, arch: str) -> str | None:
        """Why this GPU (sm, e.g. 75 for "sm_75") cannot run (head_dim, dtype), or None."""
        why = self.ineligibility(head_dim, dtype, sm)
        return None if why is None else (f"{self.version} (backend={self.backend!r}) cannot "
                                         f"run on this GPU ({arch}): {why}")

    def launch_refusal(self, q, k, v, head_dim: int) -> str | None:
        """Why launch_attention refuses these inputs before touching a GPU, or None: the
        limits (no GPU named), then the rows' alignment the kernel's copies need."""
        why = self._why(head_dim, q.dtype)
        if why is not None:
            return f"{self.version} ({self.backend}) cannot run this: {why}"
        if self.row_alignment:
            for name, t in (("q", q), ("k", k), ("v", v)):
                if t.data_ptr() % self.row_alignment:
                    return (f"{name}'s data is not {self.row_alignment}-byte aligned (address "
                            f"{t.data_ptr():#x}, e.g. a slice of a larger tensor): "
                            f"{self.version} copies {self.row_alignment} bytes at a time; pass "
                            f"{name}.clone()")
        return None

    def emulator_refusal(self, head_dim: int) -> str | None:
        """Why emulate(kernel=version) refuses head_dim, or None. The emulator also takes fp32
        for every kernel (to check the algorithm exactly), so only head_dim decides: refused
        when no dtype the kernel is compiled for runs it."""
        whys = [self._why(head_dim, dt) for dt in self.dtypes]
        if all(w is not None for w in whys):
            return f"kernel={self.version!r} cannot run head_dim={head_dim}: {whys[0]}"
        return None

    # ------------------------------------------------------------ the .cu file
    def source_text(self) -> str:
        """The .cu text, read from the installed package (or source_dir) once per file version:
        kept in memory keyed by the file's path, size and modification time (one stat per call,
        not a read: the launcher asks for the constants on every launch)."""
        if self.source_dir is not None:
            where: Any = Path(self.source_dir) / self.source
        else:
            where = importlib.resources.files("andrea_edu.kernels").joinpath(self.source)
        try:
            st = os.stat(str(where))
            key: tuple = (str(where), st.st_size, st.st_mtime_ns)
        except (OSError, TypeError):   # not a plain file (a zip import): read it every time
            return where.read_text()
        text = _SOURCE_TEXT.get(key)
        if text is None:
            text = where.read_text()
            _SOURCE_TEXT[key] = text
        return text

    def constants(self) -> dict:
        """The .cu's `constexpr int` tile sizes, e.g. {"V2_BK": 32, ...}."""
        return parse_constants(self.source_text(), self.source)

    def const(self, role: str, c: dict | None = None) -> int:
        """One constant by role: const("THREADS") is V1_THREADS for v1."""
        return (self.constants() if c is None else c)[self.prefix + role]

    # ------------------------------------------------------------ block, tiles, grid
    @property
    def threads(self) -> int:
        return self.const("THREADS")

    @property
    def warps(self) -> int:
        return self.const("WARPS")

    @property
    def keys_per_tile(self) -> int:
        return self.const(self.keys_const)

    def rows(self, head_dim: int = 64) -> int:
        """Query rows per block (per query tile for v1), for this head_dim."""
        return self.block_rows(self.constants(), head_dim)

    def rows_per_warp(self, head_dim: int = 64) -> int:
        return self.rows(head_dim) // self.warps

    def grid(self, B: int, n_head: int, T: int, head_dim: int = 64) -> tuple[int, int, int]:
        """gridDim of one launch: blockIdx.x = b * n_head + h, blockIdx.y = query tile
        (1 when one block walks all of a head's query tiles). The only grid function."""
        if self.walks_all_query_tiles:
            return (B * n_head, 1, 1)
        return (B * n_head, math.ceil(T / self.rows(head_dim)), 1)

    def shared_bytes(self, tile: int, dtype) -> int:
        """Dynamic shared memory of one block: the sum of smem_layout, the bytes the launcher
        requests and the .cu checks (-DANDREA_SMEM_BYTES)."""
        es = torch.empty((), dtype=dtype).element_size()
        return sum(b for _, b in self.smem_layout(self.constants(), tile, es))

    def specializations(self) -> list[tuple[int, Any]]:
        """(head_dim, dtype) of every compiled kernel, head_dim the largest its tile covers."""
        return [(hd, dt) for hd in self.head_dims for dt in self.dtypes]

    # ------------------------------------------------------------ the time model's work
    def launch_work(self, B: int, nh: int, T: int, causal: bool, head_dim: int) -> dict:
        """Blocks, K/V tiles and warp-tiles (one warp, one K/V tile) of one launch, and the
        warp-tiles of its heaviest block (max_block_warp_tiles: one block runs on one SM, so
        no launch is faster than that block alone)."""
        rows, keys, warps = self.rows(head_dim), self.keys_per_tile, self.warps
        q_starts = list(range(0, T, rows))
        gx, gy, gz = self.grid(B, nh, T, head_dim)

        def kv(q0):                                   # K/V tiles one query tile loads
            return math.ceil((min(T, q0 + rows) if causal else T) / keys)

        def wt(q0):                                   # warp-tiles of one query tile
            if self.warp_skips_causal_tiles and causal:   # a warp skips tiles above its rows
                per = rows // warps
                return sum(math.ceil(min(T, q0 + (w + 1) * per) / keys) for w in range(warps))
            return kv(q0) * warps

        pairs = B * nh
        kv_tiles = pairs * sum(kv(q0) for q0 in q_starts)
        warp_tiles = pairs * sum(wt(q0) for q0 in q_starts)
        heaviest = (sum(wt(q0) for q0 in q_starts) if self.walks_all_query_tiles
                    else max(wt(q0) for q0 in q_starts))
        return dict(blocks=gx * gy * gz, kv_tiles=kv_tiles, warp_tiles=warp_tiles,
                    max_block_warp_tiles=heaviest, rows_per_block_tile=rows, keys_per_tile=keys,
                    warps_per_block=warps)
