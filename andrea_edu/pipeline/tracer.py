"""Follow one token through one ANDREA layer of a real forward pass.

Introduced in the chapter "Reading the pipeline".

    trace = trace_token(model, idx, layer=0, b=0, t=5)
    trace.rows[i].shape, .strides, .dtype, .values ...    # one row per step of the layer

The layer runs as `pipeline.block_in_steps`, the model's own forward one step at a time; the
tracer is its `mark`. At every step it records the tensor's shape, strides (in elements), dtype,
whether it is contiguous, whether it shares memory with the step before (a view) or is new memory
(a copy), where the tracked token sits in it (its index and its first feature's element offset in
the storage), and the token's first `n_values` features. Steps that act on q, k and v alike
record q; tensors split into heads record head 0's features. Each row names the book chapter that
explains its step (`pipeline.STEP_INFO`).
"""
from __future__ import annotations

import copy
from dataclasses import dataclass, field

import torch

from andrea_edu.pipeline.steps import CHAPTER_TITLES, STEP_INFO, block_in_steps, chapter_link

INPUT_STEP = ("residual stream entering the layer", "final_picture")


@dataclass(frozen=True)
class TraceRow:
    """The tracked token at one step."""

    step: str  # a key of pipeline.STEP_INFO, or "input"
    label: str
    chapter: str  # the chapter (notebook name) that explains the step
    layer: int
    shape: tuple
    strides: tuple  # elements
    dtype: str
    contiguous: bool
    view_of_previous: bool  # shares the storage of the previous step's tensor: no data moved
    index: tuple  # the token's position in this tensor, its features as a slice ":n"
    offset: int  # element offset of the token's first shown feature in the storage
    values: tuple  # the token's first n features (head 0's, for per-head tensors)
    bytes_written: int  # bytes of new memory the step wrote (0 for a view and for the input)
    note: str = ""

    @property
    def index_text(self) -> str:
        """The token's index as code reads it, e.g. "[1, 0, 4, :4]"."""
        return _idx_text(self.index)


@dataclass
class Trace:
    """All rows of one traced layer; `tensors` holds each step's full tensor when keep=True."""

    rows: list
    b: int
    t: int
    layer: int
    token_id: int
    config: str
    tensors: dict = field(default_factory=dict)

    def q_offset(self, head: int) -> int:
        """Element offset, in the qkv buffer, of the token's q features of head `head`, read off
        the transposed q view itself (needs a trace made with keep=True)."""
        if "transpose" not in self.tensors:
            raise ValueError("q_offset needs the tensors: trace with keep=True")
        q = self.tensors["transpose"][0]  # (B, nh, T, hs): a view into qkv
        nh = q.shape[1]
        if isinstance(head, bool) or not isinstance(head, int) or not 0 <= head < nh:
            raise ValueError(f"head must be an int in 0..{nh - 1} (n_head={nh}), got {head!r}")
        row = q[self.b, head, self.t]  # (hs,)
        return (row.data_ptr() - self.tensors["qkv"].data_ptr()) // row.element_size()

    def table(self) -> str:
        """A Markdown table of the rows; each step's name links to the chapter explaining it."""
        lines = ["| step (→ its chapter) | shape | strides | memory | token at | first values |",
                 "|---|---|---|---|---|---|"]
        for r in self.rows:
            vals = " ".join(f"{v:+.3f}" for v in r.values)
            mem = "input" if r.step == "input" else "view" if r.view_of_previous else \
                f"new {r.bytes_written:,} B"
            label = r.label.replace("[", "\\[").replace("]", "\\]")  # brackets inside a link
            link = chapter_link(r.chapter).replace(CHAPTER_TITLES[r.chapter], label, 1)
            strides = _compact(r.strides) + ("" if r.contiguous else " (not contiguous)")
            lines.append(f"| {link} | {_compact(r.shape)} | {strides} | {mem} | {r.index_text} | "
                         f"{vals} |")
        return "\n".join(lines)


