"""Tile alignment: how a head's seq_len x head_dim slice meets 16 x 16 tensor-core tiles.

Introduced in the chapter "The configuration mirrors the hardware". Pure arithmetic (no GPU):
  tile_coverage(seq_len, head_dim)   tiles, padding and utilization of one head's slice
  head_dims_at_least(useful)         the head_dims whose tiles are at least that useful
  mma_work(head_dim)                 tensor-core work per attention score, per K/V tile of v2
  torch_flash_head_dim(head_dim)     what torch's flash SDPA path does with a head_dim
  sdpa_head_dim_rules(head_dim)      torch's head_dim rules per SDPA backend (GPU, sm_80..sm_90)
  accumulator_owner, a_operand_owner which lane and register of a warp holds an element of
                                     v3's mma.m16n8k16 tiles (the PTX ISA's fragment layouts)
  lane_elements(lane)                what one lane holds of S's accumulators and of P's A operand
(a specialization's PTX evidence, registers, shared memory and occupancy, compiled by NVRTC:
kernels.head_dim_evidence.compiled; bench.dispatched.kernel_facts adds the dispatcher's decision)

Sources for the torch rules (read in PyTorch's source, not guessed; the measured eligibility on
a GPU is in the bench results, which is what the chapter trusts first):
  aten/src/ATen/native/transformers/attention.cpp: the flash branch of SDPA pads q, k, v's last
    dimension to a multiple of 8 (`pad_last_dim<8, false>`) and slices the output back.
  aten/src/ATen/native/transformers/cuda/sdp_utils.cpp: flash needs q, k, v to share head_dim
    <= 256; memory-efficient needs head_dim divisible by 8 for fp16/bf16 on sm_80+ (its
    minimum GEMM alignment, 128 bits / 16 bits); cuDNN needs a multiple of 8 and at most 128
    (256 on sm_90/sm_100 with a recent cuDNN).
  aten/src/ATen/native/transformers/cuda/flash_attn/static_switch.h: HEADDIM_SWITCH runs a
    head_dim on the smallest compiled kernel of 32, 64, 96, 128, 160, 192, 224, 256 that holds
    it: 72 runs in the 96 kernel, its columns past 72 filled by masked (predicated) loads and
    still carried through the 96-wide tiles.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

TILE = 16  # WMMA fragment edge for fp16/bf16: m16n16k16
# What the tensor cores are asked to do, by API. WMMA is CUDA C++'s portable warp-level API; on
# sm_80/sm_89/sm_90 ptxas lowers one 16x16x16 WMMA to two `mma.sync.m16n8k16` (HMMA.16816).
MMA_SHAPES = {"WMMA 16x16x16 (nvcuda::wmma, our v2)": (16, 16, 16),
              "mma.sync m16n8k16 (PTX, sm_80 / sm_89 / sm_90)": (16, 8, 16)}
FLASH_KERNEL_HEAD_DIMS = (32, 64, 96, 128, 160, 192, 224, 256)  # torch's FA2 instantiations
SDPA_KINDS = ("flash", "efficient", "cudnn", "math")


@dataclass(frozen=True)
class TileCoverage:
    """One head's seq_len x head_dim slice covered by tile x tile blocks."""
    seq_len: int
    head_dim: int
    tile: int
    row_tiles: int        # ceil(seq_len / tile)
    col_tiles: int        # ceil(head_dim / tile)
    padded_rows: int      # row_tiles * tile
    padded_cols: int      # col_tiles * tile
    useful: int           # seq_len * head_dim elements
    computed: int         # padded_rows * padded_cols elements the tiles hold
    utilization: float    # useful / computed
    col_utilization: float  # head_dim / padded_cols (the head_dim side alone)


def _pos_int(name, v):
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise ValueError(f"{name}={v!r} must be a positive int")


