"""One ANDREA forward pass as a list of steps: shapes, FLOPs, bytes moved, arithmetic intensity.

Introduced in the chapter "The final picture"; the chapter "Reading the pipeline" follows one
token through the same steps (`andrea_edu.pipeline.tracer`). Timing lives in `pipeline.timing`, figures in
`pipeline_figures`.

The source's five steps of one layer's attention are: the Q, K and V projections, one attention
kernel over all heads, and the W_O matmul. ANDREA's code (`model.SelfAttention`) runs the three
projections as ONE matmul, x . c_attn with c_attn = [W_Q | W_K | W_V] of shape [C, 3C], as
GPT-2-style code does; `five_steps` lists them the source's way, `layer_steps` the way the model
runs them. Every step is read off the model object (its parameters' shapes, its n_head), never
typed by hand. Names: B batch, T seq_len, C d_model, nh n_head, hs head_dim, N = B*T tokens.

Cost formulas (a multiply-add counts as 2 FLOPs; bytes = elements x dtype's itemsize):
  matmul [M, K] . [K, N]    FLOPs 2*M*N*K (`bench.matmul_flops`);
                            bytes (M*K + K*N + M*N): read both operands, write the result once.
  attention, all heads      FLOPs 4*B*nh*T^2*hs (q.k^T and p.v, 2*T*T*hs each per head), halved
                            when causal (`bench.attention_flops`; softmax not counted);
                            bytes 4*B*nh*T*hs: read q, k, v, write out, as a kernel that keeps the
                            T x T scores on chip does. `scores_in_memory=True` adds one write and
                            one read of the B*nh*T*T probabilities (the least an unfused
                            implementation such as backend "reference" moves on top).
  LayerNorm over [N, C]     FLOPs ~8*N*C (mean 1, variance 3, normalise 2, scale and shift 2 per
                            element; an estimate); bytes 2*N*C + 2*C (read x, write y, weight+bias).
  GELU over N*4C elements   FLOPs ~8 per element (an estimate); bytes 2 per element (read, write).
  residual add              FLOPs N*C; bytes 3*N*C.       merge heads (a copy): 0 FLOPs, 2*N*C.
  views (split, view, transpose): 0 FLOPs, 0 bytes: no data moves.
  embeddings wte[idx]+wpe   FLOPs N*C (the add); bytes 3*N*C (two rows read, one written).
The non-matmul estimates are under 1% of the FLOPs of ANDREA-120M; their bytes matter more.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from andrea_edu.dispatch import Backend
from andrea_edu.bench.timing import attention_flops, matmul_flops
from andrea_edu.projections import merge_heads

# model.SelfAttention.forward calls attention(..., causal=True); tests/test_pipeline checks that
# the model really is causal (changing a later token leaves earlier logits unchanged).
CAUSAL = True

# name: (label, group, kind, chapter that explains it). The order is the order of one layer.
LAYER_STEP_INFO = {
    "ln_1": ("LayerNorm 1", "LayerNorms", "layernorm", "final_picture"),
    "qkv": ("x · c_attn: Q, K, V in one matmul", "Q, K, V projections", "matmul",
            "three_matrices"),
    "split_qkv": ("split into q, k, v (views)", "Q, K, V projections", "view", "three_matrices"),
    "view_heads": ("view as [B, T, nh, hs]", "Q, K, V projections", "view", "cuda_stores_heads"),
    "transpose": ("transpose to [B, nh, T, hs]", "Q, K, V projections", "view",
                  "cuda_stores_heads"),
    "attention": ("attention kernel, all heads", "attention kernel", "attention",
                  "one_kernel_many_heads"),
    "concat": ("concat heads (a copy)", "W_O (concat + matmul)", "copy",
               "twelve_vectors_become_one"),
    "W_O": ("concat · W_O", "W_O (concat + matmul)", "matmul", "output_projection"),
    "residual_1": ("x + attention output", "residual adds", "elementwise", "final_picture"),
    "ln_2": ("LayerNorm 2", "LayerNorms", "layernorm", "final_picture"),
    "mlp_up": ("x · W_in", "MLP", "matmul", "final_picture"),
    "gelu": ("GELU", "MLP", "elementwise", "final_picture"),
    "mlp_down": ("· W_out", "MLP", "matmul", "final_picture"),
    "residual_2": ("x + MLP output", "residual adds", "elementwise", "final_picture"),
}
MODEL_STEP_INFO = {
    "embed": ("wte[idx] + wpe[:T]", "embeddings", "lookup", "final_picture"),
    "ln_f": ("final LayerNorm", "LayerNorms", "layernorm", "final_picture"),
    "lm_head": ("x · wteᵀ (tied LM head)", "LM head", "matmul", "final_picture"),
}
# The source's three projections, as `five_steps` lists them (the model runs them as "qkv").
SOURCE_STEP_INFO = {f"{n.lower()}_proj": (f"x · W_{n}", "Q, K, V projections", "matmul",
                                          "three_matrices") for n in "QKV"}
STEP_INFO = {**LAYER_STEP_INFO, **MODEL_STEP_INFO, **SOURCE_STEP_INFO}
# The book's chapters that explain the steps (notebook name -> title), for links.
CHAPTER_TITLES = {
    "three_matrices": "Three matrices per head, or one big matrix",
    "parameter_count": "Parameter count",
    "twelve_vectors_become_one": "Twelve vectors become one",
    "output_projection": "The output projection W_O",
    "why_heads_specialize": "Why heads specialize",
    "why_twelve_heads": "Why twelve heads, not one wider head",
    "cuda_stores_heads": "How CUDA stores the heads",
    "one_kernel_many_heads": "One kernel, many heads",
    "config_mirrors_hardware": "The configuration mirrors the hardware",
    "final_picture": "The final picture",
    "reading_the_pipeline": "Reading the pipeline",
}


def chapter_link(chapter: str) -> str:
    """A MyST/Markdown link to a chapter notebook, titled: [title](name.ipynb)."""
    if chapter not in CHAPTER_TITLES:
        raise ValueError(f"chapter={chapter!r} is not one of {list(CHAPTER_TITLES)}")
    return f"[{CHAPTER_TITLES[chapter]}]({chapter}.ipynb)"


# The groups of a time-share or cost chart, the source's three attention groups first.
GROUPS = ("Q, K, V projections", "attention kernel", "W_O (concat + matmul)", "MLP",
          "LayerNorms", "residual adds", "embeddings", "LM head")
ATTENTION_GROUPS = GROUPS[:3]


@dataclass(frozen=True)
class Step:
    """One step of the forward pass, with its shapes and its cost from the formulas above."""

    name: str  # a key of STEP_INFO, e.g. "qkv"
    layer: int | None  # 0..n_layer-1, or None for the model-level steps
    inputs: tuple  # ((operand name, shape), ...)
    output: tuple  # shape of the result (of each, for the three-way steps)
    flops: float
    bytes: float
    module: str  # the model parameter(s) it reads, e.g. "blocks.0.attn.c_attn"; "" if none
    op: str  # the torch code that runs it

    @property
    def label(self) -> str:
        return STEP_INFO[self.name][0]

    @property
    def group(self) -> str:
        return STEP_INFO[self.name][1]

    @property
    def kind(self) -> str:
        return STEP_INFO[self.name][2]

    @property
    def chapter(self) -> str:
        return STEP_INFO[self.name][3]

    @property
    def intensity(self) -> float:
        """FLOPs per byte moved; nan for a view (0 FLOPs over 0 bytes)."""
        return self.flops / self.bytes if self.bytes else math.nan


def itemsize(dtype) -> int:
    """Bytes per element of a torch dtype."""
    if not isinstance(dtype, torch.dtype):
        raise TypeError(f"dtype must be a torch.dtype, got {dtype!r}")
    return torch.empty((), dtype=dtype).element_size()


def matmul_bytes(M: int, N: int, K: int, dtype=torch.float32) -> float:
    """Bytes an [M, K] . [K, N] matmul must move at least: both operands read, result written."""
    return float((M * K + K * N + M * N) * itemsize(dtype))


def attention_bytes(B: int, nh: int, T: int, hs: int, dtype=torch.float32,
                    scores_in_memory: bool = False) -> float:
    """Bytes of one attention call: q, k, v read and out written (4*B*nh*T*hs elements); with
    scores_in_memory, plus one write and one read of the B*nh*T*T probabilities."""
    elems = 4 * B * nh * T * hs + (2 * B * nh * T * T if scores_in_memory else 0)
    return float(elems * itemsize(dtype))


def _check_sizes(model, B, T) -> None:
    for name, v in (("B", B), ("T", T)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"{name} must be a positive int, got {v!r}")
    if not hasattr(model, "blocks") or not hasattr(model, "wte"):
        raise TypeError(f"model must be an andrea_edu.model.AndreaModel, got {type(model).__name__}")
    if T > model.wpe.shape[0]:
        raise ValueError(f"T={T} exceeds the model's block_size={model.wpe.shape[0]}")


def qkv_is_fused(model, layer: int = 0) -> bool:
    """True when the layer's Q, K, V projections are one [C, 3C] matrix (one matmul)."""
    c_attn = getattr(model.blocks[layer].attn, "c_attn", None)
    return c_attn is not None and tuple(c_attn.shape) == (c_attn.shape[0], 3 * c_attn.shape[0])


