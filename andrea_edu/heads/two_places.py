"""Why one softmax cannot attend to two places at once: the worked example.

Introduced in the chapter "Why twelve heads, not one wider head". One query needs the values of
two keys, a and b, and the two values are of the same kind: features f_a, f_b in R^2 passed
through the same W_V. Both layouts below have d_model = 4; they differ only in the split:

  one head, head_dim 4   one softmax row w over the keys (it sums to 1); the output
                         sum_j w_j v_j depends on f_a and f_b only through w_a f_a + w_b f_b:
                         two vectors squeezed into one. Whatever split (w_a, w_b) the head
                         chooses, the best linear read-out of (f_a, f_b) loses half of their
                         variance: 2 of the 4 numbers are gone.
  two heads, head_dim 2  two softmax rows: head 0 puts its probability on a, head 1 on b; the
                         concatenated output is (f_a, f_b), read out exactly.

At one query a head computes `softmax(scores) @ V`, as `attention.reference_attention` does, with
the scores q . k^T / sqrt(head_dim) that its query and keys produce; `projections.concat_heads`
joins the heads.
`read_out_error` fits the best linear read-out by least squares on random features.

Two knobs for the chapter's exercises:
  target  what the query needs from the two keys (TARGETS): "both" features (f_a, f_b), their
          "sum" f_a + f_b (e.g. a successor that adds two digits), or their "difference".
  kinds   "same": both keys' features pass through the same W_V dimensions (the example above);
          "different": key b is of another kind, which W_V writes to the other two dimensions,
          so one head's value space holds both without overlap (KINDS).
"""
from __future__ import annotations

import math

import torch

from andrea_edu.projections import concat_heads

FOCUS = 40.0  # score gap between a chosen key and the others: softmax puts ~all mass there
TARGETS = ("both", "sum", "difference")
KINDS = ("same", "different")


def _check_choice(name: str, value, allowed: tuple) -> None:
    if value not in allowed:
        raise ValueError(f"{name}={value!r} is not one of {allowed}")


def focus_scores(T: int, wanted: dict[int, float]) -> torch.Tensor:
    """Scores (T,) whose softmax is `wanted` ({key: probability}, summing to 1) up to e^-40."""
    if abs(sum(wanted.values()) - 1) > 1e-9 or min(wanted.values()) <= 0:
        raise ValueError(f"wanted={wanted} must hold positive probabilities that sum to 1")
    s = torch.full((T,), -FOCUS)
    for k, p in wanted.items():
        s[k] = math.log(p)
    return s  # (T,)


def head(scores: torch.Tensor, values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """One head at one query: (softmax(scores) (T,), softmax(scores) @ values (N, hs))."""
    w = torch.softmax(scores, dim=-1)  # (T,): one probability per key, summing to 1
    return w, torch.einsum("t,nth->nh", w, values)  # (N, hs)


def layouts(features: torch.Tensor, a: int, b: int, split: float = 0.5,
            kinds: str = "same") -> dict:
    """Both layouts on features (N, T, 2). Returns {name: (weights (nh, T), output (N, 4))}.
    kinds="different": the one head's value of key b is (0, f_b), of every other key (f_j, 0)."""
    _check_choice("kinds", kinds, KINDS)
    N, T, F = features.shape
    if F != 2:
        raise ValueError(f"features must be (N, T, 2), got {tuple(features.shape)}")
    if not 0.0 < split < 1.0:
        raise ValueError(f"split={split} must lie strictly between 0 and 1")
    if kinds == "same":
        values = torch.cat([features, features], dim=-1)  # v_j = (f_j, f_j): 4 dims
    else:
        zero = torch.zeros_like(features)
        values = torch.cat([features, zero], dim=-1)  # (N, T, 4): v_j = (f_j, 0)
        values[:, b] = torch.cat([zero[:, b], features[:, b]], dim=-1)  # v_b = (0, f_b)
    w1, out1 = head(focus_scores(T, {a: split, b: 1 - split}), values)
    w_a, out_a = head(focus_scores(T, {a: 1.0}), features)  # (N, 2)
    w_b, out_b = head(focus_scores(T, {b: 1.0}), features)  # (N, 2)
    return {"one head (head_dim 4)": (w1[None], out1),  # (1, T), (N, 4)
            "two heads (head_dim 2)": (torch.stack([w_a, w_b]),  # (2, T)
                                       concat_heads([out_a[:, None], out_b[:, None]])[:, 0])}


def read_out_error(output: torch.Tensor, features: torch.Tensor, a: int, b: int,
                   target: str = "both") -> float:
    """Relative squared error of the best affine read-out of the target from `output` (N, 4):
    0 = recovered exactly; 0.5 = half of its variance lost; 1 = nothing recovered. target:
    "both" (f_a, f_b), "sum" f_a + f_b or "difference" f_a - f_b."""
    _check_choice("target", target, TARGETS)
    N = output.shape[0]
    fa, fb = features[:, a].double(), features[:, b].double()  # (N, 2) each
    wanted = {"both": lambda: torch.cat([fa, fb], dim=-1), "sum": lambda: fa + fb,
              "difference": lambda: fa - fb}[target]()  # (N, 4) or (N, 2)
    X = torch.cat([output.double(), torch.ones(N, 1, dtype=torch.float64)], dim=-1)  # (N, 5)
    coef = torch.linalg.lstsq(X, wanted).solution  # (5, 4) or (5, 2)
    resid = X @ coef - wanted
    return float(resid.pow(2).sum() / (wanted - wanted.mean(0)).pow(2).sum())


def two_places_table(splits=(0.5, 0.7, 0.9), T: int = 6, a: int = 1, b: int = 4,
                     n: int = 4000, seed: int = 0, target: str = "both",
                     kinds: str = "same") -> dict[str, float]:
    """{layout: read-out error of `target`}: the one head at several splits, and the two heads."""
    _check_choice("target", target, TARGETS)
    _check_choice("kinds", kinds, KINDS)
    g = torch.Generator().manual_seed(seed)
    feats = torch.randn(n, T, 2, generator=g)  # (N, T, 2)
    out = {}
    for sp in splits:
        _, o = layouts(feats, a, b, sp, kinds)["one head (head_dim 4)"]
        out[f"one head, {sp:.0%} on a / {1 - sp:.0%} on b"] = read_out_error(o, feats, a, b, target)
    _, o = layouts(feats, a, b, kinds=kinds)["two heads (head_dim 2)"]
    out["two heads, one key each"] = read_out_error(o, feats, a, b, target)
    return out
