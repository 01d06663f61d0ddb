"""How the heads are stored: views, strides, contiguity and element offsets.

Introduced in the chapter "How CUDA stores the heads". Names: B batch, T seq_len, C d_model,
nh n_head, hs head_dim; offsets and strides count elements unless a name says bytes.

The source's recipe, one step at a time:
    q                                      # (B, T, C)       the fused matmul's output, contiguous
    q.view(B, T, nh, hs)                   # (B, T, nh, hs)  a view: same memory, one more index
    q.view(B, T, nh, hs).transpose(1, 2)   # (B, nh, T, hs)  a view: strides swapped, NOT contiguous
    (...).contiguous()                     # (B, nh, T, hs)  a copy: head h's T x hs slice is one run

Layout names (LAYOUTS), all addressed by the same logical index (b, t, h, d):
    "BTC"        the [B, T, C] buffer; (b, t, h, d) is its element (b, t, h*hs + d)
    "BTHD"       its view [B, T, nh, hs]                      (same memory as "BTC")
    "BHTD_view"  the transposed view [B, nh, T, hs]           (same memory as "BTC")
    "BHTD"       [B, nh, T, hs] after .contiguous()           (a new buffer)

What the copy and the strides cost is measured in `layout_cost`; the figures are `layout_figures`.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from andrea_edu.projections import _check_n_head, reshape_without_transpose, split_heads

LAYOUTS = ("BTC", "BTHD", "BHTD_view", "BHTD")
LAYOUT_SHAPES = {"BTC": "[B, T, C]", "BTHD": "[B, T, nh, hs]",
                 "BHTD_view": "[B, nh, T, hs] (transposed view)",
                 "BHTD": "[B, nh, T, hs] (contiguous)"}


def check_shape(shape) -> tuple[int, int, int, int]:
    """shape = (B, T, n_head, head_dim), four positive ints."""
    names = ("B", "T", "n_head", "head_dim")
    if not isinstance(shape, (tuple, list)) or len(shape) != 4:
        raise ValueError(f"shape must be (B, T, n_head, head_dim), four positive ints; got {shape!r}")
    for name, v in zip(names, shape):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
            raise ValueError(f"shape: {name} must be a positive int, got {v!r} in shape={tuple(shape)}")
    b, t, nh, hs = (int(v) for v in shape)
    return b, t, nh, hs


def _check_layout(layout: str) -> str:
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
    return layout


# ---------------------------------------------------------------- the steps, as torch sees them
@dataclass(frozen=True)
class LayoutStep:
    """One step of the recipe, read off the real torch tensor."""

    op: str  # the code of the step, e.g. ".transpose(1, 2)"
    dims: str  # the axes' names, e.g. "[B, nh, T, hs]"
    shape: tuple
    strides: tuple  # elements
    itemsize: int  # bytes per element
    is_contiguous: bool
    kind: str  # "input", "view" (same memory as the input) or "copy" (new memory)
    bytes_copied: int  # bytes this step wrote to new memory (0 for a view)

    @property
    def strides_bytes(self) -> tuple:
        return tuple(s * self.itemsize for s in self.strides)


def layout_steps(B: int, T: int, n_head: int, head_dim: int, dtype=torch.float32) -> list[LayoutStep]:
    """Run the recipe on a real [B, T, C] tensor and report each step as torch reports it.

    View or copy is decided by comparing storage pointers, not assumed.
    """
    B, T, nh, hs = check_shape((B, T, n_head, head_dim))
    x = torch.empty(B, T, nh * hs, dtype=dtype)  # (B, T, C)
    base = x.untyped_storage().data_ptr()
    x4 = x.view(B, T, nh, hs)  # (B, T, nh, hs)
    xt = x4.transpose(1, 2)  # (B, nh, T, hs), a view
    xc = xt.contiguous()  # (B, nh, T, hs), a copy
    steps = []
    for op, dims, t in (("q", "[B, T, C]", x), (".view(B, T, nh, hs)", "[B, T, nh, hs]", x4),
                        (".transpose(1, 2)", "[B, nh, T, hs]", xt),
                        (".contiguous()", "[B, nh, T, hs]", xc)):
        same = t.untyped_storage().data_ptr() == base
        kind = "input" if t is x else ("view" if same else "copy")
        steps.append(LayoutStep(op, dims, tuple(t.shape), tuple(t.stride()), t.element_size(),
                          t.is_contiguous(), kind,
                          0 if same else t.numel() * t.element_size()))
    return steps


def steps_table(steps: list[LayoutStep]) -> str:
    """A Markdown table of `layout_steps`' result."""
    rows = ["| step | axes | shape | strides (elements) | strides (bytes) | contiguous | view or copy "
            "| bytes copied |", "|---|---|---|---|---|---|---|---|"]
    for s in steps:
        rows.append(f"| `{s.op}` | {s.dims} | {s.shape} | {s.strides} | {s.strides_bytes} | "
                    f"{s.is_contiguous} | {s.kind} | {s.bytes_copied:,} |")
    return "\n".join(rows)


