"""A small ANDREA in torch, built from the library's own pieces, that trains on a CPU.

Introduced in the chapters "Parameter count" (the module's parameters, counted by part, equal the
formula of `config.param_counts`) and "Why heads specialize" (trained on a synthetic corpus, with
its attention probabilities read through a hook point and its heads ablated one at a time).

The same code serves every configuration, from a 2-layer toy to `AndreaModel(ANDREA_120M)`:

    token ids (B, T) -> wte[idx] + wpe[pos]                                  (B, T, C)
    n_layer x  x = x + attn(ln_1(x));  x = x + mlp(ln_2(x))                  (B, T, C)
    ln_f, logits = x . wte^T  (the output head is the token embedding, tied) (B, T, vocab)

attn is the library's path, with weights stored [in_features, out_features] so X . W reads as code:
  q, k, v = projections.project_c_attn(x, c_attn, nh)   c_attn [C, 3C] = [W_Q | W_K | W_V]
  y = attn(q, k, v, causal=True)   reference_attention unless another is given (B, nh, T, hs)
  out = projections.output_projection(y, W_O)           W_O [C, C]; rows h*hs:(h+1)*hs read head h
mlp: GELU(x . W_in) . W_out with W_in [C, 4C], W_out [4C, C]. No linear layer has a bias (the
source counts attention as exactly 4 x d_model^2); each LayerNorm has a weight and a bias.
With cfg.bias (GPT-2, loaded by andrea_lab/gpt2_small.py) c_attn, W_O, W_in and W_out carry biases b_attn,
b_O, b_in, b_out; cfg.gelu="tanh" is GPT-2's GELU; cfg.layer_norm_eps every LayerNorm's eps.
Hook points (as TransformerLens names them): `with model.hooks({"attn.probs": fn}):` calls
fn(layer, probs) in every forward, probs (B, nh, T, T) the layer's detached attention probabilities.
The attention a model runs is a value, not a name: `AndreaModel(cfg)` runs the plain
`attention.reference_attention`; a chapter that runs the kernels passes the dispatcher's
`AndreaModel(cfg, attn=dispatch.Backend("auto"))`; any callable (q, k, v, causal) -> y will do,
and `model.backend` is its name ("reference", "auto", a function's __name__).
Names: B batch, T seq_len, C d_model, nh n_head, hs head_dim, L n_layer.
"""
from __future__ import annotations

import contextlib
import functools
import math
from collections.abc import Callable, Iterator, Mapping
from typing import cast, overload

import torch
import torch.nn as nn
import torch.nn.functional as F

from andrea_edu.attention import reference_attention, softmax_scores
from andrea_edu.config import AndreaConfig, param_counts
from andrea_edu.projections import output_projection, project_c_attn, zero_head

# The keys of `ParamCounts.by_part()`, and which parameter names belong to each.
PART_ATTENTION = "attention (W_Q, W_K, W_V, W_O)"
PART_MLP = "MLP"
PART_EMBEDDINGS = "embeddings (token + position)"
PART_LAYERNORM = "LayerNorms"

# What a model runs as its attention: (q, k, v, causal=...) -> y, each (B, nh, T, hs).
AttentionFn = Callable[..., torch.Tensor]

# What a hook (`AndreaModel.hooks`) may observe: name -> what fn(layer, tensor) receives.
HOOK_POINTS = {"attn.probs": "(B, nh, T, T) attention probabilities, detached"}


def part_of(name: str) -> str:
    """The part (a key of `ParamCounts.by_part()`) that the parameter called `name` belongs to."""
    if ".attn." in name:
        return PART_ATTENTION
    if ".mlp." in name:
        return PART_MLP
    if name in ("wte", "wpe"):
        return PART_EMBEDDINGS
    if name.startswith("ln_f.") or ".ln_" in name:
        return PART_LAYERNORM
    raise ValueError(f"parameter name={name!r} belongs to no part; known parts: attention "
                     f"('.attn.'), MLP ('.mlp.'), embeddings ('wte', 'wpe'), LayerNorms ('ln_')")


