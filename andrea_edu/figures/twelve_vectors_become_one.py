"""Figures of the chapter "Twelve vectors become one".

- ``fig_features_by_head``: the d_model features of a token, coloured by the head that owns them.
- ``fig_trap``: what each (head, position) slot really holds after the reshape trap
  (``projections.reshape_without_transpose``), from ``layout.reshape_trap`` at a real n_head.
Ranges are written as Python slices, end excluded: head h owns features h*hs:(h+1)*hs.
Names: B batch, T seq_len, C d_model, nh n_head, hs head_dim.
"""
from __future__ import annotations

import torch

from andrea_edu.config import AndreaConfig
from andrea_edu.figures.viz import head_colors, text_color_on


def _cfg(n_head: int, d_model: int) -> AndreaConfig:
    return AndreaConfig(d_model=d_model, n_head=n_head)  # validates, derives head_dim


def fig_features_by_head(n_head: int, d_model: int = 768):
    """Top: one token's d_model features in a row, coloured by owning head. Bottom: the same
    features after ``split_heads``, one row of head_dim per head."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle

    hs = _cfg(n_head, d_model).head_dim
    colors = head_colors(n_head)
    fig, (a, b) = plt.subplots(2, 1, figsize=(10, 4.2), gridspec_kw={"height_ratios": [1, 2.2]})
    for h in range(n_head):
        a.add_patch(Rectangle((h * hs, 0), hs, 1, color=colors[h]))
        b.add_patch(Rectangle((0, n_head - 1 - h), hs, 0.9, color=colors[h]))
        if n_head <= 24:
            a.text(h * hs + hs / 2, 0.5, f"h{h}", ha="center", va="center", fontsize=7)
            b.text(hs / 2, n_head - 1 - h + 0.45, f"head {h}: [T, {hs}], from features "
                   f"{h * hs}:{(h + 1) * hs}", ha="center", va="center", fontsize=7)
    a.set_xlim(0, d_model)
    a.set_ylim(0, 1)
    a.set_yticks([])
    a.set_xlabel("feature index of one token")
    a.set_title(f"d_model={d_model}, n_head={n_head}, head_dim={hs}: head h owns h*{hs}:(h+1)*{hs}",
                fontsize=10)
    b.set_xlim(0, hs)
    b.set_ylim(0, n_head)
    b.set_yticks([])
    b.set_xlabel("feature index within the head")
    b.set_title("after split_heads: one row per head", fontsize=10)
    fig.tight_layout()
    return fig


def fig_trap(T: int = 8, n_head: int = 12, d_model: int = 768):
    """Which (token, features) each (head, position) slot holds: split_heads vs the trap, at a
    real n_head (``layout_figures.trap_figure`` draws the same data for small shapes). The data
    come from ``layout.reshape_trap``, which runs the real reshape on labelled elements."""
    import matplotlib.pyplot as plt
    from matplotlib.colors import ListedColormap

    from andrea_edu.layout import reshape_trap

    hs = _cfg(n_head, d_model).head_dim
    rep = reshape_trap(1, T, n_head, hs)
    tok = torch.zeros(n_head, T, dtype=torch.int64)  # (nh, T): token the trapped slot holds
    src = torch.zeros(n_head, T, dtype=torch.int64)  # (nh, T): head whose features it holds
    for h, t, t0, h0 in rep.rows:
        tok[h, t], src[h, t] = t0, h0
    right_tok = torch.arange(T).expand(n_head, T)  # (nh, T)
    right_src = torch.arange(n_head)[:, None].expand(n_head, T)  # (nh, T)
    correct = (tok == right_tok) & (src == right_src)
    cmap = ListedColormap(head_colors(n_head))
    fig, axes = plt.subplots(1, 2, figsize=(11, 0.42 * n_head + 1.9))
    panels = ((axes[0], right_tok, right_src, "split_heads (view + transpose)"),
              (axes[1], tok, src, "reshape without transpose (the trap)"))
    for ax, tk, hd, title in panels:
        ax.imshow(hd.numpy(), cmap=cmap, vmin=-0.5, vmax=n_head - 0.5, aspect="auto")
        for h in range(n_head):
            for t in range(T):
                bad = not bool(correct[h, t]) and ax is axes[1]
                ax.text(t, h, f"t{int(tk[h, t])}\nf{int(hd[h, t]) * hs}", ha="center",
                        va="center", fontsize=6, fontweight="bold" if bad else "normal",
                        color=text_color_on(cmap(int(hd[h, t]))))
                if bad:
                    ax.add_patch(plt.Rectangle((t - 0.5, h - 0.5), 1, 1, fill=False,
                                               edgecolor="black", lw=1.2))
        ax.set_xticks(range(T))
        ax.set_yticks(range(n_head))
        ax.set_xlabel("position t")
        ax.set_ylabel("head h")
        ax.set_title(title, fontsize=10)
    n_ok = int(correct.sum())
    fig.suptitle(f"T={T}, n_head={n_head}, head_dim={hs}: the trap gets {n_ok} of "
                 f"{n_head * T} slots right", fontsize=10)
    fig.tight_layout(rect=(0, 0, 1, 0.95))
    return fig