def tile_coverage(seq_len: int, head_dim: int, tile: int = TILE) -> TileCoverage:
    """How many tile x tile blocks cover [seq_len, head_dim], and how much of them is padding."""
    for name, v in (("seq_len", seq_len), ("head_dim", head_dim), ("tile", tile)):
        _pos_int(name, v)
    rt, ct = math.ceil(seq_len / tile), math.ceil(head_dim / tile)
    useful, computed = seq_len * head_dim, rt * tile * ct * tile
    return TileCoverage(seq_len, head_dim, tile, rt, ct, rt * tile, ct * tile, useful, computed,
                        useful / computed, head_dim / (ct * tile))


def head_dims_at_least(useful: float, seq_len: int = 1024, up_to: int = 128,
                       tile: int = TILE) -> list[int]:
    """Every head_dim in 1..up_to whose tile x tile covering of [seq_len, head_dim] is at least
    `useful` useful (a fraction in (0, 1]; 1.0: no padding at all)."""
    if isinstance(useful, bool) or not isinstance(useful, (int, float)) or not 0 < useful <= 1:
        raise ValueError(f"useful={useful!r}: allowed values are fractions in (0, 1], e.g. 0.9 "
                         f"for 90%")
    _pos_int("up_to", up_to)
    return [h for h in range(1, up_to + 1)
            if tile_coverage(seq_len, h, tile).utilization >= useful]


def v2_block_shape() -> tuple[int, int]:
    """(query rows per block, keys per K/V tile) of kernel v2, read from its .cu source."""
    from andrea_edu.kernels import registry
    v2 = registry.get("v2")
    return v2.rows(), v2.keys_per_tile