# ---------------------------------------------------------------- where one element lives
def logical_strides(layout: str, shape) -> tuple[int, int, int, int]:
    """Strides (elements) of the logical index (b, t, h, d) in `layout`, for shape (B, T, nh, hs)."""
    B, T, nh, hs = check_shape(shape)
    C = nh * hs
    if _check_layout(layout) == "BHTD":
        return (nh * T * hs, hs, T * hs, 1)
    return (T * C, C, hs, 1)  # BTC, BTHD and BHTD_view share one buffer: same offsets


def native_index(layout: str, b: int, t: int, h: int, d: int, head_dim: int) -> tuple:
    """The index with which a tensor in `layout` is subscripted for the logical (b, t, h, d)."""
    _check_layout(layout)
    if layout == "BTC":
        return (b, t, h * head_dim + d)
    if layout == "BTHD":
        return (b, t, h, d)
    return (b, h, t, d)


def element_offset(b: int, t: int, h: int, d: int, layout="BTC", shape=None) -> int:
    """Flat offset (elements from the start of the buffer) of element (b, t, h, d).

    layout: a name in LAYOUTS, or four strides in (b, t, h, d) order.
    shape: (B, T, n_head, head_dim); needed to check the index and to derive a named layout.
    """
    if shape is None:
        raise ValueError("shape=(B, T, n_head, head_dim) is required by element_offset")
    sizes = check_shape(shape)
    for name, i, n in zip(("b", "t", "h", "d"), (b, t, h, d), sizes):
        if isinstance(i, bool) or not isinstance(i, (int, np.integer)) or not 0 <= i < n:
            raise ValueError(f"{name} must be an int in 0..{n - 1} for shape={sizes}, got {i!r}")
    if isinstance(layout, str):
        strides = logical_strides(layout, sizes)
    elif isinstance(layout, (tuple, list)) and len(layout) == 4:
        strides = tuple(layout)
        if not all(isinstance(s, (int, np.integer)) and not isinstance(s, bool) and s >= 0
                   for s in strides):
            raise ValueError(f"layout: strides must be 4 integers >= 0 in (b, t, h, d) order, "
                             f"got {layout!r}")
    else:
        raise ValueError(f"layout must be one of {LAYOUTS} or 4 strides in (b, t, h, d) order, "
                         f"got {layout!r}")
    return int(sum(int(i) * int(s) for i, s in zip((b, t, h, d), strides)))


def torch_offset(tensor: torch.Tensor, index: tuple) -> int:
    """Where torch really put tensor[index]: data_ptr arithmetic, in elements from the storage start."""
    delta = tensor[index].data_ptr() - tensor.untyped_storage().data_ptr()
    return delta // tensor.element_size()


