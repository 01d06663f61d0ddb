"""Figures of the chapter "The configuration mirrors the hardware".

    draw_tile_coverage(ax, seq_len, head_dim)   a head's slice in 16x16 tiles, padding hatched
    mma_shapes_figure()                         WMMA and mma.sync at API/PTX/SASS level, to scale
    draw_throughput(ax, results, head_dim)      measured TFLOP/s vs head_dim, head_dim marked (a
                                                CPU's panel says it cannot show tile effects)
    curves(results, shape, series)              {backend: [(head_dim, record)]} of "ok" records
    draw_evidence_strip(ax, sweep, head_dim, padded)  instructions per score of the dispatched
                                                kernel per head_dim, pad=False and pad=True side by side
    draw_model_band(ax, sweep, head_dim, measured, padded=...)  the time MODEL per head_dim,
                                                hatched, beside published kernels (points) and
                                                measurements
    head_dim_figure(head_dim, sweep, padded=...)  the slider's frame, three panels, legible at the
                                                book's content width; sweeps from
                                                kernels.head_dim_evidence (pad=False, pad=True)
    head_dim_rows(sweep, padded)                the frame's numbers (the chapter tabulates them
                                                under the slider with viz.table)
    measurement_source(res)                     where a results file came from (a dict)
    flash_utilization_figure, sdpa_eligibility, same_d_model   the exercises' helpers

Every timing panel names the device it was measured on; CPU results say CPU; no results, no
curve (the panel says that no measurement exists).
"""
from __future__ import annotations

from typing import Any

import matplotlib.pyplot as plt
import torch
from matplotlib.patches import Rectangle

from andrea_edu.data import provenance
from andrea_edu.figures.viz import plain_log
from andrea_edu.kernels import registry, tiles

BACKEND_STYLE = {  # backend -> (colour, marker, label)
    "cuda-wmma": ("#d62728", "o", "cuda-wmma (ours, tensor cores)"),
    "cuda-naive": ("#ff7f0e", "s", "cuda-naive (ours, v1)"),
    "sdpa": ("#1f77b4", "^", "torch SDPA (its own choice)"),
    "sdpa:flash": ("#17becf", "v", "SDPA flash only"),
    "sdpa:efficient": ("#9467bd", "<", "SDPA mem-efficient only"),
    "sdpa:cudnn": ("#2ca02c", ">", "SDPA cuDNN only"),
    "sdpa:math": ("#8c564b", "x", "SDPA math only"),
    "reference": ("#7f7f7f", "d", "reference (plain torch)"),
}