def mma_work(head_dim: int, bq: int | None = None, bk: int | None = None,
             tile: int = TILE) -> dict:
    """Tensor-core work of one K/V tile in a v2 block (bq query rows x bk keys; default: the
    kernel's own, v2_block_shape()).

    S = Q K^T takes (bq/16)(bk/16)(hs/16) WMMA ops, O += P V as many again; the softmax between
    them touches bq*bk scores on the ordinary cores whatever head_dim is. So tensor-core FLOPs
    per score = 2 * 2*16^3 * mma_ops / (bq*bk) = 4 * head_dim_padded: halving head_dim halves
    the matrix work that each score's softmax bookkeeping pays for.
    """
    _pos_int("head_dim", head_dim)
    if bq is None or bk is None:
        bq, bk = v2_block_shape()
    hsp = math.ceil(head_dim / tile) * tile
    ops = 2 * (bq // tile) * (bk // tile) * (hsp // tile)
    flops = ops * 2 * tile ** 3
    return dict(head_dim=head_dim, padded_head_dim=hsp, bq=bq, bk=bk, wmma_ops_per_kv_tile=ops,
                scores_per_kv_tile=bq * bk, tensor_flops_per_kv_tile=flops,
                tensor_flops_per_score=flops / (bq * bk), useful_flops_per_score=4 * head_dim)


def torch_flash_head_dim(head_dim: int) -> dict:
    """What torch's flash SDPA (CUDA) does with head_dim: pad to a multiple of 8 in memory, then
    run the smallest compiled kernel that holds it (None above 256: flash is not eligible)."""
    _pos_int("head_dim", head_dim)
    padded = math.ceil(head_dim / 8) * 8
    kernel = next((k for k in FLASH_KERNEL_HEAD_DIMS if k >= padded), None)
    return dict(head_dim=head_dim, padded_in_memory=padded, kernel_head_dim=kernel,
                memory_padding=padded - head_dim,
                kernel_utilization=None if kernel is None else head_dim / kernel)


def sdpa_head_dim_rules(head_dim: int, dtype=torch.bfloat16) -> dict:
    """{backend: (eligible, reason)} from torch's head_dim rules alone, on an sm_80..sm_90 GPU.

    Other conditions (dtype, masks, dropout, layout, cuDNN version) also apply; on a GPU the
    bench measures eligibility directly (torch.nn.attention.sdpa_kernel), which wins.
    """
    _pos_int("head_dim", head_dim)
    half = dtype in (torch.float16, torch.bfloat16)
    align = 8 if half else 4
    fl = torch_flash_head_dim(head_dim)
    out = {}
    if dtype not in (torch.float16, torch.bfloat16):
        out["flash"] = (False, "flash takes fp16/bf16 only")
    elif head_dim > 256:
        out["flash"] = (False, f"head_dim={head_dim} > 256")
    else:
        pad = (f"padded to {fl['padded_in_memory']}, " if fl["memory_padding"] else "")
        out["flash"] = (True, f"{pad}runs the {fl['kernel_head_dim']}-wide kernel")
    out["efficient"] = ((True, f"head_dim % {align} == 0") if head_dim % align == 0 else
                        (False, f"head_dim={head_dim} is not a multiple of {align}"))
    if not half:
        out["cudnn"] = (False, "cuDNN attention takes fp16/bf16 only")
    elif head_dim % 8:
        out["cudnn"] = (False, f"head_dim={head_dim} is not a multiple of 8")
    elif head_dim > 256:
        out["cudnn"] = (False, f"head_dim={head_dim} > 256")
    else:
        out["cudnn"] = (True, "multiple of 8" + (" (> 128 needs sm_90 and a recent cuDNN)"
                                                 if head_dim > 128 else ", <= 128"))
    out["math"] = (True, "plain matmuls + softmax: any head_dim")
    return out


# ---------------------------------------------------------------- v3's register fragments
def accumulator_owner(row: int, col: int) -> tuple[int, str]:
    """(lane, register) holding element (row, col) of a 16x8 mma.m16n8k16 accumulator, as the
    PTX ISA draws it ("Matrix Fragments for mma.m16n8k16 with floating point type": lane
    4g + t holds rows g and g+8, columns 2t and 2t+1, as c0, c1 and c2, c3)."""
    g, half = row % 8, row // 8
    return 4 * g + col // 2, f"c{2 * half + col % 2}"


def a_operand_owner(row: int, col: int) -> tuple[int, str]:
    """(lane, register) holding element (row, col) of the 16x16 A operand (same section):
    a0, a1 rows 0-7 / columns 0-7; a2, a3 rows 8-15; a4..a7 the same for columns 8-15."""
    g, rhalf, chalf, c = row % 8, row // 8, col // 8, col % 8
    return 4 * g + c // 2, f"a{4 * chalf + 2 * rhalf + c % 2}"


def lane_elements(lane: int) -> dict:
    """What lane `lane` of a warp holds in v3's mma.m16n8k16 fragments (PTX ISA, "Matrix
    Fragments for mma.m16n8k16 with floating point type"): {"s[0]": {register: (row, column of
    P)}, "s[1]": {...}} for the two 16x8 accumulators of a 16-key step (s[1] holds keys 8-15,
    so its columns are shifted by 8), and {"A": {register: (row, column)}} for the 16x16 A
    operand of the next mma. Read off accumulator_owner and a_operand_owner, not restated."""
    if isinstance(lane, bool) or not isinstance(lane, int) or not 0 <= lane < 32:
        raise ValueError(f"lane={lane!r}: allowed values are 0..31 (a warp's 32 lanes)")
    out: dict[str, dict[str, tuple[int, int]]] = {"s[0]": {}, "s[1]": {}, "A": {}}
    for row in range(16):
        for col in range(8):
            owner, reg = accumulator_owner(row, col)
            if owner == lane:
                out["s[0]"][reg] = (row, col)
                out["s[1]"][reg] = (row, col + 8)
        for col in range(16):
            owner, reg = a_operand_owner(row, col)
            if owner == lane:
                out["A"][reg] = (row, col)
    return {k: dict(sorted(v.items())) for k, v in out.items()}
