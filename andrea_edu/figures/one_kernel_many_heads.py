"""Figures of the chapter "One kernel, many heads": the launch grid, a block's trace, SM fill.

    grid_figure(B, n_head, sm)                  blocks <-> (b, h) and the SMs they occupy
    trace_steps(trace, order)                   a block's (query tile, K/V step) pairs, in order
    trace_figure(trace, order, step)            what one block has loaded so far, m and l
    occupancy_figure(rows)                      blocks vs SMs and concurrent slots, per batch
    launches_figure(comparisons, device_label)  one call for all heads vs one per (b, h)
    kv_order(order, T)                          an order of the keys, for exercise 4

All numbers come from `andrea_edu.kernels.grid`, `andrea_edu.kernels.occupancy` and the emulator's LaunchTrace;
heads keep their `viz.head_color` everywhere.
"""
from __future__ import annotations

import numpy as np

from andrea_edu.kernels import grid, occupancy, registry
from andrea_edu.figures.viz import head_color, text_color_on


def grid_figure(B: int, n_head: int, sm: dict = occupancy.H200):
    """v1's launch: a B x n_head grid of blocks (blockIdx.x = b*n_head + h), and the SMs."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle

    fill = grid.sm_fill(B, n_head, 1, "v1", sm)
    n_blocks, sms = fill["n_blocks"], sm["sms"]
    fig, (ax, ax_sm) = plt.subplots(2, 1, figsize=(10, 4.6), gridspec_kw={"height_ratios": [3, 1]})
    for b in range(B):
        for h in range(n_head):
            x = grid.block_of(b, h, n_head)
            ax.add_patch(Rectangle((h, B - 1 - b), 0.94, 0.9, facecolor=head_color(h),
                                   edgecolor="black", lw=0.4))
            if n_head * B <= 96:
                ax.text(h + 0.47, B - 0.55 - b, str(x), ha="center", va="center", fontsize=7,
                        color=text_color_on(head_color(h)))
    ax.set_xlim(0, n_head)
    ax.set_ylim(0, B)
    ax.set_xticks([h + 0.47 for h in range(n_head)], [str(h) for h in range(n_head)], fontsize=7)
    ax.set_yticks([B - 0.55 - b for b in range(B)], [str(b) for b in range(B)], fontsize=7)
    ax.set_xlabel("head h", fontsize=8)
    ax.set_ylabel("batch b", fontsize=8)
    ax.set_title(f"grid = ({n_blocks}, 1, 1), blockIdx.x = b x {n_head} + h", fontsize=9)
    cols = 66 if sms > 66 else sms
    for s in range(sms):
        r, c = divmod(s, cols)
        color = head_color(grid.pair_of(s, n_head)[1]) if s < n_blocks else "#e8e8e8"
        ax_sm.add_patch(Rectangle((c, 1 - r), 0.9, 0.85, facecolor=color, edgecolor="#555555",
                                  lw=0.3))
    ax_sm.set_xlim(0, cols)
    ax_sm.set_ylim(-0.1 if sms > cols else 0.9, 2)
    ax_sm.axis("off")
    ax_sm.set_title(f"{sm['name']}: {sms} SMs. {fill['sms_busy_first_wave']} get a block, "
                    f"{fill['idle_sms']} idle ({fill['idle_fraction']:.0%})"
                    + (f"; {n_blocks - sms} more blocks than SMs" if n_blocks > sms else ""),
                    fontsize=9)
    fig.suptitle(f"v1: one block per (batch, head), B={B}, n_head={n_head}", fontsize=10)
    fig.subplots_adjust(left=0.07, right=0.98, top=0.88, bottom=0.05, hspace=0.35)
    return fig


def trace_steps(trace, order: int) -> list[tuple]:
    """[(query tile, K/V step index, KVStep)] of block `order`, in the order it ran them."""
    if not 0 <= order < len(trace.blocks):
        raise ValueError(f"order must be in 0..{len(trace.blocks) - 1}, got {order}")
    return [(qt, i, st) for qt in trace.blocks[order].q_tiles for i, st in enumerate(qt.steps)]


def trace_figure(trace, order: int, step: int):
    """Block `order` after its step `step`: the score region done so far and the running m, l."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle

    blk = trace.blocks[order]
    steps = trace_steps(trace, order)
    if not 0 <= step < len(steps):
        raise ValueError(f"step must be in 0..{len(steps) - 1} for block {order}, got {step}")
    B, nh, T, hs = trace.shape
    fig, (ax, ax_m) = plt.subplots(1, 2, figsize=(10, 4), gridspec_kw={"width_ratios": [1, 1.3]})
    img = np.ones((T, T, 3))
    if trace.causal:
        img[np.triu(np.ones((T, T), dtype=bool), 1)] = (0.85, 0.85, 0.85)  # masked: j > i
    for qt, _, st in steps[: step + 1]:
        done = img[qt.q_start:qt.q_stop, st.k_start:st.k_stop]
        keep = done.sum(axis=-1) < 2.9  # masked cells stay grey
        done[~keep] = (0.62, 0.79, 0.88)
    ax.imshow(img, interpolation="nearest", extent=(0, T, T, 0))
    qt, i, st = steps[step]
    ax.add_patch(Rectangle((st.k_start, qt.q_start), st.k_stop - st.k_start,
                           qt.q_stop - qt.q_start, fill=False, edgecolor=head_color(blk.h), lw=2.5))
    ax.set_xlabel("key j", fontsize=8)
    ax.set_ylabel("query i", fontsize=8)
    ax.set_title(f"scores of (b={blk.b}, h={blk.h})", fontsize=9)
    rows = np.arange(qt.q_start, qt.q_stop)
    if st.row_max is not None:
        # Markers only: each query row keeps its own m and l, so no line joins one row to the next.
        ax_m.plot(rows, st.row_max.numpy(), "o", ls="none", ms=4, color=head_color(blk.h),
                  label="max m (left)")
        ax_l = ax_m.twinx()
        ax_l.plot(rows, st.row_sum.numpy(), "s", ls="none", ms=4, mfc="none", color="#555555",
                  label="sum l (right)")
        ax_l.set_ylabel("running sum l", fontsize=8)
        # below the axes, never on the markers (rows can put m and l anywhere in the panel)
        ax_m.legend(handles=ax_m.lines + ax_l.lines, fontsize=8, loc="upper center",
                    bbox_to_anchor=(0.5, -0.16), ncol=2, frameon=False)
    ax_m.set_xlabel("query row i", fontsize=8)
    ax_m.set_ylabel("running max m", fontsize=8)
    ax_m.set_title(f"after K/V tile {i} (keys {st.k_start}..{st.k_stop - 1}) of query rows "
                   f"{qt.q_start}..{qt.q_stop - 1}", fontsize=9)
    gx, gy = blk.grid_index
    fig.suptitle(f"{trace.kernel}: block blockIdx=({gx}, {gy}) -> (b={blk.b}, h={blk.h}), "
                 f"step {step} of steps 0..{len(steps) - 1} (T={T}, head_dim={hs}, "
                 f"{'causal' if trace.causal else 'not causal'})", fontsize=10)
    fig.subplots_adjust(left=0.07, right=0.93, top=0.85, bottom=0.25, wspace=0.35)
    return fig