def layer_steps(model, B: int, T: int, layer: int = 0, dtype=None) -> list[Step]:
    """The 14 steps of one layer as `block_in_steps` runs them, costed at batch B, length T.

    dtype: the dtype the bytes are counted in (default: the model's parameters').
    """
    _check_sizes(model, B, T)
    if not (isinstance(layer, int) and 0 <= layer < len(model.blocks)):
        raise ValueError(f"layer must be an int in 0..{len(model.blocks) - 1}, got {layer!r}")
    blk = model.blocks[layer]
    attn, mlp = blk.attn, blk.mlp
    if not qkv_is_fused(model, layer):
        raise ValueError(f"blocks.{layer}.attn has no fused c_attn [C, 3C]; got "
                         f"{getattr(getattr(attn, 'c_attn', None), 'shape', None)}")
    C, C3 = attn.c_attn.shape  # (C, 3C)
    Cm = mlp.W_in.shape[1]  # MLP hidden width, 4C
    nh = attn.n_head
    hs = C // nh
    N, isz = B * T, itemsize(dtype or attn.c_attn.dtype)
    p = f"blocks.{layer}."
    x, x3, x4 = (B, T, C), (B, T, C3), (B, T, Cm)
    ln = dict(flops=8.0 * N * C, bytes=float((2 * N * C + 2 * C) * isz))
    dt = dtype or attn.c_attn.dtype

    def mm(m, n, k):
        return dict(flops=matmul_flops(m, n, k), bytes=matmul_bytes(m, n, k, dt))

    rows = [
        ("ln_1", (("x", x),), x, ln, p + "ln_1", "block.ln_1(x)"),
        ("qkv", (("x", x), ("c_attn", (C, C3))), x3, mm(N, C3, C), p + "attn.c_attn", "x @ c_attn"),
        ("split_qkv", (("qkv", x3),), x, dict(flops=0.0, bytes=0.0), "", "qkv.split(C, dim=2)"),
        ("view_heads", (("q, k, v", x),), (B, T, nh, hs), dict(flops=0.0, bytes=0.0), "",
         "t.view(B, T, nh, hs)"),
        ("transpose", (("q, k, v", (B, T, nh, hs)),), (B, nh, T, hs), dict(flops=0.0, bytes=0.0),
         "", "t.transpose(1, 2)"),
        ("attention", tuple((n, (B, nh, T, hs)) for n in "qkv"), (B, nh, T, hs),
         dict(flops=attention_flops(B, nh, T, hs, CAUSAL),
              bytes=attention_bytes(B, nh, T, hs, dt)), "",
         f"reference_attention(q, k, v, causal={CAUSAL})" if attn.backend == "reference" else
         f"attention(q, k, v, causal={CAUSAL}, backend={attn.backend!r})"),
        ("concat", (("y", (B, nh, T, hs)),), x, dict(flops=0.0, bytes=float(2 * N * C * isz)), "",
         "merge_heads(y)"),
        ("W_O", (("y", x), ("W_O", tuple(attn.W_O.shape))), x, mm(N, C, C), p + "attn.W_O",
         "y @ W_O"),
        ("residual_1", (("x", x), ("a", x)), x, dict(flops=float(N * C), bytes=float(3 * N * C * isz)),
         "", "x + a"),
        ("ln_2", (("x", x),), x, ln, p + "ln_2", "block.ln_2(x)"),
        ("mlp_up", (("x", x), ("W_in", (C, Cm))), x4, mm(N, Cm, C), p + "mlp.W_in", "h @ W_in"),
        ("gelu", (("u", x4),), x4, dict(flops=8.0 * N * Cm, bytes=float(2 * N * Cm * isz)), "",
         "F.gelu(u)"),
        ("mlp_down", (("u", x4), ("W_out", (Cm, C))), x, mm(N, C, Cm), p + "mlp.W_out", "u @ W_out"),
        ("residual_2", (("x", x), ("m", x)), x, dict(flops=float(N * C), bytes=float(3 * N * C * isz)),
         "", "x + m"),
    ]
    return [Step(name, layer, ins, out, cost["flops"], cost["bytes"], mod, op)
            for name, ins, out, cost, mod, op in rows]


