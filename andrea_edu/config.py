"""Sizes of an ANDREA model, its presets, and exact parameter counts.

Introduced in the chapters "Three matrices per head, or one big matrix" and "Parameter count".

ANDREA is a GPT-style decoder: token + position embeddings, n_layer blocks of
(LayerNorm -> multi-head attention -> residual, LayerNorm -> MLP -> residual), a final LayerNorm,
and an output head tied to the token embedding. The linear layers carry no bias: the source counts
attention as 4 x d_model^2 per layer (W_Q, W_K, W_V, W_O and nothing else), so biases would break
its arithmetic. LayerNorms keep a weight and a bias (2 x d_model each).

The source gives d_model, n_head, head_dim and n_layer for ANDREA-120M and head_dim for
ANDREA-12M. Everything else below is our stated assumption, with its reason beside it.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass


def divisors(n: int) -> list[int]:
    """All positive divisors of n, ascending: the n_head values that split d_model evenly."""
    _check_positive_int("n", n)
    return [d for d in range(1, n + 1) if n % d == 0]


def _check_positive_int(name: str, value) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be a positive int, got {value!r} ({type(value).__name__})")
    if value <= 0:
        raise ValueError(f"{name} must be a positive int (>= 1), got {value}")


GELU_KINDS = ("exact", "tanh")


@dataclass(frozen=True)
class AndreaConfig:
    """The sizes of one ANDREA model.

    d_model = n_head x head_dim. Give d_model and n_head (head_dim is derived), or all three
    (they must agree). A wrong combination raises ValueError naming d_model, n_head and head_dim
    and listing the n_head values that work.
    """

    d_model: int = 768
    n_head: int = 12
    # None (the default) is replaced by d_model // n_head in __post_init__: after construction
    # head_dim is always an int, which is the type every reader of it sees.
    head_dim: int = None  # type: ignore[assignment]  # the "derive it" default, never kept
    n_layer: int = 12
    vocab_size: int = 50257
    block_size: int = 1024
    mlp_ratio: int = 4
    name: str = "custom"
    # GPT-2 compatibility (andrea_lab/gpt2_small.py loads GPT-2's weights with these set); the defaults are
    # ANDREA's: no linear biases (the source's 4 x d_model^2), exact erf GELU, LayerNorm eps 1e-5.
    bias: bool = False  # a bias on c_attn (3C), W_O (C), W_in (4C) and W_out (C), as GPT-2 has
    gelu: str = "exact"  # "exact" (erf) or "tanh" (GPT-2's approximation, "gelu_new")
    layer_norm_eps: float = 1e-5  # GPT-2's value too

    def __post_init__(self):
        for field in ("d_model", "n_head", "n_layer", "vocab_size", "block_size", "mlp_ratio"):
            _check_positive_int(field, getattr(self, field))
        if self.head_dim is not None:
            _check_positive_int("head_dim", self.head_dim)
        if not isinstance(self.bias, bool):
            raise TypeError(f"bias must be a bool, got {self.bias!r}")
        if self.gelu not in GELU_KINDS:
            raise ValueError(f"gelu must be one of {GELU_KINDS}, got {self.gelu!r}")
        if not (isinstance(self.layer_norm_eps, float) and 0 < self.layer_norm_eps < 1):
            raise ValueError(f"layer_norm_eps must be a float in (0, 1), got {self.layer_norm_eps!r}")
        valid = ", ".join(str(d) for d in divisors(self.d_model))
        if self.d_model % self.n_head != 0:
            raise ValueError(
                f"n_head={self.n_head} does not divide d_model={self.d_model}: head_dim = "
                f"d_model / n_head = {self.d_model / self.n_head:g} is not a whole number. "
                f"Valid n_head for d_model={self.d_model}: {valid}."
            )
        derived = self.d_model // self.n_head
        if self.head_dim is None:
            object.__setattr__(self, "head_dim", derived)
        elif self.head_dim != derived:
            raise ValueError(
                f"head_dim={self.head_dim} with n_head={self.n_head} gives "
                f"n_head x head_dim = {self.n_head * self.head_dim}, but d_model={self.d_model}: "
                f"they must be equal. For d_model={self.d_model} and n_head={self.n_head}, "
                f"head_dim must be {derived}; valid n_head values: {valid}."
            )

    def replace(self, **changes) -> "AndreaConfig":
        """A copy with some sizes changed; head_dim is re-derived unless given. An unknown
        field is a TypeError naming it and the fields there are."""
        fields = [f.name for f in dataclasses.fields(self)]
        unknown = sorted(set(changes) - set(fields))
        if unknown:
            raise TypeError(f"AndreaConfig.replace: unknown field(s) {', '.join(unknown)}; "
                            f"the fields are {', '.join(fields)}")
        if "head_dim" not in changes and ("d_model" in changes or "n_head" in changes):
            changes["head_dim"] = None
        if "name" not in changes and any(getattr(self, k) != v for k, v in changes.items() if k != "head_dim"):
            changes["name"] = "custom"  # a changed preset is no longer that preset
        return dataclasses.replace(self, **changes)

    @property
    def d_mlp(self) -> int:
        """Width of the MLP's hidden layer (mlp_ratio x d_model)."""
        return self.mlp_ratio * self.d_model