def draw_tile_coverage(ax, seq_len: int, head_dim: int, tile: int = tiles.TILE,
                       rows_shown: int = 128):
    """Rows 0..rows_shown of one head's [seq_len, head_dim] slice, tiled tile x tile: data in
    blue, padding hatched red; the title gives the utilization of the whole slice."""
    cov = tiles.tile_coverage(seq_len, head_dim, tile)
    rows = min(seq_len, rows_shown)
    shown_tiles = -(-rows // tile)
    ax.add_patch(Rectangle((0, 0), head_dim, rows, facecolor="#9ecae1", edgecolor="none"))
    if cov.padded_cols > head_dim:
        ax.add_patch(Rectangle((head_dim, 0), cov.padded_cols - head_dim, shown_tiles * tile,
                               facecolor="#fcbba1", edgecolor="#cb181d", hatch="///", lw=0))
    if shown_tiles * tile > rows:
        ax.add_patch(Rectangle((0, rows), head_dim, shown_tiles * tile - rows,
                               facecolor="#fcbba1", edgecolor="#cb181d", hatch="///", lw=0))
    for i in range(shown_tiles):
        for j in range(cov.col_tiles):
            ax.add_patch(Rectangle((j * tile, i * tile), tile, tile, fill=False,
                                   edgecolor="#08306b", lw=0.7))
    ax.set_xlim(0, 128 + tile)
    ax.set_ylim(shown_tiles * tile, 0)
    ax.set_aspect("equal")
    ax.set_xticks(range(0, 128 + tile + 1, 2 * tile))
    ax.set_xlabel("head_dim (columns)")
    ax.set_ylabel(f"seq_len rows (first {rows} of {seq_len})")
    ax.set_title(f"head_dim={head_dim}: {cov.col_tiles} x {tile}-wide tiles, "
                 f"{cov.utilization:.1%} useful", fontsize=10, y=1.0)
    return cov


# The three levels at which a tensor-core multiply is written, kept apart (PTX ISA, "Warp Level
# Matrix Multiply-Accumulate Instructions": wmma.mma's shapes are .m16n16k16/.m8n32k16/.m32n8k16,
# mma's f16/bf16 shapes .m8n8k4/.m16n8k8/.m16n8k16). The SASS line is what ptxas made of our
# kernels for sm_80/sm_89/sm_90 (cuobjdump --dump-sass; the chapter shows it live).
MMA_LEVELS: tuple[dict[str, Any], ...] = (
    {"name": "WMMA (our v2)", "mnk": (16, 16, 16), "hmma_per_op": 2,
     "levels": (("CUDA C++ API", "nvcuda::wmma::mma_sync\non 16x16x16 fragments"),
                ("PTX", "wmma.mma.sync.aligned\n.row.col.m16n16k16.f32..."),
                ("SASS (sm_80/89/90)", "2 x HMMA.16816.F32"))},
    {"name": "raw PTX mma.sync (our v3)", "mnk": (16, 8, 16), "hmma_per_op": 1,
     "levels": (("CUDA C++", "inline asm\n(no C++ API)"),
                ("PTX", "mma.sync.aligned\n.m16n8k16.row.col.f32..."),
                ("SASS (sm_80/89/90)", "1 x HMMA.16816.F32"))},
)


def _draw_matrix(ax, x, y, w, h, label, color, split_at=None):
    """A w x h matrix at (x, y) (y grows downwards), one cell per element, label above it.

    split_at: draw a dashed line after that many columns (where one instruction's part ends)."""
    ax.add_patch(Rectangle((x, y), w, h, facecolor=color, edgecolor="black", lw=1))
    for i in range(1, h):
        ax.plot([x, x + w], [y + i, y + i], color="white", lw=0.3)
    for j in range(1, w):
        ax.plot([x + j, x + j], [y, y + h], color="white", lw=0.3)
    if split_at is not None and split_at < w:
        ax.plot([x + split_at, x + split_at], [y - 0.3, y + h + 0.3], color="#cb181d", lw=1.6,
                ls="--")
    ax.text(x + w / 2, y - 0.8, label, ha="center", va="bottom", fontsize=8)


def _draw_levels(ax, levels):
    """Three stacked boxes, API -> PTX -> SASS, in axes coordinates."""
    from matplotlib.patches import FancyBboxPatch

    ax.axis("off")
    ys = (0.70, 0.38, 0.06)
    for (level, code), y in zip(levels, ys):
        ax.add_patch(FancyBboxPatch((0.02, y), 0.96, 0.25, boxstyle="round,pad=0.01",
                                    transform=ax.transAxes, facecolor="#f3f3f3",
                                    edgecolor="#888888", lw=0.8))
        ax.text(0.05, y + 0.2, level, transform=ax.transAxes, ha="left", va="center",
                fontsize=7.5, fontweight="bold", color="#333333")
        ax.text(0.05, y + 0.085, code, transform=ax.transAxes, ha="left", va="center",
                fontsize=7, family="monospace", linespacing=1.1)
    for y_from, y_to in ((ys[0], ys[1] + 0.25), (ys[1], ys[2] + 0.25)):
        ax.annotate("", xy=(0.9, y_to + 0.005), xytext=(0.9, y_from - 0.005),
                    xycoords="axes fraction", arrowprops={"arrowstyle": "->", "lw": 0.9})


def mma_shapes_figure():
    """The two warp-level tensor-core paths of this book's kernels, each at its three levels
    (CUDA C++ API, PTX, SASS), with the shapes drawn to scale (one cell = one element)."""
    fig = plt.figure(figsize=(10, 5.6))
    gs = fig.add_gridspec(2, 2, width_ratios=[1, 1.9], left=0.02, right=0.99, top=0.88,
                          bottom=0.03, hspace=0.4, wspace=0.04)
    for row, path in enumerate(MMA_LEVELS):
        m, n, k = path["mnk"]
        _draw_levels(fig.add_subplot(gs[row, 0]), path["levels"])
        ax = fig.add_subplot(gs[row, 1])
        split = 8 if path["hmma_per_op"] == 2 else None
        _draw_matrix(ax, 0, 0, k, m, f"A: {m} x {k}", "#9ecae1")
        ax.text(k + 2, m / 2, "x", ha="center", va="center", fontsize=14)
        _draw_matrix(ax, k + 4, 0, n, k, f"B: {k} x {n}", "#a1d99b", split)
        ax.text(k + n + 6, m / 2, "=", ha="center", va="center", fontsize=14)
        _draw_matrix(ax, k + n + 8, 0, n, m, f"C (+=): {m} x {n}", "#fdae6b", split)
        ax.set_xlim(-1, 2 * 16 + 16 + 9)  # same scale in both rows
        ax.set_ylim(max(m, k) + 4.5, -3.5)
        ax.set_aspect("equal")
        ax.axis("off")
        ax.set_title(f"{path['name']}: m{m} n{n} k{k}, {2 * m * n * k} FLOPs", fontsize=9)
    fig.suptitle("Tensor-core shapes: CUDA C++ API -> PTX -> SASS", fontsize=10)
    return fig


def curves(results, shape: str = "ANDREA-120M", series: str = "n_head=12") -> dict:
    """{backend: [(head_dim, record), ...]} of the "ok" records of one shape and series."""
    out: dict[str, list] = {}
    for r in (results or {}).get("records", []):
        p = r["params"]
        if r["status"] == "ok" and p.get("shape") == shape and p.get("series") == series:
            out.setdefault(r["backend"], []).append((p["head_dim"], r))
    return {b: sorted(v, key=lambda t: t[0]) for b, v in out.items()}


def device_label(results) -> str:
    """'NVIDIA H200' or 'CPU: <model> (CPU, reduced shapes)': where the numbers came from."""
    prov = results["provenance"]
    if prov["device_kind"] == "cpu":
        return f"{prov['device']} (CPU, reduced shapes)"
    return prov["device"]


def draw_throughput(ax, results, head_dim: int, shape: str = "ANDREA-120M",
                    series: str = "n_head=12", backends=("cuda-wmma", "cuda-naive", "sdpa",
                                                         "sdpa:flash", "sdpa:math")):
    """Measured TFLOP/s vs head_dim per backend, with head_dim marked; says so when no data."""
    if not results:
        ax.text(0.5, 0.5, "not measured", ha="center", va="center", transform=ax.transAxes,
                fontsize=11)
        ax.set_axis_off()
        return {}
    cs = curves(results, shape, series)
    for b in backends:
        if b not in cs:
            continue
        color, marker, label = BACKEND_STYLE.get(b, ("black", ".", b))
        xs = [h for h, _ in cs[b]]
        ax.plot(xs, [r["tflops"] for _, r in cs[b]], marker=marker, color=color, label=label,
                ms=4, lw=1.2)
    ax.axvline(head_dim, color="black", ls="--", lw=1)
    for x in range(16, 129, 16):
        ax.axvline(x, color="#dddddd", lw=0.6, zorder=0)
    s = results["settings"]["shapes"].get(shape, {})
    ax.set_xlabel("head_dim")
    ax.set_ylabel("TFLOP/s")
    ax.set_title(f"{device_label(results)}\n{shape}, {series}, "
                 f"B={s.get('B')}, T={s.get('T')}, {results['settings']['dtype']}", fontsize=9)
    ax.legend(fontsize=7, loc="best")
    return cs


PUBLISHED_MARKERS = {"FlashAttention-2": "o", "cuDNN": "s", "FlashAttention-3": "^"}


def _vcolor(version) -> str:
    """A kernel version's colour (registry.color, as in the worklog); no kernel (torch's sdpa
    runs): purple."""
    return registry.color(version) if version in registry.versions() else "#9467bd"


# The slider's frame is drawn FRAME_WIDTH_IN wide with no text under FRAME_MIN_PT: shown at the
# content width of the built book at a 1280-px window (slider.CONTENT_PX, every frame spans it),
# its smallest text reads at about 9 pt (slider.displayed_pt; tests/test_head_dim_slider.py).
FRAME_WIDTH_IN = 7.6
FRAME_MIN_PT = 10
_OFFSET = {False: -0.2, True: 0.2}   # pad=False (falls back): left bar; pad=True (pads): right


def _worlds(sweep: list[dict], padded: list[dict] | None) -> list[tuple[bool, list[dict]]]:
    """[(pad, rows)]: the fallback world, and the padded one when given."""
    return [(False, sweep)] + ([(True, padded)] if padded is not None else [])


def _bar_x(i: int, pad: bool, two: bool) -> float:
    return i + (_OFFSET[pad] if two else 0.0)


def _head_dim_axis(ax, sweep: list[dict]):
    ax.set_xticks(range(len(sweep)), [str(r["head_dim"]) for r in sweep],
                  fontsize=FRAME_MIN_PT, rotation=90)
    ax.tick_params(axis="y", labelsize=FRAME_MIN_PT)
    ax.set_xlim(-0.6, len(sweep) - 0.4)


def draw_evidence_strip(ax, sweep: list[dict], head_dim: int, padded: list[dict] | None = None):
    """All instructions one warp issues per score in the SASS of the kernel the dispatcher runs
    at each head_dim of the sweep (kernels.head_dim_evidence.sweep), log scale, coloured by that
    kernel; with `padded` (the same sweep with pad=True) two bars per head_dim: left the
    fallback world (pad=False), right the padded one. head_dim's bars outlined in black."""
    two = padded is not None
    finite: list[float] = []
    for pad, rows in _worlds(sweep, padded):
        for i, r in enumerate(rows):
            val = r.get("instr_per_score") or float("nan")
            finite += [val] if val == val else []
            ax.bar(_bar_x(i, pad, two), val, 0.38 if two else 0.8, color=_vcolor(r["version"]),
                   edgecolor="black" if r["head_dim"] == head_dim else "none", linewidth=1.5)
    ax.set_yscale("log")
    plain_log(ax.yaxis)  # no mathtext: a live slider draws on a background thread
    ax.set_ylim(min(finite) / 2, max(finite) * 3)
    _head_dim_axis(ax, sweep)
    ax.set_ylabel("instructions\nper score (log)", fontsize=FRAME_MIN_PT)
    versions = sorted({r["version"] for _, rows in _worlds(sweep, padded) for r in rows
                       if r["version"]}, key=registry.versions().index)
    handles = [Rectangle((0, 0), 1, 1, color=_vcolor(v)) for v in versions]
    ax.legend(handles, versions, fontsize=FRAME_MIN_PT, loc="upper left", ncol=len(versions),
              frameon=False, handlelength=1.0, columnspacing=0.8, borderaxespad=0.2)
    ax.set_title("Compiled evidence (sm_90 SASS)" + (": left bar pad=False, right pad=True"
                                                      if two else ""), fontsize=FRAME_MIN_PT + 1)


def draw_model_band(ax, sweep: list[dict], head_dim: int, measured: dict | None = None,
                    gpu: str = "H200", padded: list[dict] | None = None,
                    measured_padded: dict | None = None):
    """The time MODEL per head_dim as a hatched band (bottom: every term overlapped, top: no
    overlap), published kernels as points (never joined), and measurements, when `measured`
    {head_dim: bench.dispatched point} has them, as filled points with their device. With
    `padded` (pad=True's sweep) two bands per head_dim, left pad=False, right pad=True, and
    `measured_padded` the padded world's points."""
    two = padded is not None
    for pad, rows in _worlds(sweep, padded):
        for i, r in enumerate(rows):
            m = (r.get("model") or {}).get(gpu)
            if not m:
                continue
            ax.bar(_bar_x(i, pad, two), m["upper_us"] - m["lower_us"], 0.36 if two else 0.75,
                   bottom=m["lower_us"], facecolor="none", edgecolor=_vcolor(r["version"]),
                   hatch="////", linewidth=1.0,
                   label="MODEL (hatched)"
                   if (i, pad) == (0, False) else None)
    seen: set[str] = set()
    for i, r in enumerate(sweep):
        for b in r.get("published") or []:
            lab = None
            if b["kernel"] not in seen:
                seen.add(b["kernel"])
                lab = f"{b['kernel']}, published" + ("*" if b["extrapolated"] else "")
            ax.scatter([i], [b["us"]], marker=PUBLISHED_MARKERS.get(b["kernel"], "D"), s=30,
                       facecolor="white", edgecolor="black", zorder=3, label=lab)
    device = None
    for pad, pts in ((False, measured), (True, measured_padded)):
        world = padded if pad else sweep
        for i, r in enumerate(world or []):
            pt = (pts or {}).get(r["head_dim"])
            if not pt:
                continue
            device = pt["device"]
            x = _bar_x(i, pad, two)
            if pt["kernel"].get("us"):
                ax.scatter([x], [pt["kernel"]["us"]], marker="*", s=90,
                           color=_vcolor(r["version"]), edgecolor="black", zorder=4,
                           label="measured: dispatched kernel" if "k" not in seen else None)
                seen.add("k")
            if pt["sdpa"].get("us"):
                ax.scatter([x], [pt["sdpa"]["us"]], marker="P", s=50, color="#2ca02c",
                           edgecolor="black", zorder=4,
                           label="measured: torch SDPA" if "s" not in seen else None)
                seen.add("s")
    i = next(k for k, r in enumerate(sweep) if r["head_dim"] == head_dim)
    ax.axvspan(i - 0.5, i + 0.5, color="#fff2a8", zorder=0)
    ax.set_yscale("log")
    plain_log(ax.yaxis)
    _head_dim_axis(ax, sweep)
    ax.set_xlabel("head_dim", fontsize=FRAME_MIN_PT)
    ax.set_ylabel("µs per launch (log)", fontsize=FRAME_MIN_PT)
    r0 = sweep[0]
    what = f"measured on {device}, MODEL" if device else "MODEL, no GPU measurement"
    ax.set_title(f"Time, {gpu}, B={r0['B']}, n_head={r0['n_head']}, T={r0['T']}, causal:\n"
                 f"{what}", fontsize=FRAME_MIN_PT + 1)
    ax.legend(fontsize=FRAME_MIN_PT, loc="upper left", bbox_to_anchor=(-0.12, -0.3), ncol=2,
              frameon=False)


def head_dim_rows(sweep: list[dict], padded: list[dict] | None = None,
                  head_dims=None) -> list[dict]:
    """One row per (head_dim, world) of the frame's table: the numbers the frame draws."""
    out = []
    for pad, rows in _worlds(sweep, padded):
        for r in rows:
            if r["version"] is None or (head_dims and r["head_dim"] not in head_dims):
                continue
            m = r["model"]["H200"]
            out.append(dict(head_dim=r["head_dim"], pad=pad, kernel=r["version"],
                            width=r.get("width", r["head_dim"]),
                            useful=r.get("useful_columns", 1.0), registers=r["registers"],
                            tensor_per_score=r["tensor_per_score"],
                            instr_per_score=r["instr_per_score"],
                            smem_per_score=r["smem_per_score"], lower_us=m["lower_us"],
                            upper_us=m["upper_us"], bound_by=m["bound_by"]))
    return sorted(out, key=lambda d: (d["head_dim"], d["pad"]))


def head_dim_figure(head_dim: int, sweep: list[dict], seq_len: int = 1024,
                    measured: dict | None = None, padded: list[dict] | None = None,
                    measured_padded: dict | None = None):
    """One frame of the chapter's slider, three panels: the head slice's 16-wide tiles (the pad
    hatched), the compiled evidence of the kernel the dispatcher runs at every head_dim (this
    one outlined), and the time MODEL per head_dim as a hatched band beside published kernels
    (points) and any measurement. sweep: kernels.head_dim_evidence.sweep(...) with pad=False
    (the fallback world); padded: the same with pad=True, drawn beside it; measured /
    measured_padded: {head_dim: bench.dispatched point} or None. The numbers are in
    head_dim_rows, tabulated under the frame."""
    r = next((x for x in sweep if x["head_dim"] == head_dim), None)
    if r is None:
        raise ValueError(f"head_dim={head_dim!r} is not in the sweep "
                         f"{[x['head_dim'] for x in sweep]}")
    rp = next((x for x in padded if x["head_dim"] == head_dim), None) if padded else None
    fig = plt.figure(figsize=(FRAME_WIDTH_IN, 8.6))
    gs = fig.add_gridspec(3, 1, height_ratios=[0.55, 1.3, 1.5], hspace=0.85, left=0.14,
                          right=0.98, top=0.88, bottom=0.2)
    with plt.rc_context({"font.size": FRAME_MIN_PT}):
        ax0 = fig.add_subplot(gs[0])
        draw_tile_coverage(ax0, seq_len, head_dim, rows_shown=16)
        ax0.set_ylabel("")
        ax0.set_yticks([])
        ax0.tick_params(labelsize=FRAME_MIN_PT)
        ax0.set_xlabel("head_dim columns (16-wide tiles)", fontsize=FRAME_MIN_PT)
        draw_evidence_strip(fig.add_subplot(gs[1]), sweep, head_dim, padded)
        draw_model_band(fig.add_subplot(gs[2]), sweep, head_dim, measured, padded=padded,
                        measured_padded=measured_padded)
    says = f"pad=False runs {r['version']}"
    if rp is not None:
        says = (f"pad=True runs {rp['version']}"
                + (f" ({rp['width']} columns, {rp['useful_columns']:.0%} useful)"
                   if rp.get("width", head_dim) != head_dim else "") + f"; {says}")
    fig.suptitle(f"head_dim = {head_dim}: {says}"
                 + ("\nwith a GPU measurement" if (measured or {}).get(head_dim) else ""),
                 fontsize=FRAME_MIN_PT + 2)
    return fig


# ---------------------------------------------------------------- where a measurement came from
def measurement_source(res, live=None) -> dict | None:
    """Where a head_dim results file came from, only the fields it has (None: no file): device,
    the file (or "live" for the run `live` of this notebook), torch, CUDA and driver (a GPU's),
    andrea_edu, commit (a written file's: a live run has none), date, repeats, dtype."""
    if res is None:
        return None
    p = provenance(res)  # today's keys, whichever a file was committed under
    out = {"device": p["device"],
           "file": "live" if res is live else str(res.get("_path", "")).split("/")[-1],
           "torch": p["torch"]}
    if p.get("device_kind") == "gpu":
        out |= {k: p[k] for k in ("cuda", "driver") if p.get(k)}
    out["andrea_edu"] = p["andrea_edu"]
    if p.get("git_commit"):  # stamped on by the laboratory's writer
        out["commit"] = str(p["git_commit"])[:12]
    return out | {"date": str(p["date_utc"])[:10], "repeats": res["settings"]["repeats"],
                  "dtype": str(res["settings"]["dtype"])}


# ---------------------------------------------------------------- the exercises' helpers
def flash_utilization_figure(h_max: int = 256):
    """torch flash's kernel_utilization (head_dim / width of the compiled kernel that runs it)
    for every head_dim in 1..h_max, the compiled widths marked (tiles.FLASH_KERNEL_HEAD_DIMS)."""
    top = tiles.FLASH_KERNEL_HEAD_DIMS[-1]
    if isinstance(h_max, bool) or not isinstance(h_max, int) or not 1 <= h_max <= top:
        raise ValueError(f"h_max={h_max!r}: allowed values are 1..{top} (torch's flash "
                         f"kernels hold head_dim up to {top})")
    hds = list(range(1, h_max + 1))
    use = [tiles.torch_flash_head_dim(h)["kernel_utilization"] for h in hds]
    fig, ax = plt.subplots(figsize=(9, 3.2))
    ax.plot(hds, use, color=BACKEND_STYLE["sdpa:flash"][0], lw=1.2, drawstyle="steps-mid")
    for w in tiles.FLASH_KERNEL_HEAD_DIMS:
        if w <= h_max:
            ax.axvline(w, color="#dddddd", lw=0.8, zorder=0)
    ax.set_xlim(0, h_max + 1)
    ax.set_ylim(0, 1.05)
    ax.set_xlabel("head_dim")
    ax.set_ylabel("useful share of columns")
    ax.set_title("torch flash: head_dim / kernel width", fontsize=9)
    fig.tight_layout()
    return fig


def sdpa_eligibility(results) -> list[dict]:
    """One dict per (head_dim, SDPA backend) of a head_dim results file: what the run measured
    (its status, and the first sentence of the record's reason) beside what torch's head_dim
    rules say on a GPU (eligible or not, and the rule)."""
    out = []
    for r in results["records"]:
        p, b = r["params"], r["backend"]
        if not b.startswith("sdpa:"):
            continue
        ok, rule = tiles.sdpa_head_dim_rules(p["head_dim"]).get(b.split(":", 1)[1], (None, ""))
        out.append({"head_dim": p["head_dim"], "backend": b, "measured": r["status"]}
                   | ({"reason": r["reason"].split(". ")[0]} if r.get("reason") else {})
                   | {"eligible on a GPU": bool(ok), "rule": rule})
    return out


def same_d_model(results, backend: str = "cuda-wmma", shape: str = "ANDREA-120M") -> dict | str:
    """`backend`'s time at head_dim 32 (twice the heads) against head_dim 64, at the shape's
    fixed d_model (the sweep's d_model series), from a head_dim results file, as a dict; or a
    short line saying what is missing."""
    if not results:
        return "no committed head_dim measurement (book/data/bench_headdim_<device>.json)"
    d_model = results.get("settings", {}).get("shapes", {}).get(shape, {}).get("d_model")
    cs = dict(curves(results, shape, f"d_model={d_model}").get(backend, []))
    if 32 not in cs or 64 not in cs:
        return (f"{device_label(results)}: {backend} not timed at head_dim 32 and 64, "
                f"d_model={d_model}")
    a, b = cs[32], cs[64]
    return {"device": device_label(results), "backend": backend, "d_model": d_model,
            "B": a["params"]["B"], "T": a["params"]["T"],
            f"head_dim 32 (n_head {a['params']['n_head']}), ms": round(a["median_ms"], 3),
            f"head_dim 64 (n_head {b['params']['n_head']}), ms": round(b["median_ms"], 3),
            "ratio 32 / 64": round(a["median_ms"] / b["median_ms"], 2)}