def model_steps(model, B: int, T: int, dtype=None) -> list[Step]:
    """Every step of one forward pass: embeddings, n_layer x 14 layer steps, ln_f, LM head.

    Works on a model built with device="meta" (shapes only, no memory): ANDREA-120M in ms.
    """
    _check_sizes(model, B, T)
    V, C = model.wte.shape  # (vocab, C)
    dt = dtype or model.wte.dtype
    N, isz = B * T, itemsize(dt)
    steps = [Step("embed", None, (("idx", (B, T)), ("wte", (V, C)), ("wpe", tuple(model.wpe.shape))),
                  (B, T, C), float(N * C), float(3 * N * C * isz), "wte, wpe", "wte[idx] + wpe[:T]")]
    for i in range(len(model.blocks)):
        steps += layer_steps(model, B, T, i, dt)
    steps.append(Step("ln_f", None, (("x", (B, T, C)),), (B, T, C), 8.0 * N * C,
                      float((2 * N * C + 2 * C) * isz), "ln_f", "ln_f(x)"))
    steps.append(Step("lm_head", None, (("x", (B, T, C)), ("wteᵀ", (C, V))), (B, T, V),
                      matmul_flops(N, V, C), matmul_bytes(N, V, C, dt), "wte", "x @ wte.t()"))
    return steps


