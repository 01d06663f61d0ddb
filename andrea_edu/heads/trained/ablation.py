"""What a head does for the model: one head zeroed before W_O, and W_O's per-head contribution
(chapter "Why heads specialize").

The model's own task is sentence similarity: paraphrase pairs should score a higher cosine than
unrelated pairs. `separation` measures mean cosine of the committed paraphrase pairs, of unrelated
pairs (each first sentence against the second sentence of the pair `shift` places on), and their
gap. `ablate_heads` zeroes one head's output (its slice of concat(heads), i.e. its row block of
W_O) and re-measures the gap, for the heads asked about and for randomly drawn heads beside them:
a pattern head matters to the task only if removing it costs more than removing a random head.

    separation(model, pairs, ablate=(), shift=7) -> {"paraphrase", "unrelated", "gap"}
    ablate_heads(model, pairs, heads, n_random, seed) -> {"base", "heads", "random"}
    wo_shares(model, runs) -> (L, nh) each head's share of |concat . W_O| (rows sum to 1)
"""
from __future__ import annotations

import random

import numpy as np
import torch

from ...projections import head_contributions, output_projection
from .encoder import one_thread


def separation(model, pairs, ablate=(), shift: int = 7, cache: dict | None = None) -> dict:
    n = len(pairs)
    if n < 2 or shift % n == 0:
        raise ValueError(f"need at least 2 pairs and shift not a multiple of {n}, got shift={shift}")
    e = model.embed([a for a, _ in pairs] + [b for _, b in pairs], ablate, cache)  # (2n, C)
    a, b = e[:n], e[n:]
    para = (a * b).sum(-1)                                       # (n,) cosine of each pair
    unrel = (a * b.roll(-shift, dims=0)).sum(-1)                 # a_i against b_{i+shift}
    return {"paraphrase": float(para.mean()), "unrelated": float(unrel.mean()),
            "gap": float(para.mean() - unrel.mean())}


def ablate_heads(model, pairs, heads, n_random: int = 12, seed: int = 0) -> dict:
    """The gap with each of `heads` zeroed alone, and with each of n_random other heads (drawn
    with `seed`, without the named ones) zeroed alone."""
    L, nh = model.cfg.n_layer, model.cfg.n_head
    named = [tuple(h) for h in dict.fromkeys(tuple(h) for h in heads)]
    others = [(l, h) for l in range(L) for h in range(nh) if (l, h) not in named]
    drawn = random.Random(seed).sample(others, min(n_random, len(others)))
    cache: dict = {}                     # the unablated hidden states: layers l.. re-run only
    base = separation(model, pairs, cache=cache)
    return {"base": base,
            "heads": {lh: separation(model, pairs, [lh], cache=cache) for lh in named},
            "random": {lh: separation(model, pairs, [lh], cache=cache) for lh in drawn}}


def wo_shares(model, runs) -> np.ndarray:
    """(L, nh): per layer, each head's share of the summed norms |head_h . W_O[rows of h]| over
    every token of `runs` (the model's Forward per sentence; the sum of the contributions is
    concat . W_O, checked here)."""
    L, nh = model.cfg.n_layer, model.cfg.n_head
    tot = np.zeros((L, nh))
    with one_thread():
        for f in runs:
            for i, heads in enumerate(f.heads):                  # (1, nh, T, hs)
                W_O = model.layers[i]["W_O"]
                parts = head_contributions(heads, W_O)           # (nh, 1, T, C)
                if not torch.allclose(parts.sum(0), output_projection(heads, W_O), atol=1e-4):
                    raise AssertionError("per-head contributions do not sum to concat . W_O")
                tot[i] += parts.norm(dim=-1).sum(dim=(1, 2)).numpy()
    return tot / tot.sum(axis=1, keepdims=True)
