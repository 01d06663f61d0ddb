"""The launch grid of the attention kernels: blocks <-> (batch, head), SM fill, one launch vs many.

Introduced in the chapter "One kernel, many heads". Names: B batch, nh n_head, T seq_len,
hs head_dim.

    block_of(b, h, n_head) / pair_of(block_x, n_head)  the kernels' mapping blockIdx.x = b*nh + h
                                                       (order="head-major": h*B + b, for contrast)
    kernel_signature(version) -> KernelSignature       the kernel's parameters, read from the .cu
    index_lines(version) -> [(line number, code)]      every line of the kernel that reads blockIdx
    sm_fill(B, n_head, T, version, sm, resources)      blocks vs SMs for one launch
    batched_vs_looped(B, n_head, T, head_dim, ...)     one call for all heads vs one per (b, h)
    finish_time(work, slots, order)                    blocks taken by a fixed number of slots

The grid itself comes from `cuda.compile_attention(...).grid(B, nh, T)`; the SM presets and the
occupancy rules from `andrea_edu.kernels.occupancy`. Nothing here needs a GPU except
`batched_vs_looped(..., device="cuda")`.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from andrea_edu.kernels import occupancy, registry
from andrea_edu.kernels.toolkit import kernel_source


def _pos_int(name: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive int, got {value!r}")
    return value


def _version(version: str) -> str:
    if version not in registry.versions():
        raise ValueError(f"version must be one of {registry.versions()}, got {version!r}")
    return version


ORDERS = ("batch-major", "head-major")  # blockIdx.x = b*nh + h (the kernels'), or h*B + b


def _order(order: str, B) -> None:
    if order not in ORDERS:
        raise ValueError(f"order={order!r}: allowed values are {', '.join(map(repr, ORDERS))}")
    if order == "head-major":
        _pos_int("B (head-major order numbers blocks h*B + b)", B)


def block_of(b: int, h: int, n_head: int, order: str = "batch-major", B: int | None = None) -> int:
    """blockIdx.x of the block that handles (b, h): b * n_head + h, the kernels' batch-major
    order; order="head-major" numbers them h * B + b instead (B needed)."""
    _pos_int("n_head", n_head)
    _order(order, B)
    if not 0 <= h < n_head or b < 0 or (B is not None and b >= B):
        bs = "b >= 0" if B is None else f"b in 0..{B - 1}"
        raise ValueError(f"need {bs} and h in 0..{n_head - 1}, got b={b}, h={h}")
    if order == "batch-major":
        return b * n_head + h
    assert B is not None  # _order checked it
    return h * B + b


def pair_of(block_x: int, n_head: int, order: str = "batch-major",
            B: int | None = None) -> tuple[int, int]:
    """(b, h) handled by blockIdx.x = block_x: divmod(block_x, n_head) in the kernels'
    batch-major order; for order="head-major" (blockIdx.x = h * B + b), (block_x % B, block_x // B)."""
    _pos_int("n_head", n_head)
    _order(order, B)
    if block_x < 0:
        raise ValueError(f"block_x must be >= 0, got {block_x}")
    if order == "batch-major":
        return divmod(block_x, n_head)
    assert B is not None  # _order checked it
    h, b = divmod(block_x, B)
    return b, h


def grid_shape(version: str, B: int, n_head: int, T: int, head_dim: int = 64
               ) -> tuple[int, int, int]:
    """gridDim of one launch, from the tile sizes in the .cu file (no compilation). head_dim
    matters for v3 only (128-row query tiles up to head_dim 64, 64-row tiles above).

    The one grid function is KernelSpec.grid; `compile_attention(...).grid(B, n_head, T)`
    calls it too.
    """
    for name, v in (("B", B), ("n_head", n_head), ("T", T)):
        _pos_int(name, v)
    return registry.get(_version(version)).grid(B, n_head, T, head_dim)


# ---------------------------------------------------------------- what the kernel is told
@dataclass(frozen=True)
class KernelSignature:
    """A kernel's template and runtime parameters, as written in its .cu file."""

    name: str
    file: str
    template_params: tuple  # e.g. ("typename T", "int CHUNKS")
    params: tuple  # e.g. ("const T* __restrict__ q", ..., "int causal")
    param_names: tuple  # e.g. ("q", "k", "v", "out", "seq_len", "head_dim", "scale", "causal")


def _kernel_text(version: str) -> tuple[str, int]:
    """(text from the kernel's `template <...>` line to the end of the file, its first line no.)."""
    src = kernel_source(_version(version))
    spec = registry.get(version)
    m = re.search(r"^template <[^>]*>\s*\n__global__[^\n]*\n" + spec.kernel + r"\(",
                  src, flags=re.M)
    if m is None:
        raise RuntimeError(f"cannot find the kernel {spec.kernel} in {spec.source}")
    return src[m.start():], src[:m.start()].count("\n") + 1


def kernel_signature(version: str) -> KernelSignature:
    """Read the kernel's parameters from its source (the book shows what the kernel is told)."""
    text, _ = _kernel_text(version)
    spec = registry.get(version)
    tmpl_m = re.match(r"template <([^>]*)>", text)
    params_m = re.search(spec.kernel + r"\(([^)]*)\)", text)
    if tmpl_m is None or params_m is None:
        raise RuntimeError(f"cannot read the parameters of {spec.kernel} in {spec.source}")
    tmpl, params = tmpl_m.group(1), params_m.group(1)
    plist = tuple(" ".join(p.split()) for p in params.split(","))
    names = tuple(p.split()[-1].lstrip("*") for p in plist)
    return KernelSignature(spec.kernel, spec.source,
                           tuple(t.strip() for t in tmpl.split(",")), plist, names)


def kernel_lines(version: str) -> list[tuple[int, str]]:
    """(line number in the .cu file, line) for the kernel function: its template line to its
    closing brace (the first line that is exactly "}")."""
    text, first = _kernel_text(version)
    lines = text.splitlines()
    end = lines.index("}") if "}" in lines else len(lines) - 1
    return [(first + i, line) for i, line in enumerate(lines[:end + 1])]


def index_lines(version: str, pattern: str = r"\b(blockIdx|gridDim)\b") -> list[tuple[int, str]]:
    """The kernel's lines (code, not comments) that match `pattern`: where it picks its work."""
    rx = re.compile(pattern)
    return [(n, line) for n, line in kernel_lines(version) if rx.search(line.split("//")[0])]


# ---------------------------------------------------------------- blocks vs SMs
def sm_fill(B: int, n_head: int, T: int, version: str = "v1", sm: dict = occupancy.H200,
            blocks_per_sm: int | None = None) -> dict:
    """How one launch's blocks spread over a GPU (`occupancy.grid_fill`), plus the grid itself.

    blocks_per_sm: from the compiled kernel's resources (occupancy.blocks_per_sm); None counts
    one block per SM, which is enough to say how many SMs get no work at all.
    """
    grid = grid_shape(version, B, n_head, T)
    n_blocks = grid[0] * grid[1] * grid[2]
    fill = occupancy.grid_fill(n_blocks, 1 if blocks_per_sm is None else blocks_per_sm, sm)
    return dict(fill, grid=grid, version=version, gpu=sm["name"], B=B, n_head=n_head, T=T,
                idle_fraction=fill["idle_sms"] / sm["sms"])




# ---------------------------------------------------------------- launch order and the tail
SCHEDULE_ORDERS = ("as given", "lightest first", "heaviest first")


def finish_time(work, slots: int, order: str = "as given") -> dict:
    """When the last block finishes if `slots` workers (SMs' block slots) take blocks in `order`,
    each taking the next one the moment it is free (greedy list scheduling: a model of a
    scheduler that starts blocks in launch order, which NVIDIA observes but does not promise).

    work: each block's cost (e.g. K/V tiles it loads), in launch order. Returns {finish: the
    time the last slot is done, ideal: sum(work) / slots (no slot ever waits), order: the
    costs in the order taken, per_slot: each slot's busy time}.
    """
    _pos_int("slots", slots)
    if order not in SCHEDULE_ORDERS:
        raise ValueError(f"order={order!r}: allowed values are "
                         f"{', '.join(map(repr, SCHEDULE_ORDERS))}")
    costs = [float(w) for w in work]
    if not costs or min(costs) < 0:
        raise ValueError(f"work must be a non-empty list of costs >= 0, got {list(work)!r}")
    if order != "as given":
        costs = sorted(costs, reverse=(order == "heaviest first"))
    busy = [0.0] * slots
    for c in costs:  # the slot that frees first takes the next block
        i = min(range(slots), key=busy.__getitem__)
        busy[i] += c
    return dict(finish=max(busy), ideal=sum(costs) / slots, order=costs, per_slot=busy)
