"""Figures of the forward pass: the five steps x n_layer diagram, costs, time shares, a token's
journey.

Introduced in the chapters "The final picture" (pipeline_diagram, cost_figure, share_figure,
flop_share_figure) and "Reading the pipeline" (journey_figure). Every box, shape and number is
read from the model object (`pipeline.layer_steps` / `model_steps`), a measurement
(`pipeline.timing.StepTiming`) or a real run (`tracer.Trace`), never typed in.
"""
from __future__ import annotations

import numpy as np

from andrea_edu.pipeline.steps import GROUPS, LAYER_STEP_INFO, layer_steps, model_steps, totals
from andrea_edu.figures.viz import table

GROUP_COLORS = {
    "Q, K, V projections": "#4c72b0", "attention kernel": "#dd8452",
    "W_O (concat + matmul)": "#55a868", "MLP": "#b0b0b0", "LayerNorms": "#d9d9d9",
    "residual adds": "#ececec", "embeddings": "#c7b6d9", "LM head": "#e5c494",
}
QKV_COLORS = ("#4c72b0", "#6f8fc4", "#9bb2da")  # Q, K, V: three shades of the projection colour


def _box(ax, x, y, w, h, face, text="", dashed=False, fontsize=7.5, **kw):
    from matplotlib.patches import FancyBboxPatch

    ax.add_patch(FancyBboxPatch((x, y), w, h, boxstyle="round,pad=0.02,rounding_size=0.08",
                                facecolor=face, edgecolor="#333333", linewidth=0.7,
                                linestyle="--" if dashed else "-"))
    if text:
        ax.text(x + w / 2, y + h / 2, text, ha="center", va="center", fontsize=fontsize, **kw)


def _up(ax, x, y0, y1):
    ax.annotate("", xy=(x, y1), xytext=(x, y0),
                arrowprops={"arrowstyle": "->", "linewidth": 0.9, "color": "#333333"})


def _shape(s) -> str:
    return "[" + ", ".join(str(v) for v in s) + "]"


def pipeline_diagram(model, B: int = 1, T: int = 128):
    """Left: one layer's 14 steps (the source's five coloured, views dashed) with output shapes.
    Right: embeddings, n_layer stacked layers of the five steps + MLP, final LayerNorm, LM head."""
    import matplotlib.pyplot as plt

    steps = layer_steps(model, B, T, 0)
    L, (V, C) = len(model.blocks), tuple(model.wte.shape)
    fig, (axl, axr) = plt.subplots(1, 2, figsize=(13, 7.2), gridspec_kw={"width_ratios": [1.35, 1]})
    for ax in (axl, axr):
        ax.axis("off")
    # Left panel: attention sublayer in column 0 (9 steps), MLP sublayer in column 1 (5 steps).
    split = [s.name for s in steps].index("ln_2")
    axl.set_xlim(0, 10.4)
    axl.set_ylim(-0.6, split + 0.6)
    for col, part in enumerate((steps[:split], steps[split:])):
        x0 = 0.1 + col * 5.3
        for i, s in enumerate(part):
            color = "#ffffff" if s.kind == "view" else GROUP_COLORS[s.group]
            _box(axl, x0, i, 4.8, 0.72, color, f"{s.label}\n→ {_shape(s.output)}",
                 dashed=s.kind == "view")
            if i:
                _up(axl, x0 + 2.4, i - 0.28, i)
        axl.text(x0 + 2.4, len(part) + 0.05, ("attention sublayer" if col == 0 else "MLP sublayer"),
                 ha="center", va="bottom", fontsize=9, fontweight="bold")
    axl.annotate("", xy=(5.4, 0.36), xytext=(4.9, split - 1 + 0.36),
                 arrowprops={"arrowstyle": "->", "linewidth": 0.9, "color": "#333333",
                             "connectionstyle": "arc3,rad=-0.25"})
    axl.set_title(f"one layer (B={B}, T={T}, C={C}, n_head={model.blocks[0].attn.n_head})",
                  fontsize=10)
    # Right panel: the stack.
    rows = L + 3
    axr.set_xlim(0, 10)
    axr.set_ylim(-0.3, rows + 0.3)
    _box(axr, 0.3, 0, 9.4, 0.7, GROUP_COLORS["embeddings"], f"embeddings wte[idx] + wpe → {_shape((B, T, C))}")
    for i in range(L):
        y = 1 + i
        for j, n in enumerate("QKV"):
            _box(axr, 0.3 + j * 0.75, y, 0.75, 0.7, QKV_COLORS[j], n, color="white", fontsize=7)
        _box(axr, 2.6, y, 2.1, 0.7, GROUP_COLORS["attention kernel"], "attention, all heads", fontsize=7)
        _box(axr, 4.8, y, 1.2, 0.7, GROUP_COLORS["W_O (concat + matmul)"], "W_O", fontsize=7)
        _box(axr, 6.1, y, 2.6, 0.7, GROUP_COLORS["MLP"], "LN, MLP, residuals", fontsize=7)
        axr.text(9.6, y + 0.35, f"layer {i}", ha="right", va="center", fontsize=7)
    _box(axr, 0.3, L + 1, 9.4, 0.7, GROUP_COLORS["LayerNorms"], "final LayerNorm ln_f")
    _box(axr, 0.3, L + 2, 9.4, 0.7, GROUP_COLORS["LM head"], f"LM head x · wteᵀ → {_shape((B, T, V))}")
    axr.set_title(f"× {L} layers: {5 * L} of the source's steps", fontsize=10)
    fig.suptitle(model.cfg.name, fontsize=12)
    fig.subplots_adjust(left=0.01, right=0.99, top=0.9, bottom=0.02, wspace=0.05)
    return fig


