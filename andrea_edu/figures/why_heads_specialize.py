"""Figures of the chapter "Why heads specialize" (those of "Why twelve heads" are in why_twelve_heads).

The toy's figures take what `heads.training.train` (or `heads.sweep.load_sweep`) returned; the
trained model's (all-MiniLM-L6-v2, below the toy's) take `heads.trained` results. Every function
returns a matplotlib Figure (or a table); nothing here trains or decides. Head h keeps its colour
of `viz.head_color` in every figure; heads are written L3H10 (layer 3, head 10).
"""
from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import torch

from andrea_edu.heads.batch import Batch
from andrea_edu.heads.corpus import tokens
from andrea_edu.heads.trained.patterns import found
from andrea_edu.heads.toy_calls import DETECT_THRESHOLD, LOSS_KEYS, PATTERN_NAMES, detect
from andrea_edu.figures.head_figures import attention_window, head_name, window_keys
from andrea_edu.figures.viz import PATTERN_COLORS, caption, head_color, heatmap


def head_labels(L: int, nh: int) -> list[str]:
    return [head_name((l, h)) for l in range(L) for h in range(nh)]


def pick_example(batch: Batch, length: int = 28) -> tuple[int, int]:
    """(sequence, start) of a window of `length` tokens in which every pattern occurs with its
    key inside the window; the most even such window (largest count of the rarest pattern)."""
    best, best_key = (0, 0), None
    T = batch.idx.shape[1]
    for b in range(batch.idx.shape[0]):
        for start in range(0, T - length + 1, 2):
            counts = [len(window_keys(batch, i, b, start, length)) for i in range(len(PATTERN_NAMES))]
            key = (min(counts), sum(counts))
            if min(counts) > 0 and (best_key is None or key > best_key):
                best, best_key = (b, start), key
    return best


def fig_pattern_losses(run, title: str | None = None):
    """Per-pattern evaluation loss through training, with each pattern's irreducible floor."""
    fig, ax = plt.subplots(figsize=(7.5, 3.8))
    steps = np.asarray(run.eval_steps)
    for i, key in enumerate(LOSS_KEYS):
        ax.plot(steps, run.eval_loss[:, i], color=PATTERN_COLORS[key], label=key,
                lw=2 if key != "all" else 1.2, ls="-" if key != "all" else ":")
        if key in run.floors and run.floors[key] > 0:
            ax.axhline(run.floors[key], color=PATTERN_COLORS[key], ls="--", lw=0.8)
    ax.set_xlabel("training step")
    ax.set_ylabel("next-token loss (nats)")
    ax.set_ylim(bottom=0)
    ax.legend(fontsize=8)
    s = run.settings
    ax.set_title(title or f"Loss per pattern while training ({s.n_layer} layers x {s.n_head} "
                 f"heads, seed {s.seed})", fontsize=10)
    fig.tight_layout()
    return fig


def fig_scores(run, threshold: float = DETECT_THRESHOLD):
    """Heads x patterns score heatmaps, before and after training."""
    L, nh = run.scores.shape[2:]
    fig, axes = plt.subplots(1, 2, figsize=(8.5, 0.32 * L * nh + 1.9))
    for ax, sc, when in ((axes[0], run.scores_before, "before training"),
                         (axes[1], run.scores_after, f"after {run.settings.steps} steps")):
        m = np.asarray(sc).reshape(3, L * nh).T  # (L*nh, 3)
        heatmap(ax, m, list(PATTERN_NAMES), head_labels(L, nh), vmin=0, vmax=1,
                cmap="viridis", annotate=True, colorbar=False, title=when)
        ax.tick_params(axis="x", labelrotation=0, labelsize=8)
    fig.suptitle("Pattern scores: attention on the pattern's key", fontsize=10)
    chance = ", ".join(f"{k} {v:.3f}" for k, v in run.chance.items())
    caption(fig, f"Detected: score >= {threshold}. Uniform attention would score: {chance}.")
    fig.tight_layout(rect=(0, 0.05, 1, 0.95))
    return fig