def _compact(t) -> str:
    return "[" + ",".join(str(v) for v in t) + "]"


def _idx_text(index) -> str:
    return "[" + ", ".join(i if isinstance(i, str) else str(i) for i in index) + "]"


def _token_index(step: str, t4d_order: str, b: int, t: int, n: int) -> tuple:
    if t4d_order == "BTHD":
        return (b, t, 0, f":{n}")
    if t4d_order == "BHTD":
        return (b, 0, t, f":{n}")
    return (b, t, f":{n}")


class _Tracer:
    def __init__(self, b: int, t: int, n: int, keep: bool, first_row: TraceRow, x):
        self.b, self.t, self.n, self.keep = b, t, n, keep
        self.rows, self.tensors = [first_row], {"input": x} if keep else {}
        self.prev = x

    def mark(self, layer, name, out, **info):
        tensor = out[0] if isinstance(out, tuple) else out  # q of (q, k, v)
        order = {"view_heads": "BTHD", "transpose": "BHTD", "attention": "BHTD"}.get(name, "BTC")
        index = _token_index(name, order, self.b, self.t, self.n)
        pos = tuple(i for i in index if not isinstance(i, str))
        values = tensor[pos][: self.n]  # (n,)
        offset = tensor.storage_offset() + sum(i * s for i, s in zip(pos, tensor.stride()))
        same = tensor.untyped_storage().data_ptr() == self.prev.untyped_storage().data_ptr()
        note = ""
        if isinstance(out, tuple):
            note = "q shown; k and v alike"
        if "decision" in info:
            d = info["decision"]
            note = f"backend {d.backend}: {d.reason}"
        label, _, _, chapter = STEP_INFO[name]
        self.rows.append(TraceRow(
            name, label, chapter, layer, tuple(tensor.shape), tuple(tensor.stride()),
            str(tensor.dtype).replace("torch.", ""), tensor.is_contiguous(), same, index,
            int(offset), tuple(float(v) for v in values.float().cpu()),
            0 if same else sum(o.numel() * o.element_size() for o in
                               (out if isinstance(out, tuple) else (out,))), note))
        if self.keep:
            self.tensors[name] = out
        self.prev = tensor
        return out


DTYPES = (torch.float32, torch.float16, torch.bfloat16)