def occupancy_figure(rows: list[dict]):
    """Blocks per launch vs batch size, against SMs and concurrent block slots, per GPU.

    rows: dicts with gpu, sms, version, B, n_blocks, slots (= sms x blocks per SM).
    """
    import matplotlib.pyplot as plt

    gpus = list(dict.fromkeys(r["gpu"] for r in rows))
    fig, axes = plt.subplots(1, len(gpus), figsize=(5.2 * len(gpus), 3.9), squeeze=False)
    versions = [v for v in registry.versions() if any(r["version"] == v for r in rows)]
    styles = {v: (registry.color(v), "os^Dv"[i % 5]) for i, v in enumerate(versions)}
    for ax, gpu in zip(axes[0], gpus):
        mine = [r for r in rows if r["gpu"] == gpu]
        sms = mine[0]["sms"]
        for version, (color, marker) in styles.items():
            rs = [r for r in mine if r["version"] == version]
            if not rs:
                continue
            Bs = [r["B"] for r in rs]
            ax.plot(Bs, [r["n_blocks"] for r in rs], marker=marker, color=color,
                    label=f"{version} blocks per launch")
            ax.axhline(rs[0]["slots"], color=color, ls=(0, (3, 2)), lw=1.8,
                       label=f"{version}: {rs[0]['slots']} blocks fit at once "
                             f"({rs[0]['slots'] // sms}/SM)")
        ax.axhline(sms, color="black", ls="--", lw=1, label=f"{sms} SMs")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xticks(Bs, [str(b) for b in Bs])
        ax.set_xlabel("batch B", fontsize=8)
        ax.set_ylabel("thread blocks", fontsize=8)
        ax.set_title(gpu, fontsize=9)
        ax.legend(fontsize=6.5, loc="upper left")
    T, nh = rows[0]["T"], rows[0]["n_head"]
    fig.suptitle(f"ANDREA-120M attention, n_head={nh}, T={T}", fontsize=10)
    fig.subplots_adjust(left=0.08, right=0.98, top=0.86, bottom=0.14, wspace=0.25)
    return fig


def launches_figure(comparisons: list, device_label: str):
    """Bars: one attention() call for all heads vs one call per (b, h), per backend."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3.4))
    x = np.arange(len(comparisons))
    ax.bar(x - 0.2, [c.batched_s * 1e3 for c in comparisons], 0.4, color="#2ca02c",
           label="one call, all heads")
    ax.bar(x + 0.2, [c.looped_s * 1e3 for c in comparisons], 0.4, color="#d62728",
           label="one call per (b, h)")
    for xi, c in zip(x, comparisons):
        ax.text(xi + 0.2, c.looped_s * 1e3, f"{c.ratio:.1f}x", ha="center", va="bottom",
                fontsize=8)
    ax.set_xticks(x, [c.backend for c in comparisons])
    ax.set_ylabel("median time (ms)")
    ax.set_yscale("log")
    ax.margins(y=0.2)
    ax.legend(fontsize=8)
    B, nh, T, hs = comparisons[0].shape
    ax.set_title(f"{B * nh} (b, h) pairs (B={B}, n_head={nh}, T={T}, head_dim={hs}) on "
                 f"{device_label}", fontsize=9)
    fig.subplots_adjust(left=0.12, right=0.98, top=0.88, bottom=0.12)
    return fig


# ---------------------------------------------------------------- the exercises' helpers
KV_ORDERS = ("as stored", "reversed", "shuffled")


def kv_order(order: str, T: int, seed: int = 0):
    """An order of the T keys (and their values): "as stored", "reversed", or "shuffled" (a
    random permutation from `seed`). Index k and v with it together, along the T axis."""
    import torch

    if order not in KV_ORDERS:
        raise ValueError(f"order={order!r}: allowed values are {', '.join(map(repr, KV_ORDERS))}")
    grid._pos_int("T", T)
    if order == "as stored":
        return torch.arange(T)
    if order == "reversed":
        return torch.arange(T - 1, -1, -1)
    return torch.randperm(T, generator=torch.Generator().manual_seed(seed))