def cost_figure(steps, title: str = ""):
    """GFLOPs and MB moved by group, for a list of `pipeline.Step` (e.g. model_steps(...))."""
    import matplotlib.pyplot as plt

    fl, by = totals(steps, "group", "flops"), totals(steps, "group", "bytes")
    groups = [g for g in GROUPS if g in fl]
    fig, axes = plt.subplots(1, 2, figsize=(12, 3.8), sharey=True)
    y = np.arange(len(groups))
    for ax, data, scale, unit in ((axes[0], fl, 1e9, "GFLOP"), (axes[1], by, 1e6, "MB moved")):
        vals = [data[g] / scale for g in groups]
        ax.barh(y, vals, color=[GROUP_COLORS[g] for g in groups], edgecolor="#333333", linewidth=0.5)
        for yi, v in zip(y, vals):
            ax.text(v, yi, f" {v:.3g}", va="center", fontsize=8)
        ax.set_xlabel(unit)
        ax.set_xlim(0, max(vals) * 1.25)
    axes[0].set_yticks(y, groups)
    axes[0].invert_yaxis()
    axes[0].set_title("FLOPs", fontsize=9)
    axes[1].set_title("bytes moved", fontsize=9)
    fig.suptitle(title or "cost by step group (formulas)", fontsize=11)
    fig.tight_layout()
    return fig


def share_figure(timings, steps=None, flop_label: str = "share of FLOPs (formula)"):
    """Measured time share per group, one bar per StepTiming (its device in the legend), and the
    FLOP share of `steps` beside them (hatched, labelled `flop_label`) when given."""
    import matplotlib.pyplot as plt

    series: list[tuple[str, dict, str | None]] = [(t.label(), t.shares(), None) for t in timings]
    if steps is not None:
        fl = totals(steps, "group", "flops")
        tot = sum(fl.values())
        series.append((flop_label, {g: v / tot for g, v in fl.items()}, "//"))
    groups = [g for g in GROUPS if any(g in s for _, s, _ in series)]
    fig, ax = plt.subplots(figsize=(11, 0.55 * len(groups) * len(series) / 2 + 2.8))
    h = 0.8 / len(series)
    y = np.arange(len(groups))
    for k, (label, sh, hatch) in enumerate(series):
        vals = [100 * sh.get(g, 0.0) for g in groups]
        ax.barh(y + k * h, vals, h, label=label, hatch=hatch, edgecolor="#333333", linewidth=0.4,
                color=[GROUP_COLORS[g] for g in groups] if hatch is None and k == 0 else
                ("#ffffff" if hatch else None))
        for yi, v in zip(y + k * h, vals):
            ax.text(v, yi, f" {v:.1f} %", va="center", fontsize=7)
    ax.set_yticks(y + h * (len(series) - 1) / 2, groups)
    ax.invert_yaxis()
    ax.set_xlabel("share of the forward pass (%)")
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.12), ncol=1, frameon=False)
    ax.set_title("time share by step group (measured)", fontsize=11)
    fig.tight_layout()
    return fig