# ANDREA-120M: d_model 768, 12 heads of 64, 12 layers are the source's numbers. Vocabulary 50257
# and context 1024 are GPT-2 small's: the source does not give them, and ANDREA-120M has GPT-2
# small's shape otherwise, so we assume them. MLP 4 x d_model, as in GPT-2.
ANDREA_120M = AndreaConfig(
    d_model=768, n_head=12, head_dim=64, n_layer=12, vocab_size=50257, block_size=1024,
    name="ANDREA-120M",
)

# ANDREA-12M: head_dim 32 is the source's number. The rest is our assumption, chosen so the model
# keeps twelve heads and lands near 12M parameters: d_model = 12 x 32 = 384, 6 layers, a 4096-token
# vocabulary and a 512-token context.
ANDREA_12M = AndreaConfig(
    d_model=384, n_head=12, head_dim=32, n_layer=6, vocab_size=4096, block_size=512,
    name="ANDREA-12M",
)

PRESETS = {c.name: c for c in (ANDREA_120M, ANDREA_12M)}


def preset(name: str) -> AndreaConfig:
    """The preset called `name` (a key of PRESETS); one line naming the presets otherwise."""
    if name not in PRESETS:
        raise ValueError(f"name={name!r} is not a preset; the presets are {list(PRESETS)}")
    return PRESETS[name]


@dataclass(frozen=True)
class ParamCounts:
    """Exact parameter counts of one configuration, by part (weights tied: no separate LM head)."""

    attention_per_layer: int  # W_Q, W_K, W_V, W_O: 4 x d_model^2 (+ 4 x d_model with biases)
    mlp_per_layer: int  # W_in [d_model, d_mlp] + W_out [d_mlp, d_model] (+ d_mlp + d_model)
    layernorm_per_layer: int  # two LayerNorms, weight + bias each
    n_layer: int
    token_embedding: int  # vocab_size x d_model, shared with the output head
    position_embedding: int  # block_size x d_model
    final_layernorm: int  # weight + bias

    @property
    def attention(self) -> int:
        return self.n_layer * self.attention_per_layer

    @property
    def mlp(self) -> int:
        return self.n_layer * self.mlp_per_layer

    @property
    def layernorm(self) -> int:
        return self.n_layer * self.layernorm_per_layer + self.final_layernorm

    @property
    def embeddings(self) -> int:
        return self.token_embedding + self.position_embedding

    @property
    def total(self) -> int:
        return self.attention + self.mlp + self.layernorm + self.embeddings

    @property
    def attention_fraction(self) -> float:
        """Share of all parameters that sit in the attention projections."""
        return self.attention / self.total

    def by_part(self) -> dict[str, int]:
        """The four parts that add up to the total, for tables and figures."""
        return {
            "attention (W_Q, W_K, W_V, W_O)": self.attention,
            "MLP": self.mlp,
            "embeddings (token + position)": self.embeddings,
            "LayerNorms": self.layernorm,
        }


def param_counts(cfg: AndreaConfig) -> ParamCounts:
    """Parameter counts from the formula. `model.AndreaModel` counts a real nn.Module; they agree."""
    if not isinstance(cfg, AndreaConfig):
        hint = (f" (the preset: param_counts(PRESETS[{cfg!r}]))" if isinstance(cfg, str)
                and cfg in PRESETS else "")
        raise TypeError(f"cfg must be an AndreaConfig, got {type(cfg).__name__}{hint}")
    C = cfg.d_model
    b = 1 if cfg.bias else 0  # GPT-2's biases: c_attn 3C + W_O C; W_in d_mlp + W_out C
    return ParamCounts(
        attention_per_layer=4 * C * C + b * 4 * C,
        mlp_per_layer=2 * C * cfg.d_mlp + b * (cfg.d_mlp + C),
        layernorm_per_layer=2 * 2 * C,
        n_layer=cfg.n_layer,
        token_embedding=cfg.vocab_size * C,
        position_embedding=cfg.block_size * C,
        final_layernorm=2 * C,
    )


def attention_shapes(d_model: int, n_head: int, n_kv: int | None = None) -> dict[str, tuple[int, int]]:
    """The shapes, [in, out], of one layer's W_Q, W_K, W_V and W_O when n_kv key/value heads
    serve n_head query heads: grouped-query attention (Ainslie et al. 2023, "GQA"), in which each
    group of n_head / n_kv query heads shares one head of K and one of V. n_kv = n_head (the
    default) is ordinary multi-head attention, n_kv = 1 multi-query attention (Shazeer 2019).
    W_Q and W_O keep all n_head heads; W_K and W_V shrink to n_kv heads of head_dim columns.
    A bad n_head or n_kv raises ValueError naming the values that work."""
    hs = AndreaConfig(d_model=d_model, n_head=n_head).head_dim  # checks that n_head divides d_model
    n_kv = n_head if n_kv is None else n_kv
    if isinstance(n_kv, bool) or not isinstance(n_kv, int) or n_kv < 1 or n_head % n_kv:
        raise ValueError(f"n_kv={n_kv!r} must divide n_head={n_head} (every group the same size): "
                         f"n_kv in {', '.join(map(str, divisors(n_head)))}")
    return {"W_Q": (d_model, d_model), "W_K": (d_model, n_kv * hs), "W_V": (d_model, n_kv * hs),
            "W_O": (d_model, d_model)}