def five_steps(model, B: int, T: int, layer: int = 0, dtype=None) -> list[Step]:
    """The source's five steps of one layer: Q, K, V projections (three [C, C] matmuls; the model
    fuses them into its one c_attn matmul), the attention kernel, and the W_O matmul."""
    st = {s.name: s for s in layer_steps(model, B, T, layer, dtype)}
    C = st["W_O"].inputs[1][1][0]
    x = st["ln_1"].output
    dt = dtype or model.wte.dtype
    qkv = [Step(f"{n.lower()}_proj", layer, (("x", x), (f"W_{n}", (C, C))), x, matmul_flops(B * T, C, C),
                matmul_bytes(B * T, C, C, dt), f"blocks.{layer}.attn.c_attn[:, {i * C}:{(i + 1) * C}]",
                f"x @ W_{n}") for i, n in enumerate("QKV")]
    return qkv + [st["attention"], st["W_O"]]


def sum_by(pairs, by: str = "group") -> dict:
    """Sum the values of (step name, value) pairs by "group" (GROUPS order) or by step "name"
    (STEP_INFO order); only the groups or names present. The one grouping that totals and
    pipeline.timing's StepTiming.ms both use."""
    if by not in ("group", "name"):
        raise ValueError(f"by must be 'group' or 'name', got {by!r}")
    out = dict.fromkeys(GROUPS if by == "group" else tuple(STEP_INFO), 0.0)
    present = set()
    for name, value in pairs:
        key = STEP_INFO[name][1] if by == "group" else name
        out[key] += value
        present.add(key)
    return {k: v for k, v in out.items() if k in present}


def totals(steps, by: str = "group", field: str = "flops") -> dict:
    """Sum `field` ("flops" or "bytes") of the steps by "group" (GROUPS order) or by "name"."""
    if field not in ("flops", "bytes"):
        raise ValueError(f"field must be 'flops' or 'bytes', got {field!r}")
    return sum_by(((s.name, getattr(s, field)) for s in steps), by)


def _check_lengths(name: str, values) -> list[int]:
    """`values` as a list of positive ints; one line naming the parameter otherwise."""
    ok = isinstance(values, (list, tuple)) and len(values) > 0 and all(
        isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in values)
    if not ok:
        raise ValueError(f"{name} must be a non-empty list of positive ints, got {values!r}")
    return list(values)


def kernel_vs_projections(cfg, lengths, B: int = 1) -> list[dict]:
    """One layer's attention-kernel FLOPs against its Q, K, V projections' (the fused c_attn
    matmul) at each sequence length of `lengths` (chapter "The final picture", exercise 1).

    A formula on a meta model (nothing runs); a length beyond cfg.block_size is counted as if
    the context were that long, and flagged. Returns [{"T", "attention", "projections",
    "ratio", "beyond_block_size"}]."""
    from andrea_edu.model import AndreaModel

    Ts = _check_lengths("lengths", lengths)
    if isinstance(B, bool) or not isinstance(B, int) or B < 1:
        raise ValueError(f"B must be a positive int, got {B!r}")
    longest = max(cfg.block_size, *Ts)
    meta = AndreaModel(cfg.replace(block_size=longest), device="meta")  # shapes only
    rows = []
    for T in Ts:
        st = {s.name: s for s in layer_steps(meta, B, T)}
        rows.append({"T": T, "attention": st["attention"].flops, "projections": st["qkv"].flops,
                     "ratio": st["attention"].flops / st["qkv"].flops,
                     "beyond_block_size": T > cfg.block_size})
    return rows