def tensor_in_layout(x: torch.Tensor, layout: str, n_head: int) -> torch.Tensor:
    """x [B, T, C] seen in `layout` (a view, or a copy for "BHTD"); n_head divides C."""
    _check_layout(layout)
    if not isinstance(x, torch.Tensor) or x.dim() != 3:
        raise ValueError(f"x must be a torch.Tensor [B, T, C], got "
                         f"{list(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__}")
    _check_n_head(n_head, x.shape[-1])
    if layout == "BTC":
        return x  # (B, T, C)
    B, T, C = x.shape
    if layout == "BTHD":
        return x.view(B, T, n_head, C // n_head)  # (B, T, nh, hs)
    xt = split_heads(x, n_head)  # (B, nh, T, hs), a view
    return xt if layout == "BHTD_view" else xt.contiguous()


# ---------------------------------------------------------------- memory maps
def machine_memory_bytes() -> int | None:
    """This machine's physical memory in bytes (None where the system does not say)."""
    import os
    try:
        return int(os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):
        return None


def memory_problem(what: str, need_bytes: int) -> str | None:
    """One line when `need_bytes` (what a call would allocate at once, estimated before it
    starts) exceeds this machine's physical memory, naming both sizes; else None. The guard of
    the helpers that build an array per element (memory_map) or a [T, T] matrix (the reference
    attention): a clear refusal instead of an allocator's error or a machine swapping."""
    have = machine_memory_bytes()
    if have is None or need_bytes <= have:
        return None
    return (f"{what} needs about {need_bytes / 2**30:.1f} GiB at once; this machine has "
            f"{have / 2**30:.1f} GiB")


MAP_BYTES_PER_ELEMENT = 8 * 12  # int64: 4 index grids, the offsets, 4 maps and temporaries


def memory_map(layout: str, shape) -> dict[str, np.ndarray]:
    """For each flat offset of the buffer, the logical index stored there.

    Returns {"b", "t", "h", "d"}: int arrays of length B*T*C, e.g. map["h"][o] is the head whose
    element sits at offset o. One buffer holds every (b, t, h, d) exactly once, in any layout.
    A shape whose maps this machine cannot hold is refused first (ValueError naming the size).
    """
    B, T, nh, hs = sizes = check_shape(shape)
    too_big = memory_problem(f"memory_map: shape={tuple(sizes)} ({B * T * nh * hs:,} elements)",
                             B * T * nh * hs * MAP_BYTES_PER_ELEMENT)
    if too_big:
        raise ValueError(too_big)
    b, t, h, d = np.meshgrid(np.arange(B), np.arange(T), np.arange(nh), np.arange(hs),
                             indexing="ij")  # each (B, T, nh, hs)
    sb, st, sh, sd = logical_strides(layout, sizes)
    off = (b * sb + t * st + h * sh + d * sd).ravel()  # (B*T*C,)
    out = {}
    for name, grid in (("b", b), ("t", t), ("h", h), ("d", d)):
        arr = np.empty(off.size, dtype=np.int64)
        arr[off] = grid.ravel()
        out[name] = arr
    return out


def head_offsets(h: int, layout: str, shape, b: int = 0) -> np.ndarray:
    """Sorted flat offsets of head h's [T, hs] slice for batch item b."""
    B, T, nh, hs = sizes = check_shape(shape)
    element_offset(b, 0, h, 0, layout, sizes)  # validates b, h and layout
    sb, st, sh, sd = logical_strides(layout, sizes)
    t, d = np.meshgrid(np.arange(T), np.arange(hs), indexing="ij")  # each (T, hs)
    return np.sort((b * sb + t * st + h * sh + d * sd).ravel())  # (T*hs,)


def runs(offsets) -> list[tuple[int, int]]:
    """Contiguous runs of sorted offsets as (start, length): how many pieces a slice is in."""
    o = np.asarray(offsets, dtype=np.int64)
    if o.size == 0:
        return []
    breaks = np.flatnonzero(np.diff(o) != 1) + 1
    starts = np.concatenate(([0], breaks))
    ends = np.concatenate((breaks, [o.size]))
    return [(int(o[s]), int(e - s)) for s, e in zip(starts, ends)]


# ---------------------------------------------------------------- the reshape trap
def trap_origin(b: int, h: int, t: int, d: int, shape) -> tuple[int, int, int, int]:
    """x.reshape(B, nh, T, hs)[b, h, t, d] holds the original element (b', t', h', d') of x [B, T, C].

    The reshape reads x's buffer in order: flat offset ((b*nh + h)*T + t)*hs + d.
    """
    B, T, nh, hs = sizes = check_shape(shape)
    element_offset(b, t, h, d, "BHTD", sizes)  # validates the index
    C = nh * hs
    flat = ((b * nh + h) * T + t) * hs + d
    b2, rem = divmod(flat, T * C)
    t2, c = divmod(rem, C)
    return (b2, t2, c // hs, c % hs)


@dataclass(frozen=True)
class TrapReport:
    """What `reshape_without_transpose` puts where, compared element by element with split_heads."""

    shape: tuple  # (B, T, nh, hs)
    wrong_head: float  # fraction of elements that belong to another head
    wrong_token: float  # fraction of elements that belong to another token
    wrong: float  # fraction of elements not where split_heads puts them
    rows: list  # [(h, t, t_origin, h_origin)] for batch 0: trapped row (h, t) holds token/head


def reshape_trap(B: int, T: int, n_head: int, head_dim: int) -> TrapReport:
    """Label every element with its (t, h), reshape without transposing, and count the damage."""
    B, T, nh, hs = check_shape((B, T, n_head, head_dim))
    C = nh * hs
    c = torch.arange(C)
    tok = torch.arange(T).view(1, T, 1).expand(B, T, C).contiguous()  # (B, T, C): token label
    head = (c // hs).view(1, 1, C).expand(B, T, C).contiguous()  # (B, T, C): head label
    ids = torch.arange(B * T * C).view(B, T, C)  # (B, T, C): a unique id per element
    right = {k: split_heads(v, nh) for k, v in (("t", tok), ("h", head), ("id", ids))}
    wrong = {k: reshape_without_transpose(v, nh) for k, v in (("t", tok), ("h", head), ("id", ids))}
    h_ok = torch.arange(nh).view(1, nh, 1, 1)  # (1, nh, 1, 1): the head each slot should hold
    t_ok = torch.arange(T).view(1, 1, T, 1)  # (1, 1, T, 1)
    rows = [(h, t, int(wrong["t"][0, h, t, 0]), int(wrong["h"][0, h, t, 0]))
            for h in range(nh) for t in range(T)]
    return TrapReport((B, T, nh, hs), float((wrong["h"] != h_ok).float().mean()),
                      float((wrong["t"] != t_ok).float().mean()),
                      float((wrong["id"] != right["id"]).float().mean()), rows)