def attention_probabilities(q: torch.Tensor, k: torch.Tensor, causal: bool = True) -> torch.Tensor:
    """softmax(q k^T / sqrt(hs)) with the causal mask: the weights every head puts on every key.

    q, k: (B, nh, T, hs) -> (B, nh, T, T); row t (a query) sums to 1 over keys 0..t.
    The same arithmetic as `attention.reference_attention`, stopped before `@ v` (the test suite
    checks that probabilities @ v equals the attention output).
    """
    hs = q.shape[-1]
    att = (q.float() @ k.float().transpose(-2, -1)) / math.sqrt(hs)  # (B, nh, T, T)
    return softmax_scores(att, causal)  # (B, nh, T, T)


class SelfAttention(nn.Module):
    """Causal multi-head self-attention: fused c_attn [C, 3C], one attention call, W_O [C, C]."""

    b_attn: nn.Parameter | None  # registered with register_parameter (None without cfg.bias)
    b_O: nn.Parameter | None

    def __init__(self, cfg: AndreaConfig, attn: AttentionFn = reference_attention):
        super().__init__()
        C = cfg.d_model
        self.n_head, self.head_dim, self.attention = cfg.n_head, cfg.head_dim, attn
        self.c_attn = nn.Parameter(torch.empty(C, 3 * C))  # [W_Q | W_K | W_V], X . W
        self.W_O = nn.Parameter(torch.empty(C, C))  # concat(heads) . W_O
        # GPT-2's biases (cfg.bias): b_attn [3C] = [b_Q | b_K | b_V], b_O [C]; None otherwise.
        self.register_parameter("b_attn", nn.Parameter(torch.empty(3 * C)) if cfg.bias else None)
        self.register_parameter("b_O", nn.Parameter(torch.empty(C)) if cfg.bias else None)
        self.hooks: dict[str, Callable[[torch.Tensor], object]] = {}  # set by AndreaModel.hooks

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = project_c_attn(x, self.c_attn, self.n_head)  # 3 x (B, nh, T, hs)
        if self.b_attn is not None:
            b_q, b_k, b_v = self.b_attn.view(3, self.n_head, 1, self.head_dim)  # 3 x (nh, 1, hs)
            q, k, v = q + b_q, k + b_k, v + b_v  # (B, nh, T, hs) each
        y = self.attention(q, k, v, causal=True)  # (B, nh, T, hs)
        if "attn.probs" in self.hooks:  # computed only when hooked (AndreaModel.hooks)
            probs = attention_probabilities(q.detach(), k.detach())  # (B, nh, T, T)
            self.hooks["attn.probs"](probs)
        out = output_projection(y, self.W_O)  # (B, T, C)
        return out if self.b_O is None else out + self.b_O

    @property
    def backend(self) -> str:
        """The name of the attention this layer runs (`attention_name`)."""
        return attention_name(self.attention)


class MLP(nn.Module):
    """GELU(x . W_in) . W_out, hidden width mlp_ratio x d_model, no biases (GPT-2: with biases,
    tanh GELU)."""

    b_in: nn.Parameter | None  # registered with register_parameter (None without cfg.bias)
    b_out: nn.Parameter | None

    def __init__(self, cfg: AndreaConfig):
        super().__init__()
        self.W_in = nn.Parameter(torch.empty(cfg.d_model, cfg.d_mlp))
        self.W_out = nn.Parameter(torch.empty(cfg.d_mlp, cfg.d_model))
        self.register_parameter("b_in", nn.Parameter(torch.empty(cfg.d_mlp)) if cfg.bias else None)
        self.register_parameter("b_out", nn.Parameter(torch.empty(cfg.d_model)) if cfg.bias else None)
        self.approximate = "tanh" if cfg.gelu == "tanh" else "none"

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.b_in is None or self.b_out is None:  # both present or both absent (cfg.bias)
            return F.gelu(x @ self.W_in, approximate=self.approximate) @ self.W_out  # (B, T, C)
        h = F.gelu(x @ self.W_in + self.b_in, approximate=self.approximate)  # (B, T, 4C)
        return h @ self.W_out + self.b_out  # (B, T, C)