def qkv_intensity(cfg, tokens, dtype=torch.bfloat16) -> list[dict]:
    """The fused c_attn matmul [B*T, C] . [C, 3C] for each token count B*T in `tokens`: its
    FLOPs, the least bytes it moves in `dtype` and their ratio (chapter "The final picture",
    exercise 2). Returns [{"tokens", "flops", "bytes", "intensity"}]."""
    Ns = _check_lengths("tokens", tokens)
    itemsize(dtype)  # a torch.dtype, or one line saying so
    C = cfg.d_model
    return [{"tokens": N, "flops": matmul_flops(N, 3 * C, C), "bytes": matmul_bytes(N, 3 * C, C, dtype),
             "intensity": matmul_flops(N, 3 * C, C) / matmul_bytes(N, 3 * C, C, dtype)} for N in Ns]


# ---------------------------------------------------------------- the forward pass, step by step
def block_in_steps(block, x, mark, layer: int = 0):
    """`model.Block.forward`, one step at a time: after each step, `mark(layer, name, out,
    **info)` sees its result and returns it (a timer, a tracer, or `no_mark`). Same ops in the
    same order as the model, so the result is bit-identical (tests/test_pipeline.py)."""
    attn, mlp = block.attn, block.mlp
    B, T, C = x.shape
    nh = attn.n_head
    h = mark(layer, "ln_1", block.ln_1(x))  # (B, T, C)
    qkv = mark(layer, "qkv", h @ attn.c_attn)  # (B, T, 3C): Q, K, V in one matmul
    q, k, v = mark(layer, "split_qkv", qkv.split(C, dim=2))  # 3 x (B, T, C), views
    q, k, v = mark(layer, "view_heads", tuple(t.view(B, T, nh, C // nh) for t in (q, k, v)))  # 3 x (B, T, nh, hs)
    q, k, v = mark(layer, "transpose", tuple(t.transpose(1, 2) for t in (q, k, v)))  # 3 x (B, nh, T, hs)
    if isinstance(attn.attention, Backend):  # the dispatcher: it also says which backend ran, why
        y, decision = attn.attention.with_decision(q, k, v, causal=CAUSAL)
        y = mark(layer, "attention", y, decision=decision)  # (B, nh, T, hs)
    else:                                    # a plain callable, reference_attention by default
        y = mark(layer, "attention", attn.attention(q, k, v, causal=CAUSAL))  # (B, nh, T, hs)
    y = mark(layer, "concat", merge_heads(y))  # (B, T, C), a copy
    a = mark(layer, "W_O", y @ attn.W_O)  # (B, T, C)
    x = mark(layer, "residual_1", x + a)  # (B, T, C)
    h = mark(layer, "ln_2", block.ln_2(x))  # (B, T, C)
    u = mark(layer, "mlp_up", h @ mlp.W_in)  # (B, T, 4C)
    u = mark(layer, "gelu", F.gelu(u))  # (B, T, 4C)
    m = mark(layer, "mlp_down", u @ mlp.W_out)  # (B, T, C)
    return mark(layer, "residual_2", x + m)  # (B, T, C)


def model_in_steps(model, idx, mark):
    """`model.AndreaModel.forward(idx)` (no targets) one step at a time; returns the logits."""
    if not isinstance(idx, torch.Tensor) or idx.dtype != torch.long or idx.dim() != 2:
        raise ValueError(f"idx must be a (batch, seq_len) torch.long tensor of token ids, got "
                         f"{type(idx).__name__} {getattr(idx, 'dtype', '')} "
                         f"{tuple(getattr(idx, 'shape', ()))}")
    B, T = idx.shape
    _check_sizes(model, B, T)
    V = model.wte.shape[0]
    if idx.numel() and (idx.min() < 0 or idx.max() >= V):
        raise ValueError(f"token ids must lie in 0..{V - 1} (vocab_size), got min "
                         f"{int(idx.min())}, max {int(idx.max())}")
    x = mark(None, "embed", model.wte[idx] + model.wpe[:T])  # (B, T, C)
    for i, block in enumerate(model.blocks):
        x = block_in_steps(block, x, mark, i)  # (B, T, C)
    x = mark(None, "ln_f", model.ln_f(x))  # (B, T, C)
    return mark(None, "lm_head", x @ model.wte.t())  # (B, T, vocab)


def no_mark(layer, name, out, **info):
    """The mark that does nothing: `model_in_steps(model, idx, no_mark)` is a plain forward."""
    return out
