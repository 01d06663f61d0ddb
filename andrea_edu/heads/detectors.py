"""Detectors for the source's three patterns on real text: per-head scores, baseline, ablation.

Introduced in the chapter "Heads on real text". The patterns and their labels come from
`heads.text_corpus` (parsed by Python's `tokenize`); the model is any `AndreaModel` (the real-text
model, the toy laboratory's, or GPT-2 small loaded into it) whose vocabulary the batch uses.

Definitions (p a pattern, l a layer, h a head, A the attention probabilities, Q_p the labelled
queries of p in the batch and kappa_p(t) the key each one designates):

score      S[p, l, h] = mean over t in Q_p of A[l, h, t, kappa_p(t)]: the probability that the
           head puts on the one key the pattern designates (as in the toy chapter).
baseline   U[p] = mean over t in Q_p of 1/(t+1): the score of uniform causal attention.
ratio      R[p, l, h] = S / U: how many times the uniform baseline the head reaches.
found      pattern p is found when its best head has R >= FOUND_RATIO (5). The verdict is
           "found" when the best R clears 5 by more than the score tolerance (expressed as a
           ratio), "not found" when it misses by more, and "within noise of the threshold"
           otherwise, so that no float noise (across CPUs, BLAS kernels, instruction sets) can
           flip it: the tolerance is `text_training.SCORE_TOL`, measured there.
ablation   D[l, h, p] = pattern loss with head (l, h)'s W_O row block zeroed minus the pattern
           loss of the intact model, on held-out (validation) windows; the pattern loss is the
           mean next-character cross-entropy over Q_p ("all": every position). Its standard error
           is over windows (each window's mean change), a sampling error, not a float error.
"""
from __future__ import annotations

import numpy as np
import torch

from ..env import check_real, check_scores
from ..model import AndreaModel
from .text_corpus import BRACKET, IDENT, PATTERN_NAMES, PATTERNS, PREV, TextBatch  # noqa: F401

FOUND_RATIO = 5.0
LOSS_KEYS = ("all",) + PATTERN_NAMES


def scores_from_maps(maps: torch.Tensor, batch: TextBatch) -> torch.Tensor:
    """maps (L, B, nh, T, T) -> S (3, L, nh); a pattern with no labelled query scores nan."""
    L, B, nh, T, _ = maps.shape
    by_query = maps.permute(1, 3, 4, 0, 2)  # (B, T, T, L, nh): [window, query, key]
    out = torch.full((len(PATTERNS), L, nh), float("nan"))
    for p in PATTERNS:
        b, t = torch.nonzero(batch.mask(p), as_tuple=True)  # labelled (window, query)
        if len(b):
            out[p] = by_query[b, t, batch.key[p, b, t]].mean(dim=0)  # (n, L, nh) -> (L, nh)
    return out


def baseline(batch: TextBatch) -> np.ndarray:
    """U (3,): the score of uniform causal attention, mean of 1/(t+1) over each pattern's queries."""
    T = batch.idx.shape[1]
    inv = 1.0 / (torch.arange(T, dtype=torch.float64) + 1)  # (T,)
    return np.array([float(inv.expand_as(batch.mask(p).double())[batch.mask(p)].mean())
                     if batch.mask(p).any() else float("nan") for p in PATTERNS])


@torch.no_grad()
def attention_maps(model: AndreaModel, batch: TextBatch, chunk: int = 32) -> torch.Tensor:
    """(L, B, nh, T, T) attention probabilities, computed `chunk` windows at a time."""
    return torch.cat([model.attention_maps(batch.idx[i: i + chunk])
                      for i in range(0, batch.idx.shape[0], chunk)], dim=1)


@torch.no_grad()
def head_scores(model: AndreaModel, batch: TextBatch, chunk: int = 32) -> torch.Tensor:
    """S (3, L, nh) without keeping every map at once."""
    tot: torch.Tensor | None = None
    n = torch.zeros(len(PATTERNS))
    for i in range(0, batch.idx.shape[0], chunk):
        sub = _slice(batch, i, i + chunk)
        w = torch.tensor([float(sub.mask(p).sum()) for p in PATTERNS])  # (3,)
        s = scores_from_maps(model.attention_maps(sub.idx), sub).nan_to_num(0.0)  # (3, L, nh)
        tot = s * w[:, None, None] if tot is None else tot + s * w[:, None, None]
        n += w
    if tot is None:
        raise ValueError("head_scores: the batch holds no windows (batch.idx has 0 rows)")
    out = tot / n[:, None, None]
    out[n == 0] = float("nan")
    return out


def _slice(batch: TextBatch, a: int, b: int) -> TextBatch:
    return TextBatch(idx=batch.idx[a:b], targets=batch.targets[a:b], key=batch.key[:, a:b],
                     where=batch.where[a:b])


def pattern_losses(per_position: torch.Tensor, batch: TextBatch) -> np.ndarray:
    """(4,) mean loss over every position, then over each pattern's queries (LOSS_KEYS)."""
    out = [float(per_position.mean())]
    for p in PATTERNS:
        m = batch.mask(p)
        out.append(float(per_position[m].mean()) if m.any() else float("nan"))
    return np.array(out)


