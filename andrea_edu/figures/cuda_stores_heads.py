"""Figures of the chapter "How CUDA stores the heads": memory maps, offsets, the trap, timings.

Every figure is drawn from `andrea_edu.layout` (memory_map, element_offset, head_offsets, runs,
reshape_trap): the pictures show what those functions compute, nothing drawn by hand.
Memory is drawn in address order, wrapped every C = n_head * head_dim elements, so the
[B, T, C] buffer shows one token per row; head h has its `viz.head_color(h)` everywhere.
"""
from __future__ import annotations

import numpy as np

from andrea_edu import layout
from andrea_edu.figures.viz import head_colors, table, text_color_on


def _rgb(hex_colors: list[str]) -> np.ndarray:
    return np.array([[int(c[i:i + 2], 16) / 255 for i in (1, 3, 5)] for c in hex_colors])


def _strip(ax, heads: np.ndarray, width: int, n_head: int, highlight=None, title=""):
    """Draw a flat buffer (head id per offset) wrapped every `width` elements."""
    from matplotlib.ticker import MaxNLocator

    rgb = _rgb(head_colors(n_head))[heads]  # (N, 3)
    if highlight is not None:
        faded = heads != highlight
        rgb[faded] = 0.25 * rgb[faded] + 0.75  # other heads washed out
    rows = heads.size // width
    ax.imshow(rgb.reshape(rows, width, 3), aspect="auto", interpolation="nearest")
    ax.set_title(title, fontsize=9)
    ax.set_xlabel(f"offset mod {width}", fontsize=8)
    ax.set_ylabel(f"offset // {width}", fontsize=8)
    ax.tick_params(labelsize=7)
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))


def memory_map_figure(n_head: int, head_dim: int, T: int = 4, head: int | None = None):
    """One batch item's buffer before and after .contiguous(), coloured by head.

    `head` (default: 1, or 0 when n_head == 1) is drawn in full colour, the others faded, and the
    number of contiguous runs its slice occupies is written in each panel's title.
    """
    import matplotlib.pyplot as plt

    shape = (1, T, n_head, head_dim)
    head = (1 if n_head > 1 else 0) if head is None else head
    C = n_head * head_dim
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.2))
    for ax, name, label in ((axes[0], "BHTD_view", "[B,T,C] buffer (and its views)"),
                            (axes[1], "BHTD", "after .contiguous(): [B,nh,T,hs]")):
        n_runs = len(layout.runs(layout.head_offsets(head, name, shape)))
        _strip(ax, layout.memory_map(name, shape)["h"], C, n_head, head,
               f"{label}\nhead {head}: {n_runs} run(s) of "
               f"{T * head_dim // n_runs} elements")
    fig.suptitle(f"head {head} in memory (n_head={n_head}, head_dim={head_dim}, T={T}, B=1)",
                 fontsize=10)
    fig.subplots_adjust(left=0.07, right=0.98, top=0.76, bottom=0.1, wspace=0.25)
    return fig


