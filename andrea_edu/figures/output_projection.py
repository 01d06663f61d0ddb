"""Figures of the chapter "The output projection W_O".

- ``fig_w_o_blocks``: W_O as n_head row blocks, and each head's share of the output.
- ``fig_head_mixing``: how much of every output dimension comes from each head
  (``projections.head_shares`` / ``effective_heads``), on a random W_O and on a synthetic
  "trained-looking" one (``projections.synthetic_trained_w_o``: built, not trained, and labelled
  so wherever it is shown).
- ``fig_zero_head``: each head's contribution before and after zeroing one row block of W_O.
The chapter counts W_O's BLAS calls with ``andrea_edu.bench.aten.blas_calls``.
Names: B batch, T seq_len, C d_model, nh n_head, hs head_dim.
"""
from __future__ import annotations

import torch

from andrea_edu import projections as P
from andrea_edu.config import AndreaConfig
from andrea_edu.figures.viz import head_color, head_colors


def _cfg(n_head: int, d_model: int) -> AndreaConfig:
    return AndreaConfig(n_head=n_head, d_model=d_model)


# ------------------------------------------------------------------ W_O
def fig_w_o_blocks(n_head: int, d_model: int = 768, seed: int = 0):
    """Left: W_O with its n_head row blocks tinted (row block h reads head h). Right: each head's
    share of the output's squared norm for random head outputs."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle

    hs = _cfg(n_head, d_model).head_dim
    proj = P.Projections.random(d_model, n_head, seed=seed)
    g = torch.Generator().manual_seed(seed + 1)
    heads = torch.randn(1, n_head, 16, hs, generator=g)  # (B, nh, T, hs)
    contrib = P.head_contributions(heads, proj.W_O)  # (nh, B, T, C)
    energy = contrib.double().pow(2).sum(dim=(1, 2, 3))  # (nh,)
    share = (energy / energy.sum()).numpy()
    colors = head_colors(n_head)
    step = max(1, d_model // 192)  # draw every step-th row/column: the picture, not the data
    lim = float(proj.W_O.abs().max())
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 4.2), gridspec_kw={"width_ratios": [1, 1.3]})
    a.imshow(proj.W_O[::step, ::step].numpy(), cmap="gray", vmin=-lim, vmax=lim,
             extent=(0, d_model, d_model, 0), interpolation="nearest")
    for h in range(n_head):
        a.add_patch(Rectangle((0, h * hs), d_model, hs, color=colors[h], alpha=0.4, lw=0))
    a.set_xlabel("output dimension (column)")
    a.set_ylabel("concat feature (row)")
    a.set_title(f"W_O [{d_model} x {d_model}], rows h*{hs}:(h+1)*{hs}: head h", fontsize=10)
    b.bar(range(n_head), share, color=colors)
    b.axhline(1 / n_head, color="black", lw=0.8, ls="--", label=f"1/n_head = {1 / n_head:.3f}")
    b.set_xlabel("head h")
    b.set_ylabel("share of ||output||^2")
    if n_head > 24:
        b.set_xticks(range(0, n_head, max(1, n_head // 12)))
    b.legend(fontsize=8)
    b.set_title("random W_O and head outputs", fontsize=10)
    fig.suptitle(f"W_O as {n_head} row blocks (head_dim={hs})", fontsize=11)
    fig.tight_layout()
    return fig


def fig_head_mixing(shares_by_example: dict, n_show: int = 48):
    """Per example: head shares of the first n_show output dimensions (stacked bars); bottom:
    the effective number of heads per output dimension, over all dimensions."""
    import matplotlib.pyplot as plt
    import numpy as np

    from matplotlib.patches import Patch

    names = list(shares_by_example)
    fig, axes = plt.subplots(len(names) + 1, 1, figsize=(10, 2.3 * len(names) + 2.6))
    for ax, name in zip(axes, names):
        s = shares_by_example[name][:, :n_show].numpy()  # (nh, n_show)
        nh = s.shape[0]
        bottom = 0
        for h, color in enumerate(head_colors(nh)):
            ax.bar(range(s.shape[1]), s[h], bottom=bottom, color=color, width=0.9)
            bottom = bottom + s[h]
        ax.set_xlim(-0.6, s.shape[1] - 0.4)
        ax.set_ylim(0, 1)
        ax.set_ylabel("share")
        ax.set_title(f"{name}: output dims 0:{n_show}", fontsize=9)
    axes[len(names) - 1].set_xlabel("output dimension j")
    # One legend for the stacked panels, beside them: head h is the h-th segment from the bottom.
    nh_all = max(shares_by_example[name].shape[0] for name in names)
    shown = list(range(nh_all)) if nh_all <= 16 else list(range(15)) + [nh_all - 1]
    handles = [Patch(facecolor=head_color(h), label=f"head {h}") for h in shown]
    if len(shown) < nh_all:
        handles.insert(15, Patch(facecolor="white", label="..."))
    axes[0].legend(handles=handles[::-1], loc="upper left", bbox_to_anchor=(1.01, 1.0),
                   fontsize=7.5,
                   handlelength=1.2,
                   frameon=False, borderaxespad=0)
    ax = axes[-1]
    for name, color in zip(names, ("#1f77b4", "#d62728", "#2ca02c")):
        eff = P.effective_heads(shares_by_example[name]).numpy()
        ax.hist(eff, bins=40, alpha=0.6, color=color, label=f"{name}: median {np.median(eff):.1f}")
    ax.set_xlabel("effective heads per output dim, 1 / sum_h share^2")
    ax.set_ylabel("output dims")
    ax.legend(fontsize=8)
    fig.suptitle("head shares after W_O", fontsize=11)
    fig.tight_layout()
    return fig


def fig_zero_head(before: torch.Tensor, after: torch.Tensor, head: int):
    """Each head's contribution norm ||head_h . W_O^h|| before and after zeroing `head`'s rows."""
    import matplotlib.pyplot as plt

    nh = before.shape[0]
    nb = before.double().flatten(1).norm(dim=1).numpy()  # (nh,)
    na = after.double().flatten(1).norm(dim=1).numpy()  # (nh,)
    fig, ax = plt.subplots(figsize=(9, 3.4))
    x = torch.arange(nh).numpy()
    ax.bar(x - 0.2, nb, width=0.4, color=head_colors(nh), label="before")
    ax.bar(x + 0.2, na, width=0.4, color=head_colors(nh), alpha=0.45, hatch="//",
           edgecolor="black", lw=0.3, label=f"after zero_head(W_O, {head})")
    ax.annotate(f"head {head}: 0", (head + 0.2, 0), xytext=(head + 0.2, max(nb) * 0.5),
                ha="center", arrowprops={"arrowstyle": "->"}, fontsize=8)
    ax.set_xticks(x)
    ax.set_xlabel("head h")
    ax.set_ylabel("||head_h . W_O[rows of h]||")
    ax.legend(fontsize=8)
    ax.set_title(f"zero_head(W_O, {head})", fontsize=10)
    fig.tight_layout()
    return fig