def fig_grad_norms(run, pressure=None, smooth: int = 25):
    """Left: per-head gradient norm through training. Right: gradient vs uniqueness per probe.

    A run trained in this process has every step's norm (drawn as a running mean of `smooth`
    steps); a run read from the sweep keeps the mean of each window between probes (drawn as
    steps, one level per window)."""
    G = np.asarray(run.grad_norm)  # (steps, L, nh), or (n_probes, L, nh) for a stored run
    L, nh = G.shape[1:]
    per_window = G.shape[0] != run.settings.steps
    fig, axes = plt.subplots(1, 2 if pressure else 1, figsize=(12 if pressure else 7, 4),
                             squeeze=False)
    ax = axes[0, 0]
    kernel = np.ones(smooth) / smooth
    edges = [p["step"] for p in run.probes] + [run.settings.steps]
    for l in range(L):
        for h in range(nh):
            style = dict(color=head_color(h), ls="-" if l == 0 else "--", lw=1.2,
                         label=f"L{l}H{h}")
            if per_window:
                ax.stairs(G[:, l, h], edges, baseline=None, **style)
            else:
                y = np.convolve(G[:, l, h], kernel, mode="valid")
                ax.plot(np.arange(len(y)) + smooth // 2, y, **style)
    ax.set_yscale("log")
    ax.set_xlabel("training step")
    ax.set_ylabel("head's gradient norm\n" + (
        f"(mean over each probe window, {edges[1] - edges[0]} steps)" if per_window else
        f"(mean of {smooth} steps)"))
    ax.set_title("Per-head gradient norms (solid: layer 0, dashed: layer 1)", fontsize=9)
    ax.legend(fontsize=6, ncol=2)
    if pressure:
        ax = axes[0, 1]
        for cls, c, mk in (("unique", "#d62728", "o"), ("redundant", "#1f77b4", "s"),
                           ("inactive", "#aaaaaa", ".")):
            rows = [r for r in pressure.rows if r["cls"] == cls and r["step"] > 0]
            ax.scatter([r["step"] for r in rows], [max(r["grad"], 1e-6) for r in rows], c=c,
                       marker=mk, s=18, alpha=0.8, label=f"{cls} ({len(rows)})")
        ax.set_yscale("log")
        ax.set_xlabel("probe step")
        ax.set_ylabel("mean gradient norm to next probe")
        ax.set_title(f"Gradient by class (redundant by {pressure.by})", fontsize=9)
        ax.legend(fontsize=7)
    fig.suptitle("Which heads receive the gradient?", fontsize=10)
    fig.tight_layout(rect=(0, 0, 1, 0.95))
    return fig


def fig_nhead_frame(runs: dict, n_head: int, seed: int, threshold: float = DETECT_THRESHOLD):
    """Slider frame: scores after training and the ablation table for one n_head."""
    run = runs[(n_head, seed)]
    L, nh = run.scores.shape[2:]
    fig, axes = plt.subplots(1, 2, figsize=(9.5, 0.23 * L * nh + 2.4))
    m = np.asarray(run.scores_after).reshape(3, L * nh).T  # (L*nh, 3)
    small = L * nh <= 16
    heatmap(axes[0], m, list(PATTERN_NAMES), head_labels(L, nh), vmin=0, vmax=1,
            annotate=small, colorbar=False, title="score after training")
    a = run.ablation[..., 1:].reshape(L * nh, 3)
    heatmap(axes[1], a, list(PATTERN_NAMES), head_labels(L, nh), cmap="magma_r", vmin=0,
            vmax=max(float(a.max()), 1e-6), annotate=small, colorbar=True,
            title="loss increase when ablated (nats)")
    for ax in axes:
        ax.tick_params(axis="x", labelrotation=0, labelsize=7)
        ax.tick_params(axis="y", labelsize=6 if L * nh > 16 else 8)
    fl = run.final_loss
    n_det = {p: sum(v == p for v in detect(run.scores_after, threshold).values())
             for p in PATTERN_NAMES}
    fig.suptitle(f"n_head = {n_head} (head_dim {run.settings.d_model // n_head}), seed {seed}: "
                 + ", ".join(f"{p} loss {fl[p]:.3f}" for p in PATTERN_NAMES), fontsize=9)
    caption(fig, "Heads detected (score >= %.1f): " % threshold
             + ", ".join(f"{p} {n}" for p, n in n_det.items()))
    fig.tight_layout(rect=(0, 0.05, 1, 0.94))
    return fig


def specialists(scores) -> dict:
    """{pattern: (layer, head, score)}: the head with the highest score for each pattern."""
    sc = np.asarray(scores)  # (3, L, nh)
    out = {}
    for i, p in enumerate(PATTERN_NAMES):
        l, h = np.unravel_index(sc[i].argmax(), sc[i].shape)
        out[p] = (int(l), int(h), float(sc[i, l, h]))
    return out


def shown_heads(scores) -> dict:
    """{pattern: (layer, head, score, best)}: one distinct head per pattern, the assignment with
    the highest total score (so a head that leads two patterns is shown for one of them and the
    other pattern gets its best remaining head); best = (layer, head, score) of the pattern's own
    top head, which differs from the one shown exactly when that head is shown for another."""
    import itertools

    sc = np.asarray(scores)  # (3, L, nh)
    heads = [(l, h) for l in range(sc.shape[1]) for h in range(sc.shape[2])]
    best = specialists(scores)
    if len(heads) < len(PATTERN_NAMES):
        return {p: (*best[p], best[p]) for p in PATTERN_NAMES}
    pick = max(itertools.permutations(heads, len(PATTERN_NAMES)),
               key=lambda hs: sum(sc[i][hs[i]] for i in range(len(PATTERN_NAMES))))
    return {p: (int(pick[i][0]), int(pick[i][1]), float(sc[i][pick[i]]), best[p])
            for i, p in enumerate(PATTERN_NAMES)}


# Token labels of the opening figure: at least 9 px of cap height when the figure is shown
# 1280 px wide (DejaVu Sans capitals are 0.73 em): fontsize (pt) >= 9 / 0.73 * 72 * width / 1280.
SPECIALISTS_WIDTH_IN = 13.5
TOKEN_FONTSIZE = 10.0


def fig_specialists(maps: torch.Tensor, batch: Batch, scores, b: int, start: int,
                    length: int = 28):
    """One panel per pattern: a head for it (`shown_heads`: the best distinct heads), its
    attention over one window of one example (rows: queries, columns: keys), and circles on the
    keys that pattern designates. What specializes, shown before any statistic."""
    sl = slice(start, start + length)
    toks = tokens(batch, b)[sl]
    shown = shown_heads(scores)
    fig, axes = plt.subplots(1, 3, figsize=(SPECIALISTS_WIDTH_IN, 5.6))
    for ax, (i, p) in zip(axes, enumerate(PATTERN_NAMES)):
        l, h, s, (bl, bh, bs) = shown[p]
        attention_window(ax, maps[l, b, h, sl, sl], toks,
                         [(PATTERN_COLORS[p], window_keys(batch, i, b, start, length), 28, None)],
                         fontsize=TOKEN_FONTSIZE, rotation=90)
        other = next((q for q, v in shown.items() if (v[0], v[1]) == (bl, bh)), None)
        why = ("its best head" if (l, h) == (bl, bh) else
               f"its best, L{bl}H{bh} ({bs:.2f}), is shown for {other}")
        ax.set_title(f"{p}: head L{l}H{h}, score {s:.2f}\n({why})", fontsize=10,
                     color=PATTERN_COLORS[p])
        ax.set_xlabel("key (the token looked at)", fontsize=9)
        ax.set_ylabel("query (the token looking)", fontsize=9)
    fig.suptitle("One head per pattern (dark: more attention)", fontsize=11)
    fig.tight_layout(rect=(0, 0, 1, 0.95))
    return fig


# ---------------------------------------------------------------- the trained model (MiniLM)
def pattern_rows(results) -> tuple[list[str], list[list[str]]]:
    """(header, rows) of the patterns table: held-out scores beside their baselines, and whether
    the head counts as found (heads.trained.patterns.found: the thresholds stated there)."""
    header = ["pattern", "found", "head (chosen on half 0 by)", "mass on half 1", "x uniform",
              "prefers target", "position alone", "random init: head, mass, prefers",
              "queries"]
    rows = []
    for r in results:
        pct = (lambda x: "" if x is None else f"{x:.0%}")
        rows.append([r.pattern, "yes" if found(r) else "no",
                     f"{head_name(r.head)} ({r.selected_by})", f"{r.mass:.3f}",
                     f"{r.over_uniform:.1f}", pct(r.prefer), pct(r.position_prefer),
                     f"{head_name(r.random_head)}, {r.random_mass:.3f}"
                     + ("" if r.random_prefer is None else f", {r.random_prefer:.0%}"), str(r.n)])
    return header, rows


def fig_patterns(results):
    """Held-out mass of the best trained head, the best random-init head and uniform, per pattern."""
    fig, ax = plt.subplots(figsize=(8, 3.6))
    y = np.arange(len(results))
    ax.barh(y - 0.27, [r.mass for r in results], 0.26, color="#1f77b4",
            label="all-MiniLM-L6-v2, best head (held out)")
    ax.barh(y, [r.random_mass for r in results], 0.26, color="#aaaaaa",
            label="random init, best head (held out)")
    ax.barh(y + 0.27, [r.uniform for r in results], 0.26, color="#ffffff", edgecolor="#555555",
            hatch="//", label="uniform attention")
    for yi, r in zip(y, results):
        ax.text(r.mass + 0.01, yi - 0.27, head_name(r.head), va="center", fontsize=8)
    ax.set_yticks(y, [r.pattern for r in results], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlim(0, 1.12)
    ax.set_xlabel("attention on the pattern's key (held-out half)")
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    return fig


def fig_trained_ablation(abl: dict, labels: dict):
    """Change of the paraphrase-unrelated gap when one head is zeroed: random heads as grey
    points, the pattern heads labelled."""
    base = abl["base"]["gap"]
    fig, ax = plt.subplots(figsize=(8, 2.8))
    rnd = [v["gap"] - base for v in abl["random"].values()]
    ax.scatter(rnd, np.zeros(len(rnd)), color="#888888", label="a random head", zorder=2)
    for i, (lh, v) in enumerate(abl["heads"].items()):   # one colour per head, named in the legend
        ax.scatter([v["gap"] - base], [1], color=head_color(i), zorder=3,
                   label=f"{head_name(lh)}: {labels.get(lh, '')}")
    ax.axvline(0, color="#333333", lw=0.8)
    ax.set_yticks([0, 1], ["random heads", "pattern heads"])
    ax.set_ylim(-0.6, 1.6)
    ax.set_xlabel("paraphrase - unrelated cosine, change when zeroed", fontsize=8)
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))
    fig.tight_layout()
    return fig