def offset_figure(b: int, t: int, h: int, d: int, shape=(2, 4, 3, 4)):
    """Element (b, t, h, d): its offset in every layout, marked on both buffers."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle

    B, T, nh, hs = shape
    C = nh * hs
    fig, axes = plt.subplots(1, 3, figsize=(11, 3.6), gridspec_kw={"width_ratios": [1, 1, 1.15]})
    offsets = {name: layout.element_offset(b, t, h, d, name, shape) for name in layout.LAYOUTS}
    for ax, name, label in ((axes[0], "BTC", "[B,T,C] buffer (view, transposed view)"),
                            (axes[1], "BHTD", "after .contiguous()")):
        mm = layout.memory_map(name, shape)
        _strip(ax, mm["h"], C, nh, None, label)
        cell_rgb = _rgb(head_colors(nh))[mm["h"]]  # (B*T*C, 3): each cell's colour as drawn
        for o in range(B * T * C):  # label each cell with its token
            ax.text(o % C, o // C, str(mm["t"][o]), ha="center", va="center", fontsize=6,
                    color=text_color_on(cell_rgb[o]))
        o = offsets[name]
        ax.add_patch(Rectangle((o % C - 0.5, o // C - 0.5), 1, 1, fill=False, lw=2.5,
                               edgecolor="black"))
    axes[2].axis("off")
    lines = [f"element b={b}, t={t}, h={h}, d={d}", f"shape B={B}, T={T}, nh={nh}, hs={hs}", ""]
    for name in layout.LAYOUTS:
        sb, st, sh, sd = layout.logical_strides(name, shape)
        idx = layout.native_index(name, b, t, h, d, hs)
        lines.append(f"{name:9s} index {idx}")
        lines.append(f"  {b}*{sb} + {t}*{st} + {h}*{sh} + {d}*{sd} = {offsets[name]}")
    axes[2].text(0, 1, "\n".join(lines), va="top", family="monospace", fontsize=8)
    fig.suptitle(f"offset {offsets['BTC']} before the copy, {offsets['BHTD']} after",
                 fontsize=10)
    fig.subplots_adjust(left=0.05, right=0.99, top=0.82, bottom=0.08, wspace=0.3)
    return fig


def trap_figure(T: int = 6, n_head: int = 3, head_dim: int = 4):
    """split_heads vs reshape_without_transpose: which (token, head) each [h, t] slot holds."""
    import matplotlib.pyplot as plt

    rep = layout.reshape_trap(1, T, n_head, head_dim)
    colors = _rgb(head_colors(n_head))
    fig, axes = plt.subplots(1, 2, figsize=(9, 0.45 * T + 1.6))
    panels = (("view + transpose (split_heads)", [(h, t, t, h) for h, t, _, _ in rep.rows]),
              ("reshape without transpose (the trap)", rep.rows))
    for ax, (title, rows) in zip(axes, panels):
        img = np.zeros((T, n_head, 3))
        for h, t, t0, h0 in rows:
            img[t, h] = colors[h0]
            wrong = (t0, h0) != (t, h)
            ax.text(h, t, f"t{t0} h{h0}", ha="center", va="center", fontsize=8,
                    fontweight="bold" if wrong else "normal", color=text_color_on(colors[h0]))
        ax.imshow(img, aspect="auto", interpolation="nearest")
        ax.set_xticks(range(n_head), [f"slot h{h}" for h in range(n_head)], fontsize=8)
        ax.set_yticks(range(T), [f"slot t{t}" for t in range(T)], fontsize=8)
        ax.set_title(title, fontsize=9)
    fig.suptitle(f"[b=0, h, t, :], T={T}, n_head={n_head}: {rep.wrong_head:.0%} in the wrong "
                 f"head with the trap", fontsize=10)
    fig.subplots_adjust(left=0.1, right=0.98, top=0.85, bottom=0.06, wspace=0.3)
    return fig


def matmul_timing_figure(timings: list, device_label: str):
    """Bars per seq_len: q @ k^T on the transposed view, on contiguous copies, and copy + matmul.

    timings: `layout_cost.MatmulTiming` results (one per T); device_label names the machine.
    """
    import matplotlib.pyplot as plt

    Ts = [m.shape[1] for m in timings]
    series = (("strided view", "strided_s", "#d62728"), ("contiguous (copied before)",
              "contiguous_s", "#2ca02c"), ("copy + matmul", "copy_then_matmul_s", "#7f7f7f"))
    fig, ax = plt.subplots(figsize=(8, 3.6))
    x = np.arange(len(Ts))
    for i, (label, attr, color) in enumerate(series):
        ax.bar(x + (i - 1) * 0.27, [getattr(m, attr) * 1e3 for m in timings], 0.27,
               label=label, color=color)
    for xi, m in zip(range(len(Ts)), timings):
        ax.text(xi, max(m.strided_s, m.contiguous_s, m.copy_then_matmul_s) * 1e3,
                f"{m.ratio:.2f}x", ha="center", va="bottom", fontsize=8)
    B, _, nh, hs = timings[0].shape
    ax.set_xticks(x, [f"T={T}" for T in Ts])
    from matplotlib.ticker import ScalarFormatter

    ax.set_ylabel("median time (ms)")
    ax.set_yscale("log")
    ax.yaxis.set_major_formatter(ScalarFormatter())
    ax.margins(y=0.25)
    ax.legend(fontsize=8, loc="upper left")
    ax.set_title(f"q @ k^T for all heads (B={B}, n_head={nh}, head_dim={hs}, "
                 f"{timings[0].dtype}) on {device_label}", fontsize=10)
    fig.subplots_adjust(left=0.09, right=0.98, top=0.88, bottom=0.1)
    return fig


def gpu_table(prov: dict, by: dict, ratio: float | None, why: str) -> None:
    """The committed GPU layout timings (`bench_layout_<gpu>.json`'s ok records, by backend),
    labelled with their device, then the case, and the strided / contiguous ratio or why none
    is stated (bench.timing.checked_ratio's reason)."""
    p = next(iter(by.values()))["params"] if by else {}
    table(["case", "median (ms)", "fastest (ms)", "device"],
          [[name, f"{r['median_ms']:.3f}", f"{r['min_ms']:.3f}", prov["device"]]
           for name, r in by.items()])
    print({"device": prov["device"], "torch": prov["torch"], "CUDA": prov["cuda"],
           "date": prov["date"], **{k: p[k] for k in ("B", "T", "n_head", "head_dim", "dtype")
                                   if k in p}})
    print({"strided / contiguous q @ k^T": round(ratio, 2) if ratio is not None else why or "-"})
