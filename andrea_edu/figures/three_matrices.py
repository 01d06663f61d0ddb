"""Figures of the chapter "Three matrices per head, or one big matrix".

The chapter's live measurement (``projection_sweep``: BLAS calls, validation, then time per way)
is ``andrea_edu.bench.matmuls``; the committed, provenance-carrying version of the same
comparison is ``python -m andrea_lab.bench projections``. This module draws and formats.
- ``fig_fused_matrix``: W_Q with the column blocks W_Q^h coloured, beside the per-head view.
- ``fig_projection_timings``: BLAS calls and time per way for one (n_head, head_dim).
- ``tensor_core_claim``: the GPU claim's box row; ``committed_projection_rows``: the committed GPU
  measurement's rows, when one exists (the chapter tabulates them).
Names: B batch, T seq_len, C d_model, nh n_head, hs head_dim.
"""
from __future__ import annotations


import torch

from andrea_edu import projections as P
from andrea_edu.bench.matmuls import projection_roofline
from andrea_edu.kernels import gpus
from andrea_edu.figures.viz import head_colors

WAYS = ("per-head", "fused", "c_attn")


# ------------------------------------------------------------------ figures
def _tint_column_blocks(ax, n_head: int, C: int, alpha: float = 0.38):
    """Tint column block h (head h's columns) of a [C, C] image in head h's colour."""
    from matplotlib.patches import Rectangle

    hs = C // n_head
    for h, color in enumerate(head_colors(n_head)):
        ax.add_patch(Rectangle((h * hs - 0.5, -0.5), hs, C, facecolor=color, alpha=alpha,
                               edgecolor=color, lw=0.8))


def fig_fused_matrix(W: torch.Tensor, n_head: int, name: str = "W_Q"):
    """Left: fused W [C, C] with head h's column block tinted in its colour. Right: the same
    numbers as n_head separate [C, hs] matrices (``fused_to_per_head``), drawn apart."""
    import matplotlib.pyplot as plt

    C = W.shape[0]
    hs = C // n_head
    Wh = P.fused_to_per_head(W, n_head)  # (nh, C, hs)
    lim = float(W.abs().max())
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4.6), gridspec_kw={"width_ratios": [1, 1.5]})
    a.imshow(W.float().cpu().numpy(), cmap="gray", vmin=-lim, vmax=lim, interpolation="nearest")
    _tint_column_blocks(a, n_head, C)
    step = max(1, n_head // 6)
    a.set_xticks([h * hs + hs / 2 for h in range(0, n_head, step)])
    a.set_xticklabels([f"h{h}" for h in range(0, n_head, step)])
    a.set_ylabel(f"input feature (row 0:{C})")
    a.set_title(f"fused {name} [{C} x {C}]\ncolumn block h = {name}^h", fontsize=10)
    gap = max(1, hs // 4)
    for h, color in enumerate(head_colors(n_head)):
        x0 = h * (hs + gap)
        b.imshow(Wh[h].float().cpu().numpy(), cmap="gray", vmin=-lim, vmax=lim,
                 extent=(x0, x0 + hs, C, 0), interpolation="nearest")
        b.add_patch(plt.Rectangle((x0, 0), hs, C, fill=False, edgecolor=color, lw=2.5))
    b.set_xlim(-gap, n_head * (hs + gap))
    b.set_ylim(C, 0)
    b.set_aspect("auto")
    b.set_xticks([h * (hs + gap) + hs / 2 for h in range(0, n_head, step)])
    b.set_xticklabels([f"{name}^{h}" for h in range(0, n_head, step)], fontsize=8)
    b.set_title(f"per-head view: {n_head} matrices [{C} x {hs}], the same numbers", fontsize=10)
    fig.suptitle(f"One {name}, two views (d_model={C}, n_head={n_head}, head_dim={hs})")
    fig.text(0.5, 0.01, "Grey: weight value. Colour: which head owns the column. Each per-head "
             "matrix on the right is a column block on the left.", ha="center", fontsize=8)
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    return fig


def fig_projection_timings(sweep: dict, n_head: int, head_dim: int, device_label: str,
                           shape_label: str):
    """Left: BLAS calls per way at this n_head. Right: median time per way over every n_head of
    the sweep, this one marked."""
    import matplotlib.pyplot as plt

    colors = {"per-head": "#d62728", "fused": "#1f77b4", "c_attn": "#2ca02c"}
    res = sweep[n_head]
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 3.8))
    calls = [res[w]["blas_calls"] for w in WAYS]
    bars = a.bar(WAYS, calls, color=[colors[w] for w in WAYS])
    a.bar_label(bars, labels=[str(c) for c in calls])
    a.set_yscale("log")
    a.set_ylim(0.5, max(3 * max(calls), 10))
    a.set_ylabel("matmul (BLAS) calls for Q, K, V")
    a.set_title(f"n_head={n_head}, head_dim={head_dim}: calls counted", fontsize=10)
    nhs = sorted(sweep)
    for w in WAYS:
        b.plot(nhs, [sweep[n][w]["min_ms"] for n in nhs], "o-", color=colors[w], label=w, ms=4)
        b.plot([n_head], [res[w]["min_ms"]], "o", color=colors[w], ms=10, mfc="none", mew=2)
    b.axvline(n_head, color="#999999", lw=0.8, ls="--")
    b.set_xscale("log", base=2)
    b.set_xticks(nhs)
    b.set_xticklabels([str(n) for n in nhs], fontsize=7)
    b.set_xlabel("n_head (head_dim = d_model / n_head)")
    b.set_ylabel("time, ms (fastest of the repeats)")
    b.set_ylim(bottom=0)
    b.legend(fontsize=8)
    from andrea_edu.bench.timing import checked_ratio
    ratio, why = checked_ratio(res["per-head"], res["fused"], key="min_ms")
    b.set_title(f"per-head / fused = {ratio:.2f}x at n_head={n_head}" if ratio is not None else
                f"n_head={n_head}: no ratio stated (a timing fails the check)", fontsize=10)
    fig.suptitle(f"Q, K, V projections three ways, {shape_label}, measured on {device_label}",
                 fontsize=10)
    fig.tight_layout()
    return fig