@torch.no_grad()
def per_position_loss(model: AndreaModel, batch: TextBatch, heads=(), chunk: int = 64):
    """(B, T) next-character loss with the heads in `heads` ablated (W_O row blocks zeroed)."""
    with model.ablate(heads):
        return torch.cat([model.per_position_loss(batch.idx[i: i + chunk],
                                                  batch.targets[i: i + chunk])
                          for i in range(0, batch.idx.shape[0], chunk)])


def _window_means(per_pos: torch.Tensor, batch: TextBatch) -> np.ndarray:
    """(4, B): each window's mean loss over all positions and over each pattern (nan: none)."""
    rows = [per_pos.mean(dim=1)]
    for p in PATTERNS:
        m = batch.mask(p).float()
        rows.append((per_pos * m).sum(1) / m.sum(1))  # nan where a window has no label
    return torch.stack(rows).double().numpy()


@torch.no_grad()
def ablation(model: AndreaModel, batch: TextBatch) -> tuple[np.ndarray, np.ndarray]:
    """(D, SE): each (L, nh, 4), the pattern-loss increase when one head is ablated, and its
    standard error over windows (see the module docstring)."""
    L, nh = model.cfg.n_layer, model.cfg.n_head
    base_pos = per_position_loss(model, batch)
    base = pattern_losses(base_pos, batch)
    base_w = _window_means(base_pos, batch)
    D, SE = np.zeros((L, nh, 4)), np.zeros((L, nh, 4))
    for l in range(L):
        for h in range(nh):
            pos = per_position_loss(model, batch, [(l, h)])
            D[l, h] = pattern_losses(pos, batch) - base
            dw = _window_means(pos, batch) - base_w  # (4, B)
            for k in range(4):
                v = dw[k][~np.isnan(dw[k])]
                SE[l, h, k] = v.std(ddof=1) / np.sqrt(len(v)) if len(v) > 1 else np.nan
    return D, SE


def best_heads(scores) -> list[tuple[int, int]]:
    """For each pattern, the (layer, head) with the highest score; scores (3, L, nh)."""
    s = check_scores("scores", scores)
    out = []
    for p in range(s.shape[0]):
        layer, head = np.unravel_index(np.nanargmax(s[p]), s[p].shape)
        out.append((int(layer), int(head)))
    return out


def verdict(score: float, base: float, tol: float, ratio: float = FOUND_RATIO) -> str:
    """"found", "not found" or "within noise of the threshold": score vs ratio x base, with a
    margin of `tol` (an absolute score tolerance, >= 0) on either side; NaN score or base: not
    measured."""
    for name, v in (("score", score), ("base", base)):
        if isinstance(v, bool) or not isinstance(v, (int, float, np.floating, np.integer)):
            raise TypeError(f"{name}={v!r} must be a number (NaN: not measured), got "
                            f"{type(v).__name__}")
    tol = check_real("tol", tol, 0.0)
    ratio = check_real("ratio", ratio, 0.0)
    if not np.isfinite(score) or not np.isfinite(base):
        return "not measured (no labelled query)"
    if score >= ratio * base + tol:
        return "found"
    if score <= ratio * base - tol:
        return "not found"
    return "within noise of the threshold"


def summary(scores, base, D, SE, tol: float) -> list[dict]:
    """One dict per pattern: its best head, score, ratio to baseline, verdict, and what ablating
    that head costs the pattern (nats, with its standard error) and the other patterns."""
    s = np.asarray(scores)
    out = []
    for p, (l, h) in zip(PATTERNS, best_heads(s)):
        sc = float(s[p, l, h])
        carrier = tuple(int(i) for i in np.unravel_index(np.nanargmax(D[..., 1 + p]),
                                                         D.shape[:2]))
        out.append({"pattern": PATTERNS[p], "head": (l, h), "score": sc,
                    "baseline": float(base[p]), "ratio": sc / float(base[p]),
                    "verdict": verdict(sc, float(base[p]), tol),
                    "margin": sc - FOUND_RATIO * float(base[p]),
                    "ablation": float(D[l, h, 1 + p]), "ablation_se": float(SE[l, h, 1 + p]),
                    "ablation_all": float(D[l, h, 0]),
                    "carrier": carrier, "carrier_ablation": float(D[carrier][1 + p]),
                    "carrier_se": float(SE[carrier][1 + p])})
    return out


def claim_verdict(rows: list[dict]) -> str:
    """The source's empirical claim (heads for positional, syntactic and semantic patterns), rated
    from `summary` rows: "holds" when every pattern is found and the head found carries it (its
    ablation raises that pattern's loss by more than 2 standard errors); "holds with a caveat" when
    at least one is; "does not hold" when none is."""
    def shown(r):
        return r["verdict"] == "found" and r["ablation"] > 2 * r["ablation_se"]
    n = sum(shown(r) for r in rows)
    return "holds" if n == len(rows) else "holds with a caveat" if n else "does not hold"


def scores_verdict(scores, base, tol: float) -> str:
    """The same claim rated from scores alone (e.g. GPT-2 small, where ablating 144 heads is not
    run): "holds" when every pattern is found, "holds with a caveat" when some are, "does not
    hold" when none is."""
    s = np.asarray(scores)
    n = sum(verdict(float(np.nanmax(s[p])), float(base[p]), tol) == "found" for p in PATTERNS)
    return "holds" if n == len(PATTERNS) else "holds with a caveat" if n else "does not hold"