@torch.no_grad()
def trace_token(model, idx, layer: int = 0, b: int = 0, t: int | None = None,
                n_values: int = 4, keep: bool = False, attn=None,
                dtype: torch.dtype | None = None) -> Trace:
    """Run `model` on idx (B, T) up to layer `layer`, then that layer step by step, recording
    token (b, t) at every step (t defaults to the last position). keep: store every step's
    full tensor in `Trace.tensors` (for checks against a plain forward).

    attn: run every layer's attention with this callable (e.g. `dispatch.Backend("emulator")`)
    for this trace only; dtype (one of DTYPES): trace a copy of the model cast to it. The model
    itself is left as it was."""
    if dtype is not None and dtype not in DTYPES:
        raise ValueError(f"dtype={dtype!r} is not one of {[str(d) for d in DTYPES]}")
    if dtype is not None and dtype != model.wte.dtype:
        model = copy.deepcopy(model).to(dtype)
    if attn is not None:
        before = model.attention
        model.set_attention(attn)  # one line when it is not a callable
        try:
            return trace_token(model, idx, layer, b, t, n_values, keep)
        finally:
            model.set_attention(before)
    if not isinstance(idx, torch.Tensor) or idx.dim() != 2 or idx.dtype != torch.long:
        raise ValueError(f"idx must be a (batch, seq_len) torch.long tensor, got "
                         f"{type(idx).__name__} {tuple(getattr(idx, 'shape', ()))}")
    B, T = idx.shape
    L = len(model.blocks)
    if not (isinstance(layer, int) and 0 <= layer < L):
        raise ValueError(f"layer must be an int in 0..{L - 1} (n_layer={L}), got {layer!r}")
    t = T - 1 if t is None else t
    for name, v, hi in (("b", b, B), ("t", t, T)):
        if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v < hi:
            raise ValueError(f"{name} must be an int in 0..{hi - 1}, got {v!r}")
    C = model.wte.shape[1]
    if not (isinstance(n_values, int) and 1 <= n_values <= C // model.blocks[0].attn.n_head):
        raise ValueError(f"n_values must be an int in 1..head_dim="
                         f"{C // model.blocks[0].attn.n_head}, got {n_values!r}")
    x = model.wte[idx] + model.wpe[:T]  # (B, T, C): the model's embedding step
    for block in model.blocks[:layer]:
        x = block(x)  # (B, T, C)
    first = TraceRow("input", INPUT_STEP[0], INPUT_STEP[1], layer, tuple(x.shape),
                     tuple(x.stride()), str(x.dtype).replace("torch.", ""), x.is_contiguous(),
                     False, (b, t, f":{n_values}"),
                     int(x.storage_offset() + b * x.stride(0) + t * x.stride(1)),
                     tuple(float(v) for v in x[b, t, :n_values].float().cpu()), 0)
    tracer = _Tracer(b, t, n_values, keep, first, x)
    out = block_in_steps(model.blocks[layer], x, tracer.mark, layer)  # (B, T, C)
    if keep:
        tracer.tensors["output"] = out
    return Trace(tracer.rows, b, t, layer, int(idx[b, t]), getattr(model.cfg, "name", "custom"),
                 tracer.tensors)


def differences(a: Trace, b: Trace) -> list[tuple[str, str]]:
    """[(step label, what differs)] between two traces of the same token, for the rows where
    anything differs: shape, strides, dtype, new memory, the note, the shown values (their
    largest absolute difference). Empty when the two traces agree in every column."""
    if [r.step for r in a.rows] != [r.step for r in b.rows]:
        raise ValueError("the traces have different steps: trace the same layer twice")
    out = []
    for ra, rb in zip(a.rows, b.rows):
        diff = [f"{name} {fa} → {fb}" for name, fa, fb in (
            ("shape", _compact(ra.shape), _compact(rb.shape)),
            ("strides", _compact(ra.strides), _compact(rb.strides)),
            ("dtype", ra.dtype, rb.dtype),
            ("new memory", f"{ra.bytes_written:,} B", f"{rb.bytes_written:,} B")) if fa != fb]
        if ra.values != rb.values:
            gap = max(abs(x - y) for x, y in zip(ra.values, rb.values))
            diff.append(f"values differ by up to {gap:.1e}")
        if ra.note != rb.note:
            diff.append(f"note: *{rb.note}*")
        if diff:
            out.append((ra.label, "; ".join(diff)))
    return out


def head_mixing(W_O: torch.Tensor, n_head: int) -> list[dict]:
    """How W_O [C, C] mixes the heads into the output features, head by head: the fraction of
    the C output features that take any weight from the head (its rows h*hs..(h+1)*hs), and the
    head's share of each feature's squared weight (min, median, max over the features; 1/n_head
    each if all heads weighed the same). Returns [{"head", "reaches", "share_min",
    "share_median", "share_max"}]."""
    C = W_O.shape[0]
    if W_O.dim() != 2 or W_O.shape[1] != C or not (isinstance(n_head, int) and n_head >= 1
                                                    and C % n_head == 0):
        raise ValueError(f"W_O must be square [C, C] with C divisible by n_head; got "
                         f"{tuple(W_O.shape)} and n_head={n_head!r}")
    hs = C // n_head
    w2 = W_O.detach().float().pow(2).view(n_head, hs, C).sum(1)  # (nh, C): head h -> feature j
    share = w2 / w2.sum(0).clamp_min(torch.finfo(torch.float32).tiny)  # (nh, C)
    return [{"head": h, "reaches": float((w2[h] > 0).float().mean()),
             "share_min": float(share[h].min()), "share_median": float(share[h].median()),
             "share_max": float(share[h].max())} for h in range(n_head)]
