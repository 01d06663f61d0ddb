"""Figures of the chapter "Why twelve heads, not one wider head".

Every function takes numbers that the chapter computed (runs of `heads.sweep`, the
worked example of `two_places`, launch grids of `kernels.grid` and `occupancy`) and returns a matplotlib
Figure with a title (its caption is the chapter's Markdown); nothing here trains or
decides.
"""
from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np

from andrea_edu.heads.toy_calls import LOSS_KEYS, PATTERN_NAMES
from andrea_edu.figures.viz import PATTERN_COLORS, head_color


def fig_two_places(weights_one: np.ndarray, weights_two: np.ndarray, tokens: list[str],
                   outputs: dict):
    """The worked example: one head's softmax row vs two heads' rows over the same keys."""
    fig, axes = plt.subplots(1, 3, figsize=(12, 3.3), gridspec_kw={"width_ratios": [1, 1, 0.9]})
    x = np.arange(len(tokens))
    axes[0].bar(x, weights_one, color=head_color(0))
    axes[0].set_title("one head: one softmax over the keys", fontsize=9)
    for k, (w, h) in enumerate(zip(weights_two, (1, 2))):
        axes[1].bar(x + (k - 0.5) * 0.4, w, width=0.4, color=head_color(h), label=f"head {k}")
    axes[1].set_title("two heads: two softmaxes", fontsize=9)
    axes[1].legend(fontsize=8)
    for ax in axes[:2]:
        ax.set_xticks(x, tokens, fontsize=8)
        ax.set_ylim(0, 1.05)
        ax.set_ylabel("attention probability")
    names = list(outputs)
    vals = [outputs[n] for n in names]
    axes[2].barh(range(len(names)), vals, color="#777777")
    axes[2].set_yticks(range(len(names)), names, fontsize=8)
    axes[2].set_xlabel("read-out error")
    axes[2].set_title("what reaches the output", fontsize=9)
    fig.suptitle("Attending to two places at once", fontsize=10)
    fig.tight_layout(rect=(0, 0, 1, 0.93))
    return fig


def fig_nhead_comparison(runs: dict, n_heads, seeds, clip: float = 1e-4):
    """Final per-pattern loss above its floor against n_head (each seed a dot, the mean a line).
    Log scale; values below `clip` (a run at its floor, within sampling noise) are drawn at it."""
    fig, axes = plt.subplots(1, 3, figsize=(12, 3.6), sharey=True)
    for ax, name in zip(axes, PATTERN_NAMES):
        i = LOSS_KEYS.index(name)
        means = []
        for n in n_heads:
            ys = [runs[(n, s)].eval_loss[-1, i] - runs[(n, s)].floors[name] for s in seeds]
            ax.scatter([n] * len(ys), np.maximum(ys, clip), color=PATTERN_COLORS[name], s=16,
                       alpha=0.7)
            means.append(max(float(np.mean(ys)), clip))
        ax.plot(n_heads, means, color=PATTERN_COLORS[name], lw=1.5)
        ax.set_xscale("log", base=2)
        ax.set_xticks(list(n_heads), [str(n) for n in n_heads])
        ax.set_yscale("log")
        ax.set_xlabel("n_head (d_model fixed)")
        ax.set_title(name, fontsize=10)
    axes[0].set_ylabel("final loss above the floor (nats)")
    fig.suptitle(f"final loss per pattern against n_head (clipped at {clip:g})", fontsize=10)
    fig.tight_layout(rect=(0, 0, 1, 0.93))
    return fig


def fig_nhead_curves(runs: dict, n_heads, seeds):
    """Evaluation loss above the floor through training, per pattern, one line per n_head
    (mean over seeds)."""
    fig, axes = plt.subplots(1, 3, figsize=(12, 3.6))
    cmap = plt.get_cmap("viridis")
    for ax, name in zip(axes, PATTERN_NAMES):
        i = LOSS_KEYS.index(name)
        for j, n in enumerate(n_heads):
            rs = [runs[(n, s)] for s in seeds]
            y = np.mean([r.eval_loss[:, i] - r.floors[name] for r in rs], axis=0)
            ax.plot(rs[0].eval_steps, np.maximum(y, 1e-4), color=cmap(j / max(1, len(n_heads) - 1)),
                    label=f"n_head {n}")
        ax.set_yscale("log")
        ax.set_xlabel("training step")
        ax.set_title(name, fontsize=10)
    axes[0].set_ylabel("loss above the floor (nats)")
    axes[0].legend(fontsize=7)
    fig.suptitle("learning curves per pattern and n_head (clipped at 1e-4)", fontsize=10)
    fig.tight_layout(rect=(0, 0, 1, 0.93))
    return fig


def fig_grid_fill(rows: list[dict], sms: int, gpu: str):
    """SMs that a launch of one block per (batch, head) occupies, against n_head. rows: dicts
    with n_head, head_dim, runs (False: the kernels refuse that head_dim), blocks, sms_busy."""
    fig, ax = plt.subplots(figsize=(7.5, 3.6))
    x = np.arange(len(rows))
    for i, r in enumerate(rows):
        h = r["sms_busy"] if r["runs"] else min(r["blocks"], sms)
        ax.bar(i, h, color="#2ca02c" if r["runs"] else "#dddddd",
               hatch=None if r["runs"] else "//", edgecolor="#888888")
        ax.text(i, h + 2, f"{r['blocks']} blocks" + ("" if r["runs"] else "\n(refused)"),
                ha="center", va="bottom", fontsize=7)
    ax.axhline(sms, color="#d62728", ls="--", lw=1)
    ax.text(-0.4, sms + 2, f"{sms} SMs ({gpu})", ha="left", va="bottom", fontsize=8,
            color="#d62728")
    ax.set_xticks(x, [f"{r['n_head']} x {r['head_dim']}" for r in rows], fontsize=8)
    ax.set_xlabel(f"n_head x head_dim (d_model {rows[0]['n_head'] * rows[0]['head_dim']})")
    ax.set_ylabel("SMs with a block")
    ax.set_ylim(0, sms * 1.22)
    ax.set_title("v1: one block per (batch, head)", fontsize=10)
    fig.tight_layout()
    return fig


def error_columns(columns: dict) -> tuple[list, list]:
    """(header, rows) of a table with one row per layout and one column per entry of `columns`
    ({column title: {layout: read-out error}}, as `two_places.two_places_table` returns)."""
    titles = list(columns)
    layouts = list(columns[titles[0]])
    return (["layout"] + titles,
            [[name] + [f"{columns[t][name]:.3f}" for t in titles] for name in layouts])
