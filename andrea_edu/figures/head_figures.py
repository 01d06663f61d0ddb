"""What the two chapters of the part Heads draw alike: "Why heads specialize" (the toy) and "Heads on
real text (optional deep-dive)" (a model of the standard library).

- ``head_name``: a head written L3H10 (layer 3, head 10, 0-based), as the book writes heads.
- ``fig_ablation``: the loss increase when one head is ablated, one layers x heads panel per loss
  (``heads.measures.ablation``'s D, or the columns of it a chapter shows).
- ``window_keys`` / ``attention_window``: one head's attention over a window of a labelled batch
  (``heads.batch.Batch``, either laboratory's), circles on the keys a pattern designates.
"""
from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np

from andrea_edu.figures.viz import heatmap


def head_name(lh) -> str:
    """'L3H10' for (layer 3, head 10)."""
    return f"L{lh[0]}H{lh[1]}"


def fig_ablation(ablation, keys, title: str = "Loss increase when one head is ablated (nats)"):
    """ablation (L, nh, len(keys)): per head, the increase of each loss in `keys` when that head
    alone is ablated. One panel per loss, layers as rows and heads as columns, one colour scale."""
    D = np.asarray(ablation, dtype=float)
    if D.ndim != 3 or D.shape[-1] != len(keys):
        raise ValueError(f"ablation has shape {D.shape}; it must be (L, nh, {len(keys)}), one "
                         f"column per key of {tuple(keys)}")
    L, nh, _ = D.shape
    fig, axes = plt.subplots(1, len(keys), figsize=(min(16.0, len(keys) * (1.2 + 0.45 * nh)),
                                                    0.5 * L + 1.6), squeeze=False)
    top = max(1e-6, float(np.nanmax(D)))
    for i, (key, ax) in enumerate(zip(keys, axes[0])):
        heatmap(ax, D[..., i], [f"H{h}" for h in range(nh)], [f"L{l}" for l in range(L)],
                cmap="magma_r", vmin=0, vmax=top, colorbar=False, title=key)
        ax.title.set_fontsize(9)
        ax.tick_params(labelsize=8)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return fig


def window_keys(batch, p: int, b: int, start: int, length: int) -> list[tuple[int, int]]:
    """(query, key), counted from `start`, of each query in window b's [start, start + length)
    that pattern p labels with a key inside that span."""
    keys = batch.key_of(p)[b, start:start + length]
    return [(q, int(k) - start) for q, k in enumerate(keys) if int(k) >= start]


def attention_window(ax, attn, toks, circles=(), fontsize: float = 6.0, rotation: int = 0):
    """attn (n, n), one head's probabilities over a window (rows: queries, columns: keys; dark =
    much), on `ax` with the n tokens `toks` as tick labels; circles: (colour, [(query, key), ...],
    marker size, legend label or None) on the keys a pattern designates."""
    n = len(toks)
    heatmap(ax, attn, colorbar=False, annotate=False, vmin=0, vmax=1, cmap="Greys")
    ax.set_xticks(range(n), toks, rotation=rotation, fontsize=fontsize)
    ax.set_yticks(range(n), toks, fontsize=fontsize)
    for colour, pts, size, label in circles:
        if pts:
            q, k = zip(*pts)
            ax.scatter(k, q, s=size, facecolors="none", edgecolors=colour, linewidths=1.2,
                       label=label)