class Block(nn.Module):
    """Pre-LayerNorm transformer block: x + attn(ln_1(x)), then x + mlp(ln_2(x))."""

    def __init__(self, cfg: AndreaConfig, attn: AttentionFn = reference_attention):
        super().__init__()
        self.ln_1 = nn.LayerNorm(cfg.d_model, eps=cfg.layer_norm_eps)
        self.attn = SelfAttention(cfg, attn)
        self.ln_2 = nn.LayerNorm(cfg.d_model, eps=cfg.layer_norm_eps)
        self.mlp = MLP(cfg)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class Blocks(nn.ModuleList):
    """The model's layers: an nn.ModuleList (same state_dict keys) whose items are typed Block."""

    @overload
    def __getitem__(self, idx: slice) -> Blocks: ...
    @overload
    def __getitem__(self, idx: int) -> Block: ...

    def __getitem__(self, idx):
        return super().__getitem__(idx)

    def __iter__(self) -> Iterator[Block]:
        return cast(Iterator[Block], super().__iter__())  # ModuleList types its items as Module


def attention_name(attn: AttentionFn) -> str:
    """A readable name for an attention callable: "reference" for `reference_attention`, its
    `name` when it has one as a str (the dispatcher's Backend: "auto", "sdpa", ...), else its
    function name."""
    if attn is reference_attention:
        return "reference"
    name = getattr(attn, "name", None)
    return name if isinstance(name, str) else getattr(attn, "__name__", type(attn).__name__)


def _check_attn(attn) -> AttentionFn:
    """`attn`, or reference_attention for None; one line when it is not callable (a backend
    name among them: the model takes the callable, e.g. the dispatcher's Backend("sdpa"))."""
    if attn is None:
        return reference_attention
    if isinstance(attn, str):
        raise TypeError(f"attn={attn!r} is a name; pass a callable (q, k, v, causal) -> y: None "
                        f"(reference_attention) or andrea_edu.dispatch.Backend({attn!r})")
    if not callable(attn):
        raise TypeError(f"attn={attn!r} is not callable; allowed: None (reference_attention) or "
                        f"a callable (q, k, v, causal) -> y such as andrea_edu.dispatch.Backend")
    return attn


