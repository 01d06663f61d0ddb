"""Figures of the chapter "Parameter count" (with "Naming the projections").

- ``fig_param_breakdown``: where ANDREA's parameters are, by part, for each preset.
- ``attention_matrices_by_head`` / ``fig_attention_by_head``: the attention count split into
  heads, which does not move with n_head.
"""
from __future__ import annotations

from andrea_edu.config import AndreaConfig, param_counts
from andrea_edu.figures.viz import head_colors


def fig_param_breakdown(cfgs, counts_by_cfg: dict):
    """One horizontal bar per config: its parameters by part, exact counts and shares."""
    import matplotlib.pyplot as plt

    part_colors = ["#d62728", "#1f77b4", "#9467bd", "#7f7f7f"]
    fig, axes = plt.subplots(len(cfgs), 1, figsize=(10, 1.9 * len(cfgs) + 0.5), squeeze=False)
    for ax, cfg in zip(axes[:, 0], cfgs):
        parts = counts_by_cfg[cfg.name]
        total = sum(parts.values())
        left, small = 0.0, []
        for (name, n), color in zip(parts.items(), part_colors):
            share = n / total
            ax.barh(0, share * 100, left=left, color=color, label=name)
            if share > 0.06:
                ax.text(left + share * 50, 0, f"{n:,}\n{share:.2%}", ha="center", va="center",
                        fontsize=8, color="white")
            else:
                small.append(f"{name}: {n:,} ({share:.2%})")
            left += share * 100
        ax.set_xlim(0, 100)
        ax.set_yticks([])
        ax.set_title(f"{cfg.name}: {total:,} parameters (d_model={cfg.d_model}, "
                     f"n_layer={cfg.n_layer}, vocab={cfg.vocab_size})", fontsize=10)
        if small:
            ax.text(100, -0.55, "too thin to see: " + "; ".join(small), ha="right", va="top",
                    fontsize=8)
    axes[-1, 0].set_xlabel("share of all parameters, %")
    handles, labels = axes[0, 0].get_legend_handles_labels()
    fig.legend(handles, labels, ncol=4, fontsize=8, loc="lower center", frameon=False)
    fig.tight_layout(rect=(0, 0.07, 1, 1))
    return fig


def attention_matrices_by_head(cfg: AndreaConfig) -> dict:
    """{matrix: [parameters of each head's block]}: W_Q/W_K/W_V column blocks [C, hs] and W_O
    row blocks [hs, C]. Their sum is attention_per_layer whatever n_head is."""
    C, nh, hs = cfg.d_model, cfg.n_head, cfg.head_dim
    blocks = {m: [C * hs] * nh for m in ("W_Q", "W_K", "W_V")}
    blocks["W_O"] = [hs * C] * nh
    total = sum(sum(v) for v in blocks.values())
    if total != param_counts(cfg).attention_per_layer:
        raise RuntimeError(f"per-head blocks sum to {total}, formula says "
                           f"{param_counts(cfg).attention_per_layer}")
    return blocks


def fig_attention_by_head(n_head: int, d_model: int = 768):
    """The attention parameters of one layer, each matrix split into its n_head blocks."""
    import matplotlib.pyplot as plt

    cfg = AndreaConfig(d_model=d_model, n_head=n_head)
    blocks = attention_matrices_by_head(cfg)
    fig, ax = plt.subplots(figsize=(8, 3.6))
    colors = head_colors(n_head)
    for i, (m, sizes) in enumerate(blocks.items()):
        bottom = 0
        for h, n in enumerate(sizes):
            ax.bar(i, n, bottom=bottom, color=colors[h], edgecolor="white" if n_head <= 48 else
                   None, linewidth=0.4)
            bottom += n
    ax.set_xticks(range(4))
    ax.set_xticklabels([f"{m}\n({'columns' if m != 'W_O' else 'rows'})" for m in blocks],
                       fontsize=8)
    ax.set_ylim(0, d_model * d_model * 1.12)
    ax.set_ylabel("parameters")
    total = param_counts(cfg).attention_per_layer
    ax.set_title(f"n_head={n_head}, head_dim={cfg.head_dim}: {d_model}x{cfg.head_dim} = "
                 f"{d_model * cfg.head_dim:,} per head and matrix;\nper layer {total:,}",
                 fontsize=10)
    fig.tight_layout()
    return fig

