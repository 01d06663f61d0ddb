"""Q/K/V projections three ways, splitting and merging heads, and the output projection W_O.

Introduced in the chapters "Three matrices per head, or one big matrix", "Naming the projections",
"Twelve vectors become one" and "The output projection W_O" (there also: how much of every output
dimension each head feeds, `head_shares` / `effective_heads`, on a random W_O and on a W_O built
to look trained, `synthetic_trained_w_o`).

Convention: the source's math, X . W, with every weight stored [in_features, out_features]:
  per head   W_Q^h, W_K^h, W_V^h : [d_model, head_dim], stacked as [n_head, d_model, head_dim]
  fused      W_Q, W_K, W_V       : [d_model, d_model]; columns h*hs:(h+1)*hs are W_Q^h
  GPT-2 style c_attn             : [d_model, 3*d_model] = [W_Q | W_K | W_V]
  output     W_O                 : [d_model, d_model]; rows h*hs:(h+1)*hs read head h
(torch.nn.Linear stores the transpose, [out, in]; we do not, so the book's formulas read as code.)
Names: B batch, T seq_len, C d_model, nh n_head, hs head_dim.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch


def _check(name: str, t: torch.Tensor, expected: tuple, what: str) -> None:
    """Shape check; `expected` holds ints or None (any size). Names expected and actual shapes."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    ok = t.dim() == len(expected) and all(e is None or e == s for e, s in zip(expected, t.shape))
    if not ok:
        shown = "[" + ", ".join("*" if e is None else str(e) for e in expected) + "]"
        raise ValueError(f"{name} must have shape {shown} ({what}), got {list(t.shape)}")


def _check_n_head(n_head: int, C: int) -> int:
    if isinstance(n_head, bool) or not isinstance(n_head, int) or n_head <= 0:
        raise ValueError(f"n_head must be a positive int, got {n_head!r}")
    if C % n_head:
        valid = ", ".join(str(d) for d in range(1, C + 1) if C % d == 0)
        raise ValueError(
            f"n_head={n_head} does not divide d_model={C} (head_dim would be {C / n_head:g}); "
            f"valid n_head: {valid}"
        )
    return C // n_head


# ---------------------------------------------------------------- heads: split and merge
def split_heads(x: torch.Tensor, n_head: int) -> torch.Tensor:
    """[B, T, C] -> [B, nh, T, hs]: a view, then a transpose (no copy)."""
    _check("x", x, (None, None, None), "[batch, seq_len, d_model]")
    B, T, C = x.shape
    hs = _check_n_head(n_head, C)
    return x.view(B, T, n_head, hs).transpose(1, 2)  # (B, nh, T, hs)


def merge_heads(x: torch.Tensor) -> torch.Tensor:
    """[B, nh, T, hs] -> [B, T, C]: concatenation of the heads along the feature axis."""
    _check("x", x, (None, None, None, None), "[batch, n_head, seq_len, head_dim]")
    B, nh, T, hs = x.shape
    return x.transpose(1, 2).reshape(B, T, nh * hs)  # (B, T, C)


def concat_heads(heads: list[torch.Tensor]) -> torch.Tensor:
    """The source's concat(head_1, ..., head_nh): a list of [B, T, hs] -> [B, T, nh*hs]."""
    if isinstance(heads, torch.Tensor) or not isinstance(heads, (list, tuple)):
        raise TypeError(f"heads must be a list of [batch, seq_len, head_dim] tensors, got "
                        f"{type(heads).__name__} (for one [B, nh, T, hs] tensor use merge_heads)")
    if not heads:
        raise ValueError("heads must be a non-empty list of [batch, seq_len, head_dim] tensors")
    _check("heads[0]", heads[0], (None, None, None), "[batch, seq_len, head_dim]")
    for i, h in enumerate(heads):
        _check(f"heads[{i}]", h, tuple(heads[0].shape), "every head the same [batch, seq_len, head_dim]")
    return torch.cat(heads, dim=-1)  # (B, T, nh*hs)