def fig_wo_shares(shares):
    """Each head's share of |concat . W_O| per layer."""
    fig, ax = plt.subplots(figsize=(6.5, 2.8))
    L, nh = shares.shape
    heatmap(ax, shares, [str(h) for h in range(nh)], [str(i) for i in range(L)], vmin=0,
                annotate=False)
    ax.set_xlabel("head")
    ax.set_ylabel("layer")
    ax.set_title("share of the layer's W_O output", fontsize=9)
    fig.tight_layout()
    return fig


def viewer(tokens: list[str], maps: np.ndarray):
    """plot_fn(layer, head) for the slider: that head's attention on one sentence (kept light:
    the built page holds one frame per layer and head)."""
    T = len(tokens)

    def plot(layer: int, head: int):
        size = min(6.0, 2.4 + 0.17 * T)
        fig, ax = plt.subplots(figsize=(size + 0.6, size))
        ax.imshow(maps[layer, head], cmap="viridis", vmin=0, vmax=1, interpolation="nearest")
        ax.set_xticks(range(T), tokens, rotation=90, fontsize=7)   # every token, not thinned
        ax.set_yticks(range(T), tokens, fontsize=7)
        ax.set_xlabel("key (attended to)", fontsize=8)
        ax.set_ylabel("query", fontsize=8)
        ax.set_title(f"layer {layer}, head {head}: attention probability (0 to 1)", fontsize=8)
        fig.subplots_adjust(left=0.22, right=0.98, bottom=0.24, top=0.93)
        return fig
    return plot