def flop_share_figure(model, T: int, B: int = 1):
    """FLOP share of each group at sequence length T (for a slider over T): attention's share
    grows with T because its FLOPs grow as T², the matmuls' as T."""
    import matplotlib.pyplot as plt

    fl = totals(model_steps(model, B, T), "group", "flops")
    tot = sum(fl.values())
    groups = [g for g in GROUPS if g in fl]
    fig, ax = plt.subplots(figsize=(8, 3.6))
    vals = [100 * fl[g] / tot for g in groups]
    ax.barh(groups, vals, color=[GROUP_COLORS[g] for g in groups], edgecolor="#333333", linewidth=0.5)
    for i, v in enumerate(vals):  # bar i of the categorical axis sits at y = i
        ax.text(v, i, f" {v:.1f} %", va="center", fontsize=8)
    ax.invert_yaxis()
    ax.set_xlim(0, 100)
    ax.set_xlabel("share of the FLOPs (%)")
    ax.set_title(f"{model.cfg.name}: FLOP share by step at T={T} (B={B}), {tot / 1e9:.1f} GFLOP",
                 fontsize=10)
    fig.tight_layout()
    return fig


__all__ = ["pipeline_diagram", "cost_figure", "share_figure", "flop_share_figure", "GROUP_COLORS",
           "LAYER_STEP_INFO"]


# ---------------------------------------------------------------- the exercises' tables
def length_table(rows, cfg) -> None:
    """Tabulate `pipeline.kernel_vs_projections(cfg, ...)` rows (GFLOP of one layer, B = 1)."""
    table(["T", f"past block_size {cfg.block_size}", "attention kernel (GFLOP)",
           "Q, K, V projections (GFLOP)", "kernel / projections"],
          [[f"{r['T']:,}", "yes" if r["beyond_block_size"] else "no",
            f"{r['attention'] / 1e9:.3f}", f"{r['projections'] / 1e9:.3f}", f"{r['ratio']:.3f}"]
           for r in rows])


def intensity_table(rows, ridge: float, gpu_name: str) -> None:
    """Tabulate `pipeline.qkv_intensity` rows against a GPU's ridge point (FLOP/byte)."""
    table(["B·T tokens", "GFLOP", "MB moved (at least)", "FLOP/byte", f"compute-bound, {gpu_name}"],
          [[f"{r['tokens']:,}", f"{r['flops'] / 1e9:.3f}", f"{r['bytes'] / 1e6:.2f}",
            f"{r['intensity']:.1f}", "yes" if r["intensity"] >= ridge else "no"] for r in rows])


def shares_table(timings) -> None:
    """Each step group's share of the measured time and of the FLOPs by the formulas, one
    column per `StepTiming` (its config, B and T)."""
    from andrea_edu.config import preset
    from andrea_edu.model import AndreaModel

    flops = [totals(model_steps(AndreaModel(preset(t.config), device="meta"), t.B, t.T))
             for t in timings]
    shares = [t.shares() for t in timings]
    table(["group"] + [f"{t.config} (B={t.B}, T={t.T}): time / FLOPs" for t in timings],
          [[g] + [f"{sh.get(g, 0):.1%} / {fl.get(g, 0) / sum(fl.values()):.1%}"
                  for sh, fl in zip(shares, flops)] for g in GROUPS])


def ops_table(steps, timing, gpu=None) -> None:
    """The aten ops each step dispatched on this machine (`timing.main_ops`) and, from a committed
    GPU timing, the CUDA kernels it ran (at most three per step), labelled with that device."""
    from andrea_edu.pipeline.steps import chapter_link

    head = ["step", "torch code", "aten ops on this machine"]
    rows = [[s.label, f"`{s.op}`", ", ".join(f"`{o}`" for o in timing.main_ops(s.name)),
             chapter_link(s.chapter)] for s in steps]
    if gpu is not None:
        head.append(f"CUDA kernels ({gpu.label()})")
        for r, s in zip(rows, steps):
            r.append(", ".join(f"`{k}`" for k in gpu.kernels.get(s.name, [])[:3]) or "–")
    table(head[:3] + ["explained in"] + head[3:], rows)