def reshape_without_transpose(x: torch.Tensor, n_head: int) -> torch.Tensor:
    """The trap: [B, T, C] reshaped straight to [B, nh, T, hs]. Shape right, contents wrong.

    Shown in the book to prove that the transpose in `split_heads` is required; never use it.
    """
    _check("x", x, (None, None, None), "[batch, seq_len, d_model]")
    B, T, C = x.shape
    _check_n_head(n_head, C)
    return x.reshape(B, n_head, T, C // n_head)  # (B, nh, T, hs) in shape only


# ---------------------------------------------------------------- weights: three layouts
def fused_to_per_head(W: torch.Tensor, n_head: int) -> torch.Tensor:
    """Fused [C, C] -> per head [nh, C, hs]: the column blocks of W, one per head."""
    _check("W", W, (None, None), "[d_model, d_model]")
    C = W.shape[0]
    _check("W", W, (C, C), "[d_model, d_model]")
    hs = _check_n_head(n_head, C)
    return W.view(C, n_head, hs).permute(1, 0, 2).contiguous()  # (nh, C, hs)


def per_head_to_fused(W_heads: torch.Tensor) -> torch.Tensor:
    """Per head [nh, C, hs] -> fused [C, nh*hs]: the heads' matrices side by side."""
    _check("W_heads", W_heads, (None, None, None), "[n_head, d_model, head_dim]")
    nh, C, hs = W_heads.shape
    return W_heads.permute(1, 0, 2).reshape(C, nh * hs)  # (C, C)


def fused_to_c_attn(W_Q: torch.Tensor, W_K: torch.Tensor, W_V: torch.Tensor) -> torch.Tensor:
    """Three fused [C, C] -> one GPT-2-style c_attn [C, 3C] = [W_Q | W_K | W_V]."""
    _check("W_Q", W_Q, (None, None), "[d_model, d_model]")
    C = W_Q.shape[0]
    for name, W in (("W_Q", W_Q), ("W_K", W_K), ("W_V", W_V)):
        _check(name, W, (C, C), "[d_model, d_model]")
    return torch.cat([W_Q, W_K, W_V], dim=1)  # (C, 3C)


def c_attn_to_fused(W_c_attn: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """c_attn [C, 3C] -> (W_Q, W_K, W_V), each [C, C] (views, no copy)."""
    _check("W_c_attn", W_c_attn, (None, None), "[d_model, 3*d_model]")
    C = W_c_attn.shape[0]
    _check("W_c_attn", W_c_attn, (C, 3 * C), "[d_model, 3*d_model]")
    return W_c_attn[:, :C], W_c_attn[:, C : 2 * C], W_c_attn[:, 2 * C :]


# ---------------------------------------------------------------- projections: three ways
def project_per_head(X, W_Q_heads, W_K_heads, W_V_heads):
    """The per-head view: 3 x nh small matmuls X . W^h, each [B, T, C] x [C, hs].

    Returns q, k, v as [B, nh, T, hs].
    """
    _check("X", X, (None, None, None), "[batch, seq_len, d_model]")
    C = X.shape[-1]
    out = []
    _check("W_Q_heads", W_Q_heads, (None, C, None), "[n_head, d_model, head_dim]")
    nh, hs = W_Q_heads.shape[0], W_Q_heads.shape[2]
    for name, Wh in (("W_Q_heads", W_Q_heads), ("W_K_heads", W_K_heads), ("W_V_heads", W_V_heads)):
        _check(name, Wh, (nh, C, hs), "[n_head, d_model, head_dim], as W_Q_heads")
        heads = [X @ Wh[h] for h in range(Wh.shape[0])]  # nh x (B, T, hs)
        out.append(torch.stack(heads, dim=1))  # (B, nh, T, hs)
    return tuple(out)


def project_fused(X, W_Q, W_K, W_V, n_head: int):
    """The fused view: 3 matmuls X . W, each [B, T, C] x [C, C], then split into heads."""
    _check("X", X, (None, None, None), "[batch, seq_len, d_model]")
    C = X.shape[-1]
    for name, W in (("W_Q", W_Q), ("W_K", W_K), ("W_V", W_V)):
        _check(name, W, (C, C), "[d_model, d_model]")
        if W.dtype != X.dtype:  # torch's matmul would raise deep inside, naming neither
            raise TypeError(f"{name}: dtype {W.dtype} differs from X's {X.dtype}; give one dtype")
    return tuple(split_heads(X @ W, n_head) for W in (W_Q, W_K, W_V))  # 3 x (B, nh, T, hs)


def project_c_attn(X, W_c_attn, n_head: int):
    """GPT-2 style: one matmul X . c_attn [C, 3C], split into q, k, v, then into heads."""
    _check("X", X, (None, None, None), "[batch, seq_len, d_model]")
    C = X.shape[-1]
    _check("W_c_attn", W_c_attn, (C, 3 * C), "[d_model, 3*d_model]")
    qkv = X @ W_c_attn  # (B, T, 3C)
    q, k, v = qkv.split(C, dim=2)  # 3 x (B, T, C)
    return split_heads(q, n_head), split_heads(k, n_head), split_heads(v, n_head)


# ---------------------------------------------------------------- the output projection
def output_projection(heads: torch.Tensor, W_O: torch.Tensor) -> torch.Tensor:
    """concat(heads) . W_O: [B, nh, T, hs] and [C, C] -> [B, T, C]."""
    _check("heads", heads, (None, None, None, None), "[batch, n_head, seq_len, head_dim]")
    C = heads.shape[1] * heads.shape[3]
    _check("W_O", W_O, (C, C), "[d_model, d_model] with d_model = n_head * head_dim")
    return merge_heads(heads) @ W_O  # (B, T, C)


def head_contributions(heads: torch.Tensor, W_O: torch.Tensor) -> torch.Tensor:
    """Each head's share of the output: head_h . W_O[rows of head h] -> [nh, B, T, C].

    Summed over heads it equals `output_projection(heads, W_O)`: concat . W_O is a sum of
    per-head matmuls, one per row block of W_O.
    """
    _check("heads", heads, (None, None, None, None), "[batch, n_head, seq_len, head_dim]")
    B, nh, T, hs = heads.shape
    _check("W_O", W_O, (nh * hs, nh * hs), "[d_model, d_model] with d_model = n_head * head_dim")
    W_O_blocks = W_O.view(nh, hs, nh * hs)  # (nh, hs, C): row block h reads head h
    return torch.einsum("bhtd,hdc->hbtc", heads, W_O_blocks)  # (nh, B, T, C)


def head_shares(contrib: torch.Tensor) -> torch.Tensor:
    """contrib [nh, B, T, C] (``projections.head_contributions``) -> [nh, C]: for each output
    dimension j, head h's share of sum_h ||contrib[h, :, :, j]||^2 (columns sum to 1)."""
    if not isinstance(contrib, torch.Tensor) or contrib.dim() != 4:
        raise ValueError(f"contrib must be a [n_head, batch, seq_len, d_model] tensor, got "
                         f"{getattr(contrib, 'shape', type(contrib).__name__)}")
    energy = contrib.double().pow(2).sum(dim=(1, 2))  # (nh, C)
    total = energy.sum(dim=0, keepdim=True)  # (1, C)
    if bool((total == 0).any()):
        raise ValueError("some output dimension receives nothing from any head: shares undefined")
    return energy / total  # (nh, C)


def effective_heads(shares: torch.Tensor) -> torch.Tensor:
    """1 / sum_h share^2 per output dimension [C]: n_head when all heads count equally, 1 when
    one head alone feeds it."""
    return 1.0 / shares.pow(2).sum(dim=0)  # (C,)


def synthetic_trained_w_o(d_model: int = 768, n_head: int = 12, seed: int = 0,
                          owners: int = 2, leak: float = 0.1) -> torch.Tensor:
    """A W_O built to look like a trained one (it is NOT trained): heads write at unequal scales
    (log-normal per head) and each output dimension reads mostly from `owners` heads (the other
    heads' weights there are scaled by `leak`). GPT-2-like base scale, std 0.02."""
    from andrea_edu.config import AndreaConfig
    hs = AndreaConfig(n_head=n_head, d_model=d_model).head_dim  # validates n_head and d_model
    if not 1 <= owners <= n_head:
        raise ValueError(f"owners must be in 1..{n_head} (n_head={n_head}), got {owners}")
    g = torch.Generator().manual_seed(seed)
    W = torch.randn(d_model, d_model, generator=g) * 0.02  # (C, C)
    scale = torch.exp(torch.randn(n_head, generator=g))  # (nh,)
    gain = torch.full((n_head, d_model), leak)  # (nh, C)
    for j in range(d_model):
        gain[torch.randperm(n_head, generator=g)[:owners], j] = 1.0
    per_row = (scale[:, None] * gain).repeat_interleave(hs, dim=0)  # (C, C): row block h
    return W * per_row


def check_head(head: int, n_head: int) -> int:
    """`head` if it names one of n_head heads (0..n_head-1), else ValueError naming the range."""
    if isinstance(head, bool) or not isinstance(head, int) or not 0 <= head < n_head:
        raise ValueError(f"head must be in 0..{n_head - 1} (n_head={n_head}), got {head!r}")
    return head


def zero_head(W_O: torch.Tensor, head: int, n_head: int) -> torch.Tensor:
    """A copy of W_O with head `head`'s row block set to zero: that head no longer reaches the output."""
    _check("W_O", W_O, (None, None), "[d_model, d_model]")
    C = W_O.shape[0]
    _check("W_O", W_O, (C, C), "[d_model, d_model]")
    hs = _check_n_head(n_head, C)
    check_head(head, n_head)
    W = W_O.clone()
    W[head * hs : (head + 1) * hs, :] = 0
    return W


def zero_head_columns(W: torch.Tensor, head: int, n_head: int) -> torch.Tensor:
    """A copy of a fused W_Q, W_K or W_V with head `head`'s column block set to zero (W_V: that
    head's values, hence its output, become zero)."""
    _check("W", W, (None, None), "[d_model, d_model]")
    C = W.shape[0]
    _check("W", W, (C, C), "[d_model, d_model]")
    hs = _check_n_head(n_head, C)
    check_head(head, n_head)
    W = W.clone()
    W[:, head * hs : (head + 1) * hs] = 0
    return W


@dataclass
class Projections:
    """The four attention matrices of one layer, fused layout, [d_model, d_model] each."""

    W_Q: torch.Tensor
    W_K: torch.Tensor
    W_V: torch.Tensor
    W_O: torch.Tensor
    n_head: int

    @classmethod
    def random(cls, d_model: int, n_head: int, seed: int = 0, dtype=torch.float32) -> "Projections":
        """GPT-2-like init (normal, std 0.02), reproducible from `seed`."""
        _check_n_head(n_head, d_model)
        g = torch.Generator().manual_seed(seed)
        W = [torch.randn(d_model, d_model, generator=g, dtype=dtype) * 0.02 for _ in range(4)]
        return cls(W[0], W[1], W[2], W[3], n_head=n_head)

    @property
    def c_attn(self) -> torch.Tensor:
        return fused_to_c_attn(self.W_Q, self.W_K, self.W_V)

    def per_head(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(W_Q^h, W_K^h, W_V^h) stacked over heads, each [nh, C, hs]."""
        return (fused_to_per_head(self.W_Q, self.n_head), fused_to_per_head(self.W_K, self.n_head),
                fused_to_per_head(self.W_V, self.n_head))