def committed_projection_rows(results: dict | None) -> list[dict]:
    """Rows of a committed ``bench projections`` results object (``bench_results.load_results``),
    status "ok" only: {n_head, way, blas_calls, median_ms, tflops, ratio_to_fused}."""
    if not results:
        return []
    rows = []
    for r in results.get("records", []):
        if r.get("status") != "ok":
            continue
        rows.append({"n_head": r["params"].get("n_head"), "way": r["backend"],
                     "blas_calls": r.get("blas_calls"), "median_ms": r.get("median_ms"),
                     "tflops": r.get("tflops"), "ratio_to_fused": r.get("time_ratio_to_fused"),
                     **{k: r[k] for k in ("p25_ms", "p75_ms", "quality_ok", "quality_reason")
                        if k in r}})
    return sorted(rows, key=lambda x: (x["n_head"] or 0, x["way"]))


# ---------------------------------------------------------------- the tensor-core claim
def tensor_core_claim(gpu_results, n_head: int, cpu_ratio_12: float | None,
                      cpu_ratio_big: float | None, big: int, timing_label: str, rows: int,
                      cpu_why: str = "") -> tuple[str, str]:
    """(measured, verdict) for "tensor cores reach peak throughput on matmuls of this size;
    per-head matmuls would underuse the hardware". Without a committed GPU file the verdict is
    "not yet measured"; with one it is rated from the GPU's per-head/fused ratio and, where the
    GPU's published peak is known, the fused projection's share of it. A ratio rests only on
    timings that pass bench.timing.timing_ok: a CPU ratio given as None is not stated (cpu_why
    says why), and a GPU file whose per-head or fused timing fails the check is not rated."""
    from andrea_edu.bench.timing import checked_ratio, refusal
    from andrea_edu.figures.verdicts import NOT_MEASURED

    # a calculation (bench.matmuls), not a measurement: for the measured GPU where the book
    # cites its peak (matched by its device record), else the fallback that calc["gpu"] names
    measured_key = gpus.by_device(gpu_results) if gpu_results else None
    calc = projection_roofline(rows, gpu=measured_key if gpus.published_peak(gpu_results)
                               else None)
    bound = "memory" if calc["compute_s"] < calc["memory_s"] else "compute"
    calc_text = (f"Calculation from the {calc['gpu']}'s published peak ({calc['source']}): at "
                 f"B·T = {rows} one 768×768 bf16 projection takes {calc['compute_s'] * 1e6:.2f} µs "
                 f"at peak and {calc['memory_s'] * 1e6:.2f} µs to move its bytes ({bound}-bound); "
                 f"compute-bound from B·T ≈ {calc['compute_bound_from_rows']}.")
    by = {(r["n_head"], r["way"]): r for r in committed_projection_rows(gpu_results)}
    per, fused = by.get((n_head, "per-head")), by.get((n_head, "fused"))
    cpu_text = (f"On {timing_label} (no tensor cores) per-head takes {cpu_ratio_12:.2f}x the "
                f"fused time at n_head={n_head}, {cpu_ratio_big:.2f}x at n_head={big}."
                if cpu_ratio_12 is not None and cpu_ratio_big is not None else
                f"On {timing_label}: {refusal('per-head / fused ratio', cpu_why)}.")
    if not (per and fused and per["median_ms"] and fused["median_ms"]):
        return (f"No GPU measurement committed yet: the tensor-core part is not measured. "
                f"{calc_text} {cpu_text}", NOT_MEASURED)
    device = gpu_results["provenance"]["device"]
    ratio, why = checked_ratio(per, fused)
    if ratio is None:
        return (f"On {device} (committed): {refusal('per-head / fused ratio', why)}. "
                f"{calc_text} {cpu_text}", NOT_MEASURED)
    spec = gpus.published_peak(gpu_results)  # the device's whole name (and SM count) -> its peak
    peak = spec["bf16_tflops"] if spec else None  # dense bf16, TFLOP/s
    share = fused["tflops"] / peak if peak and fused.get("tflops") else None
    text = (f"On {device} (committed): per-head takes {ratio:.2f}x the fused time at "
            f"n_head={n_head}"
            + (f"; the fused projection reaches {fused['tflops']:.3g} TFLOP/s, {share:.0%} of the "
               f"published dense bf16 peak." if share is not None else
               f"; the book cites no peak for {device}, so no share of peak is stated.")
            + f" {calc_text}")
    if ratio <= 1.1:
        return text, "does not hold"
    return text, ("holds" if share is not None and share >= 0.5 else "holds with a caveat")
