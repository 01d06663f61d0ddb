"""Figures of the chapter "Reading the pipeline": a token's journey through one layer.

Every shape and number is read from a real run (`pipeline.tracer.Trace`), never typed in.
"""
from __future__ import annotations

import numpy as np

from andrea_edu.figures.viz import text_color_on


def _shape(s) -> str:
    return "[" + ", ".join(str(v) for v in s) + "]"


def journey_figure(trace):
    """One token's first features at every step of one layer (rows), with shapes and strides."""
    import matplotlib.pyplot as plt

    vals = np.array([r.values for r in trace.rows])  # (steps, n)
    ylabels = [f"{r.label}  {_shape(r.shape)} strides {_shape(r.strides)}"
               + ("  (view)" if r.view_of_previous else "") for r in trace.rows]
    fig, ax = plt.subplots(figsize=(11, 0.42 * len(trace.rows) + 1.8))
    lim = float(np.abs(vals).max()) or 1.0
    im = ax.imshow(vals, cmap="RdBu_r", vmin=-lim, vmax=lim, aspect="auto",
                   interpolation="nearest")
    rgba = im.to_rgba(vals)  # (steps, n, 4): each cell's colour as drawn
    for i, row in enumerate(vals):
        for j, v in enumerate(row):
            ax.text(j, i, f"{v:+.3f}", ha="center", va="center", fontsize=8,
                    color=text_color_on(rgba[i, j]))
    ax.set_xticks(range(vals.shape[1]), [f"feature {i}" for i in range(vals.shape[1])])
    ax.set_yticks(range(len(ylabels)), ylabels, fontsize=8)
    ax.set_title(f"token {trace.token_id} (t={trace.t}), layer {trace.layer} of {trace.config}",
                 fontsize=10)
    fig.subplots_adjust(left=0.44, right=0.98, top=1 - 0.9 / fig.get_figheight(),
                        bottom=0.75 / fig.get_figheight())
    return fig



def differences_table(diffs) -> tuple[list, list]:
    """(header, rows) of `tracer.differences(a, b)`: one row per step that differs, or one row
    saying none does."""
    return (["step", "what differs from the chapter's trace"],
            [list(d) for d in diffs] or [["-", "nothing"]])


MATMULS = ("qkv", "W_O", "mlp_up", "mlp_down")
VIEWS = ("split_qkv", "view_heads", "transpose")


def cost_table(rows, timing, noise, ops) -> tuple[list, list]:
    """(header, rows): per traced step (`rows`, the trace's rows after the input) its fastest and
    median time (`pipeline.timing.time_block`), what its cost predicts and the noise flag
    (`timing.step_noise`: "no", or why), the bytes it wrote and its aten ops ({step: [ops]})."""
    return (["step", "fastest (ms)", "median (ms)", "its cost predicts (ms)", "noise?",
             "new memory (bytes)", "aten ops"],
            [[r.label, f"{timing[r.step]['min_ms']:.3f}", f"{timing[r.step]['median_ms']:.3f}",
              f"{noise[r.step]['predicted_ms']:.3f}", noise[r.step]["noise"] or "no",
              f"{r.bytes_written:,}", ", ".join(ops[r.step])] for r in rows])


def cost_summary(timing, noise, labels) -> dict:
    """What the layer's timing says, from each step's fastest run: the four matmuls' share, the
    three views' time and the layer's; or, when any step is flagged (`timing.step_noise`), only
    {"flagged": {label: why}}: no share rests on a run with a scheduler spike in it.
    labels: {step: its label}."""
    flagged = {labels[n]: noise[n]["noise"] for n in timing if noise[n]["noise"]}
    if flagged:
        return {"flagged": flagged}
    total = sum(t["min_ms"] for t in timing.values())
    mm = sum(timing[n]["min_ms"] for n in MATMULS)
    return {"four matmuls' share": f"{mm / total:.0%}",
            "three views (ms)": round(sum(timing[n]["min_ms"] for n in VIEWS), 3),
            "layer (ms)": round(total, 3)}


def mixing_table(rows) -> tuple[list, list]:
    """(header, rows) of `tracer.head_mixing`: per head, the output features it reaches and its
    share of their squared W_O weight (min / median / max; even: 1 / n_head)."""
    return (["head", "output features it reaches", "share: min / median / max"],
            [[r["head"], f"{r['reaches']:.0%}",
              f"{r['share_min']:.2f} / {r['share_median']:.2f} / {r['share_max']:.2f}"]
             for r in rows])


def show(markdown_table: str) -> None:
    """Display a Markdown table the computation returned (e.g. `Trace.table()`)."""
    from IPython.display import Markdown, display

    display(Markdown(markdown_table))