class AndreaModel(nn.Module):
    """A GPT-style ANDREA: see the module docstring. `AndreaModel(ANDREA_120M)` has exactly
    `param_counts(ANDREA_120M).total` parameters.

    attn: the attention every layer runs, a callable (q, k, v, causal) -> y; None (the default)
        is `reference_attention` (plain torch, supports backward). The dispatcher's
        `dispatch.Backend(name)` runs a kernel backend (forward-only; the CUDA ones need CUDA
        tensors). `model.backend` is its name.
    seed: initialisation is reproducible from it (GPT-2's: normal std 0.02, the two projections
        that write into the residual stream, W_O and W_out, scaled by 1/sqrt(2 n_layer)).
    device: where the parameters live. device="meta" allocates nothing and skips the
        initialisation: the shapes, hence the parameter counts, of ANDREA-120M in milliseconds
        (on the CPU, ANDREA-120M takes about 2 s, mostly allocating and filling 0.5 GB).
    """

    def __init__(self, cfg: AndreaConfig, attn: AttentionFn | None = None, seed: int = 0,
                 device: str | torch.device = "cpu"):
        super().__init__()
        if not isinstance(cfg, AndreaConfig):
            raise TypeError(f"cfg must be an AndreaConfig, got {type(cfg).__name__}")
        attn = _check_attn(attn)  # before allocating the weights (seconds for ANDREA-120M)
        if not isinstance(seed, int) or isinstance(seed, bool) or seed < 0:
            raise TypeError(f"seed={seed!r} must be an int >= 0 (it seeds the initialisation)")
        try:
            dev = torch.device(device)
        except (RuntimeError, TypeError):
            dev = None
        if dev is None or dev.type not in ("cpu", "cuda", "meta"):
            raise ValueError(f"device={device!r} is not a device this model is built on; one of "
                             f"'cpu', 'cuda' (or 'cuda:N'), 'meta'")
        if dev.type == "cuda" and not torch.cuda.is_available():
            raise ValueError(f"device={device!r}: torch sees no CUDA GPU here; use 'cpu'")
        self.cfg = cfg
        C = cfg.d_model
        with torch.device(device):
            self.wte = nn.Parameter(torch.empty(cfg.vocab_size, C))  # token embedding = head
            self.wpe = nn.Parameter(torch.empty(cfg.block_size, C))  # learned positions
            self.blocks = Blocks(Block(cfg, attn) for _ in range(cfg.n_layer))
            self.ln_f = nn.LayerNorm(C, eps=cfg.layer_norm_eps)
        if torch.device(device).type != "meta":
            self.reset_parameters(seed)

    @torch.no_grad()
    def reset_parameters(self, seed: int = 0) -> None:
        """GPT-2 initialisation, in place, from a private generator (global RNG untouched)."""
        g = torch.Generator().manual_seed(seed)
        residual_std = 0.02 / math.sqrt(2 * self.cfg.n_layer)
        for name, p in self.named_parameters():
            if ".ln_" in name or name.startswith("ln_f"):
                p.fill_(1.0 if name.endswith("weight") else 0.0)
            elif name.endswith(("b_attn", "b_O", "b_in", "b_out")):
                p.zero_()  # GPT-2's biases start at zero
            else:
                std = residual_std if name.endswith(("W_O", "W_out")) else 0.02
                p.normal_(0.0, std, generator=g)

    @property
    def backend(self) -> str:
        """The name of the attention every layer runs (`attention_name`)."""
        return self.blocks[0].attn.backend

    @property
    def attention(self) -> AttentionFn:
        """The attention callable every layer runs."""
        return self.blocks[0].attn.attention

    def set_attention(self, attn: AttentionFn | None) -> None:
        """Run `attn` in every layer (None: reference_attention); refused as in __init__."""
        attn = _check_attn(attn)
        for b in self.blocks:
            b.attn.attention = attn

    # ------------------------------------------------------------------ forward
    def hidden(self, idx: torch.Tensor) -> torch.Tensor:
        """Token ids (B, T) -> final hidden states after ln_f, (B, T, C)."""
        if not isinstance(idx, torch.Tensor) or idx.dtype != torch.long or idx.dim() != 2:
            raise ValueError(f"idx must be a (batch, seq_len) torch.long tensor of token ids, got "
                             f"{type(idx).__name__} {getattr(idx, 'dtype', '')} "
                             f"{tuple(getattr(idx, 'shape', ()))}")
        B, T = idx.shape
        if not 1 <= T <= self.cfg.block_size:
            raise ValueError(f"idx has seq_len T={T}; T must be in 1..block_size="
                             f"{self.cfg.block_size}")
        if B < 1:
            raise ValueError(f"idx has batch B={B}; B must be >= 1")
        if idx.numel() and (idx.min() < 0 or idx.max() >= self.cfg.vocab_size):
            raise ValueError(f"token ids must lie in 0..{self.cfg.vocab_size - 1} (vocab_size), "
                             f"got min {int(idx.min())}, max {int(idx.max())}")
        x = self.wte[idx] + self.wpe[:T]  # (B, T, C)
        for block in self.blocks:
            x = block(x)  # (B, T, C)
        return self.ln_f(x)  # (B, T, C)

    IGNORE = -100  # a target that takes no part in the loss (F.cross_entropy's ignore_index)

    def _check_targets(self, idx, targets, need_one: bool) -> None:
        """One line unless targets is a long tensor shaped like idx, each a token id or IGNORE,
        and (for the mean loss) at least one not IGNORE."""
        if not isinstance(targets, torch.Tensor) or targets.dtype != torch.long:
            raise TypeError(f"targets must be a torch.long tensor of token ids, got "
                            f"{type(targets).__name__} {getattr(targets, 'dtype', '')}")
        if not isinstance(idx, torch.Tensor) or targets.shape != idx.shape:
            raise ValueError(f"targets.shape={tuple(targets.shape)} must equal idx.shape="
                             f"{tuple(getattr(idx, 'shape', ()))}")
        if targets.numel():
            ok = (targets == self.IGNORE) | ((targets >= 0) & (targets < self.cfg.vocab_size))
            if not bool(ok.all()):
                bad = int(targets[~ok][0])
                raise ValueError(f"targets hold {bad}; allowed: token ids 0..{self.cfg.vocab_size - 1}"
                                 f" (vocab_size) or {self.IGNORE} (ignored)")
            if need_one and bool((targets == self.IGNORE).all()):
                raise ValueError(f"every target is {self.IGNORE} (ignored): the mean loss over "
                                 f"no position is undefined; keep at least one target")

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None):
        """(logits (B, T, vocab), mean cross-entropy over all positions or None). targets:
        (B, T) token ids, IGNORE (-100) for positions left out of the mean (not all of them)."""
        if targets is not None:
            self._check_targets(idx, targets, need_one=True)
        logits = self.hidden(idx) @ self.wte.t()  # (B, T, vocab): tied output head
        if targets is None:
            return logits, None
        return logits, F.cross_entropy(logits.flatten(0, 1), targets.flatten())

    def per_position_loss(self, idx: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """Cross-entropy of each next-token prediction, (B, T), in nats (for per-pattern losses);
        0 at IGNORE targets."""
        self._check_targets(idx, targets, need_one=False)
        logits, _ = self(idx)  # (B, T, vocab)
        B, T = idx.shape
        return F.cross_entropy(logits.flatten(0, 1), targets.flatten(), reduction="none").view(B, T)

    # ------------------------------------------------------------------ inspection
    @contextlib.contextmanager
    def hooks(self, fns: Mapping[str, Callable[[int, torch.Tensor], object]]):
        """Within the block, every forward calls fns[name](layer, tensor) at each layer's hook
        point `name` (a key of HOOK_POINTS); the hooks in place before are restored on exit.
        "attn.probs" gets the (B, nh, T, T) probabilities recomputed beside the attention call
        (a backend such as a CUDA kernel never materialises them)."""
        for name, fn in fns.items():
            if name not in HOOK_POINTS or not callable(fn):
                raise ValueError(f"hooks: {name!r} -> {type(fn).__name__}; allowed: a hook point "
                                 f"of {list(HOOK_POINTS)} mapped to a callable fn(layer, tensor)")
        before = [b.attn.hooks for b in self.blocks]
        for i, b in enumerate(self.blocks):
            b.attn.hooks = {**b.attn.hooks, **{n: functools.partial(f, i) for n, f in fns.items()}}
        try:
            yield self
        finally:
            for b, h in zip(self.blocks, before):
                b.attn.hooks = h

    @contextlib.contextmanager
    def record(self, name: str = "attn.probs"):
        """`hooks` that keep what hook point `name` sees: yields a list, one entry per layer,
        None until a forward has run, then that layer's tensor from the latest forward."""
        store: list = [None] * len(self.blocks)
        with self.hooks({name: store.__setitem__}):
            yield store

    def attention_maps(self, idx: torch.Tensor) -> torch.Tensor:
        """Attention probabilities of every layer and head for `idx`: (L, B, nh, T, T)."""
        with torch.no_grad(), self.record("attn.probs") as maps:
            self(idx)
        return torch.stack(maps)  # (L, B, nh, T, T)

    @contextlib.contextmanager
    def ablate(self, heads):
        """Temporarily zero W_O's row block of each (layer, head) in `heads`: those heads no longer
        reach the residual stream. The weights are restored on exit, even after an exception."""
        heads = [tuple(h) for h in heads]
        L, nh = self.cfg.n_layer, self.cfg.n_head
        for layer, head in heads:
            if not (isinstance(layer, int) and 0 <= layer < L):
                raise ValueError(f"layer={layer!r} must be an int in 0..{L - 1} (n_layer={L})")
            if not (isinstance(head, int) and 0 <= head < nh):
                raise ValueError(f"head={head!r} must be an int in 0..{nh - 1} (n_head={nh})")
        saved = {layer: self.blocks[layer].attn.W_O.detach().clone() for layer, _ in heads}
        try:
            with torch.no_grad():
                for layer, head in heads:
                    W_O = self.blocks[layer].attn.W_O
                    W_O.copy_(zero_head(W_O.detach(), head, nh))
            yield self
        finally:
            with torch.no_grad():
                for layer, W in saved.items():
                    self.blocks[layer].attn.W_O.copy_(W)


def count_parameters(model: nn.Module) -> int:
    """Number of distinct parameters (a tied weight counts once)."""
    return sum(p.numel() for p in model.parameters())


def count_parameters_by_part(model: AndreaModel) -> dict[str, int]:
    """The module's parameters summed by part, with the keys (and order) of
    `param_counts(cfg).by_part()`; the "Parameter count" chapter sets the two side by side."""
    counts = dict.fromkeys(param_counts(model.cfg).by_part(), 0)
    for name, p in model.named_parameters():
        part = part_of(name)
        if part not in counts:
            raise RuntimeError(f"part {part!r} of parameter {name!r} is not a key of "
                               f"ParamCounts.by_part(): {list(counts)}")
        counts[part] += p.numel()
    return counts
