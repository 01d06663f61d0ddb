"""Figures of the chapter "From one block per head to FlashAttention: a kernel worklog".

    VERSIONS, BACKEND                          v1, v2, v3, the dispatcher backend of each
    ladder_markdown(), changes_markdown(rows)  the ladder and the lines that changed, read from
                                               the .cu files (helpers of figures.kernel_source,
                                               re-exported: excerpt, loop_lines, first_line...)
    decomposition_figure(trace)                the emulator's launch: blocks, and the tiles of one
                                               head's score matrix each block computed
    fragment_figure()                          v3's mma fragments: S's accumulator lanes are P's
    rung_numbers(e, scores, m)                 one rung's SASS counts, per score, and its MODEL
    evidence_figure, model_overview_figure     SASS counts (kernels.sass) and the time model
                                               (kernels.time_model): hatched, labelled "model"
    measured_cells, measured_figure            a GPU results file's rows
                                               (bench.dispatched.measured_rows), solid
    one_block_check, cooperate_check, never_knows_check   facts and verdicts of the box

The figures module formats and draws; every number a chapter states is computed in a cell from
andrea_edu.kernels (sources, compiler, emulator, SASS evidence, model, the lane map
kernels.tiles.lane_elements, the model's terms time_model.model_terms) or andrea_edu.bench
(dispatched: a GPU file's rows beside the model).
"""
from __future__ import annotations

from typing import Any

# Shown kernel code is its own concept (andrea_edu.figures.kernel_source, shared by any chapter
# that shows code); the chapter imports it from there.
from andrea_edu.figures.kernel_source import _first_sentence, version_header
from andrea_edu.figures.viz import plain_log
from andrea_edu.kernels import registry
from andrea_edu.kernels.tiles import a_operand_owner, accumulator_owner
from andrea_edu.kernels.toolkit import KERNEL_FILES

# The ladder as registered when the chapter imports this module; every function below reads
# the registry when it is called (a version registered later is drawn too).
VERSIONS = registry.ladder()      # ("v1", "v2", "v3"): the rungs (v3p pads v3: beside them)
BACKEND = registry.BACKENDS                 # live {"v1": "cuda-naive", ...}
color = registry.color                      # color("v2") -> its colour in every figure


# ------------------------------------------------------------------ the .cu files, as text
def ladder_markdown(versions=None) -> str:
    """The worklog's ladder as a Markdown list, every entry read from the .cu files' headers
    (versions None: every registered one)."""
    items = []
    for v in registry.ladder() if versions is None else versions:
        h = version_header(v)
        items.append(f"- **{v}**, `{h['name']}` in `{KERNEL_FILES[v]}`: {h['title']} "
                     f"Grid: `{_first_sentence(h['grid'])}`. Speed (the file's words): "
                     f"{_first_sentence(h['speed'])}.")
    return "\n".join(items)


def changes_markdown(rows) -> str:
    """rows: [(step, {version: (line number, code)})] -> one C++ block, the step as a comment
    and below it the line each version uses, tagged with its version and line number."""
    out = []
    for step, cols in rows:
        out.append(f"// ---- {step}")
        out += [f"/* {v} {cols[v][0]:>3} */ {cols[v][1]}" for v in registry.ladder()
                if v in cols]
    return "```cpp\n" + "\n".join(out) + "\n```"


# ------------------------------------------------------------------ the emulator's launch
def decomposition_figure(trace, pair=(0, 0)):
    """Left: the launch grid, one cell per block (colour = K/V tiles it loaded, number = launch
    order). Right: the score matrix of one (b, h), each computed (query tile, K/V tile) drawn in
    the colour of the block that computed it; hatched: tiles holding a masked score."""
    import matplotlib.pyplot as plt
    from matplotlib import cm, colors
    from matplotlib.patches import Rectangle

    B, nh, T, hs = trace.shape
    gx, gy = trace.grid[0], trace.grid[1]
    work = {blk.grid_index: sum(len(t.steps) for t in blk.q_tiles) for blk in trace.blocks}
    norm = colors.Normalize(0, max(work.values()))
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(10, 4.2),
                                  gridspec_kw={"width_ratios": [1.2, 1]})
    for blk in trace.blocks:
        x, y = blk.grid_index[:2]
        ax.add_patch(Rectangle((x, y), 0.94, 0.9, facecolor=cm.Blues(0.15 + 0.8 * norm(work[x, y])),
                               edgecolor="black", lw=0.4))
        if trace.n_blocks <= 120:
            ax.text(x + 0.47, y + 0.45, str(blk.order), ha="center", va="center", fontsize=6.5)
    ax.set_xlim(0, gx)
    ax.set_ylim(gy, 0)
    ax.set_xticks([x + 0.47 for x in range(gx)], [str(x) for x in range(gx)])
    ax.set_yticks([y + 0.45 for y in range(gy)], [str(y) for y in range(gy)])
    ax.set_xlabel("blockIdx.x = b * n_head + h", fontsize=8)
    ax.set_ylabel("blockIdx.y", fontsize=8)
    ax.tick_params(labelsize=7)
    ax.set_title(f"{trace.kernel}: grid {trace.grid}, {trace.n_blocks} blocks", fontsize=9)
    mine = sorted((b for b in trace.blocks if (b.b, b.h) == tuple(pair)), key=lambda b: b.order)
    palette = plt.get_cmap("tab10")
    for c, blk in enumerate(mine):
        if len(mine) > 1:  # one band per block: say which launch it is
            qt = blk.q_tiles[0]
            ax2.text(T * 1.01, (qt.q_start + qt.q_stop) / 2, f"#{blk.order}", fontsize=7,
                     va="center", color=palette(c % 10))
        for qt in blk.q_tiles:
            for st in qt.steps:
                masked = st.k_stop - st.k_start < _tile_width(trace) or (
                    trace.causal and st.k_stop - 1 > qt.q_start)
                ax2.add_patch(Rectangle((st.k_start, qt.q_start), st.k_stop - st.k_start,
                                        qt.q_stop - qt.q_start, facecolor=palette(c % 10),
                                        alpha=0.55, edgecolor="white", lw=0.5,
                                        hatch="////" if masked else None))
    warps = trace.threads_per_block // 32
    band = max(t.q_stop - t.q_start for blk in mine for t in blk.q_tiles)
    # each warp owns band / warps query rows of a block that takes one query tile (a block that
    # walks every query tile, as v1's, has its warps' rows inside each tile: not drawn)
    split = not registry.get(trace.kernel).walks_all_query_tiles
    if split and band % warps == 0:
        for blk in mine:
            for qt in blk.q_tiles:
                right = max((st.k_stop for st in qt.steps), default=0)
                for w in range(1, warps):
                    y = qt.q_start + w * band // warps
                    if y < qt.q_stop:
                        ax2.plot([0, right], [y, y], color="#333333", lw=0.6, ls=":")
    if trace.causal:
        ax2.plot([0, T], [0, T], color="black", lw=0.8)
    ax2.set_xlim(0, T)
    ax2.set_ylim(T, 0)
    ax2.set_aspect("equal")
    ax2.set_xlabel("key j", fontsize=8)
    ax2.set_ylabel("query i", fontsize=8)
    ax2.tick_params(labelsize=7)
    ax2.set_title(f"head (b, h) = {tuple(pair)}: {len(mine)} block(s), T={T}", fontsize=9)
    fig.tight_layout()
    return fig


def _tile_width(trace) -> int:
    return registry.get(trace.kernel).keys_per_tile


# ------------------------------------------------------------------ sentences and tables
# ------------------------------------------------------------------ measurements (GPU files)

def measured_cells(rows: list, model_s: dict | None = None) -> list[list[str]]:
    """One table row per measured row (measured_rows): version, head_dim, the kernel that ran,
    median ms, SDPA ms, throughput vs SDPA, and, where `model_s` {(version, head_dim): seconds}
    has the case, the MODEL's lower edge (ms) and measured / MODEL ("-" where it has none)."""
    out = []
    for r in rows:
        m = (model_s or {}).get((r["version"], r["head_dim"]))
        out.append([r["version"], str(r["head_dim"]), str(r["kernel"]), f"{r['ms']:.3f}",
                    f"{r['sdpa_ms']:.3f}", f"{r['speed']:.2f}x",
                    f"{m * 1e3:.3f}" if m else "-", f"{r['ms'] / (m * 1e3):.1f}x" if m else "-"])
    return out


def measured_figure(rows: list, results, model=None):
    """Time per version and head_dim: measured (solid) beside SDPA (grey); `model`
    {(version, head_dim): seconds}, when given, drawn hatched and outlined, labelled "model"."""
    import matplotlib.pyplot as plt
    import numpy as np

    hds = sorted({r["head_dim"] for r in rows})
    fig, ax = plt.subplots(figsize=(10, 3.6))
    versions = registry.ladder()
    width = 0.8 / (len(versions) + 1)
    x = np.arange(len(hds))
    sdpa = [next((r["sdpa_ms"] for r in rows if r["head_dim"] == hd), np.nan) for hd in hds]
    ax.bar(x - 0.4 + width / 2, sdpa, width, color="#bbbbbb", label="torch SDPA (measured)")
    for i, v in enumerate(versions, start=1):
        ms = [next((r["ms"] for r in rows if r["head_dim"] == hd and r["version"] == v), np.nan)
              for hd in hds]
        xs = x - 0.4 + width * (i + 0.5)
        ax.bar(xs, ms, width * 0.5, color=color(v), label=f"{v} (measured)")
        if model:
            mm = [model.get((v, hd), np.nan) * 1e3 for hd in hds]
            ax.bar(xs + width * 0.5, mm, width * 0.5, facecolor="none", edgecolor=color(v),
                   hatch="///", label=f"{v} MODEL (all terms overlapped)")
    ax.set_xticks(x, [f"head_dim {hd}" for hd in hds])
    ax.set_yscale("log")
    plain_log(ax.yaxis)
    ax.set_ylabel("ms per call (log)")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1))
    r0 = rows[0]
    ax.set_title(f"B={r0['B']}, T={r0['T']}, {r0['dtype']}, causal={r0['causal']}: "
                 f"{results['provenance']['device']}", fontsize=9)
    fig.tight_layout()
    return fig


# ------------------------------------------------------------------ Checking the source
# Each check returns (facts, verdict): the facts a box row shows as "key: value", computed from
# the emulator, the SASS evidence and the kernel's source; the chapter writes the claim.
def one_block_check(per_pair: dict, design_grid, fill: dict) -> tuple[dict, str]:
    """"One thread block per (batch, head)". per_pair: {(b, h): blocks} of an emulated launch;
    design_grid: the launch at the design case; fill: occupancy.grid_fill of it on an H200. Holds
    when every (b, h) gets one block and the grid fills every SM; one block per (b, h) with idle
    SMs, or several blocks per (b, h) (query tiles), hold with a caveat."""
    counts = sorted(set(per_pair.values()))
    facts = {"blocks per (b, h)": "/".join(map(str, counts)), "grid": tuple(design_grid),
             "idle H200 SMs": f"{fill['idle_sms']} of {fill['sms']}",
             "block slots": fill["slots"]}
    one = counts == [1] and design_grid[1] * design_grid[2] == 1
    return facts, "holds" if one and fill["idle_sms"] == 0 else "holds with a caveat"


def cooperate_check(block_rows: int, T: int, e: dict, barriers: int) -> tuple[dict, str]:
    """"The block's threads cooperate on the seq_len x head_dim tile". block_rows: query rows one
    emulated block computed (of T); e: sass.evidence. Holds when a block covers all T rows; a
    band of rows holds with a caveat."""
    facts = {"query rows per block": f"{block_rows} of {T}", "keys per tile": e["keys_per_tile"],
             "warps x rows": f"{e['warps_per_block']} x {e['rows_per_warp']}",
             "barriers per tile": barriers}
    return facts, "holds" if block_rows >= T else "holds with a caveat"


def never_knows_check(sig, heads_in_params, reads, same_bits: bool) -> tuple[dict, str]:
    """"The kernel never knows it processes several heads". sig: grid.kernel_signature;
    heads_in_params: its parameters that name a head or batch; reads: (line, code) of its grid
    reads; same_bits: all heads in one launch give the bits of one launch per (b, h)."""
    facts = {"parameters": ", ".join(sig.param_names),
             "head parameters": ", ".join(heads_in_params) or "-",
             "grid read on lines": ", ".join(str(n) for n, _ in reads),
             "one launch vs one per (b, h)": "same bits" if same_bits else "different bits"}
    return facts, "holds" if not heads_in_params and same_bits else "does not hold"


# ------------------------------------------------------------------ v3's register fragments
def fragment_figure():
    """One 16 x 16 block of P (16 query rows x 16 keys). Each cell: the lane that holds the
    element as an accumulator of S (s[2kk] for keys 0-7, s[2kk+1] for keys 8-15); the colour:
    the A-operand registers of the next mma that element must be in. A cell where the A layout
    puts the element in another lane would be marked with a red cross: there is none, so P
    is S's registers, rounded and packed, with no data movement."""
    import matplotlib.pyplot as plt
    import numpy as np
    from matplotlib.patches import Patch

    quad = np.array([[2 * (c // 8) + r // 8 for c in range(16)] for r in range(16)])
    colors = ["#c6dbef", "#fdd0a2", "#c7e9c0", "#dadaeb"]
    names = ["s[2kk] c0,c1 -> P a0,a1", "s[2kk] c2,c3 -> P a2,a3",
             "s[2kk+1] c0,c1 -> P a4,a5", "s[2kk+1] c2,c3 -> P a6,a7"]
    fig, ax = plt.subplots(figsize=(9, 5.6))
    ax.imshow(quad, cmap=plt.matplotlib.colors.ListedColormap(colors), vmin=-0.5, vmax=3.5)
    for r in range(16):
        for c in range(16):
            lane_s, _ = accumulator_owner(r, c % 8)
            lane_a, _ = a_operand_owner(r, c)
            ax.text(c, r, str(lane_s), ha="center", va="center", fontsize=7)
            if lane_a != lane_s:
                ax.plot(c, r, "x", color="red", ms=10)
    ax.set_xticks(range(16))
    ax.set_yticks(range(16))
    ax.tick_params(labelsize=7)
    ax.set_xlabel("key (column of P)", fontsize=8)
    ax.set_ylabel("query row", fontsize=8)
    ax.set_title("P's 16 x 16 A fragment: S's accumulator lane (number), A registers (colour)",
                 fontsize=9)
    ax.legend(handles=[Patch(color=c, label=n) for c, n in zip(colors, names)], fontsize=7,
              loc="upper left", bbox_to_anchor=(1.01, 1))
    fig.subplots_adjust(left=0.07, right=0.66, top=0.88, bottom=0.09)
    return fig


# ------------------------------------------------------------------ SASS evidence and the model
MIX = ("HMMA", "LDSM", "LDS", "STS", "LD", "LDG", "LDGSTS", "SHFL", "MUFU.EX2", "BAR")
# A model is drawn hatched and unfilled; no measurement is drawn so.
MODEL_STYLE: dict[str, Any] = dict(facecolor="none", hatch="///", linewidth=1.2)
MODEL_LABEL = "MODEL (from SASS counts)"


def rung_numbers(e: dict, scores: int, m: dict) -> dict:
    """One rung in numbers: e a sass.evidence dict, scores the query-key pairs of its warp-tile,
    m its time_model.model_bound dict on one GPU. The nonzero SASS counts of one warp and one
    K/V tile, the same per score, registers and blocks per SM, and the MODEL's bracket in µs
    (every term overlapped .. none) with the SMs the grid occupies."""
    p = e["per_tile"]
    per_sm = next((n for g, n in e["blocks_per_sm"].items() if g in m.get("gpu", "")),
                  e["blocks_per_sm"].get("H200"))  # on the model's GPU
    return {"SASS per warp-tile": {k: p[k] for k in (*MIX, "total") if p.get(k)},
            "scores per warp-tile": scores,
            "per score": {"instructions": round(p["total"] / scores, 2),
                          "smem bytes": round(e["smem_bytes_per_tile"] / scores, 1)},
            "registers": e["registers"], "blocks per SM": per_sm,
            f"MODEL {m['gpu_key'] if 'gpu_key' in m else m['gpu']}, µs":
                (round(m["lower"] * 1e6, 1), round(m["upper"] * 1e6, 1)),
            "bound by": m["bound_by"], "SMs busy": f"{m.get('sms_busy')} of {m.get('sms')}"}


def evidence_figure(ev: dict, scores: dict, models: dict, version: str, head_dim: int,
                    measured_s: dict | None = None, asked: str | None = None):
    """The slider's figure; ev, scores and models are keyed by (version, head_dim).
    Left: instructions and shared-memory bytes per score of `version`
    (solid) with the other versions as outlines. Right: the model's five times for `version`
    on each GPU, hatched (a model), the largest marked as the bound; a measured time, when
    `measured_s` {gpu name: seconds} has one, drawn solid beside it. asked: the version the
    reader picked when it is not compiled for head_dim (`version` is then the one the
    dispatcher runs instead, and the title says so)."""
    import matplotlib.pyplot as plt
    import numpy as np

    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(11, 4.8), gridspec_kw={"width_ratios": [1.3, 1]})
    names = list(MIX) + ["all instructions", "shared-memory bytes"]
    y = np.arange(len(names))

    def per_score(v):
        e, n = ev[v, head_dim], scores[v, head_dim]
        vals = [e["per_tile"][k] / n for k in MIX] + [e["per_tile"]["total"] / n,
                                                       e["smem_bytes_per_tile"] / n]
        return np.array(vals, dtype=float)

    for v in registry.ladder():
        if (v, head_dim) not in ev:            # not compiled for this head_dim
            continue
        vals = np.where(per_score(v) > 0, per_score(v), np.nan)
        if v == version:
            ax.barh(y, vals, color=color(v), height=0.6, label=f"{v} (read from SASS)")
        else:
            ax.scatter(vals, y, marker="|", s=250, color=color(v), label=v)
    ax.set_xscale("log")
    plain_log(ax.xaxis)
    ax.set_yticks(y, names, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("per score, per warp (log)", fontsize=8)
    ax.legend(fontsize=7, loc="best")
    e = ev[version, head_dim]
    ax.set_title(f"{version}, head_dim={head_dim}: {e['registers']} registers, spills "
                 f"{e['spill_stores']}/{e['spill_loads']} B,\nblocks/SM H200 "
                 f"{e['blocks_per_sm']['H200']}, RTX 4090 {e['blocks_per_sm']['RTX 4090']}",
                 fontsize=9)
    gpus = list(models[version, head_dim])
    terms = list(next(iter(models[version, head_dim].values()))["terms"])
    width = 0.8 / len(gpus)
    for i, g in enumerate(gpus):
        m = models[version, head_dim][g]
        term_us = [m["terms"][t] * 1e6 for t in terms]
        xs = np.arange(len(terms)) + (i - (len(gpus) - 1) / 2) * width
        ax2.bar(xs, term_us, width * 0.9, edgecolor=["black", "#888888"][i % 2],
                label=f"{g}: MODEL terms", **MODEL_STYLE)
        k = terms.index(m["bound_by"])
        ax2.annotate(f"largest {term_us[k]:.0f} µs", (xs[k], term_us[k]), fontsize=7,
                     ha="center", va="bottom")
        x_sum = len(terms) + (i - (len(gpus) - 1) / 2) * width   # the no-overlap sum
        ax2.bar(x_sum, m["upper"] * 1e6, width * 0.9, facecolor="none", hatch="xx",
                edgecolor=["black", "#888888"][i % 2], linewidth=1.2,
                label=f"{g}: MODEL sum")
        ax2.annotate(f"{m['upper'] * 1e6:.0f} µs", (x_sum, m["upper"] * 1e6), fontsize=7,
                     ha="center", va="bottom")
        if m.get("published"):       # the band published kernels land in, for the same work
            lo_b, hi_b = (f(b["seconds"] for b in m["published"]) * 1e6 for f in (min, max))
            ax2.axhspan(lo_b, hi_b, color="#2ca02c", alpha=0.18,
                        label=f"{g}: published*")
        if measured_s and measured_s.get(g):
            ax2.bar(len(terms) + 1 + (i - (len(gpus) - 1) / 2) * width, measured_s[g] * 1e6,
                    width * 0.9, color=color(version), label=f"{g}: measured")
    ax2.set_xticks(range(len(terms) + 1 + bool(measured_s)),
                   terms + ["sum"] + (["measured"] if measured_s else []), fontsize=7,
                   rotation=30)
    ax2.set_yscale("log")
    plain_log(ax2.yaxis)
    lo = min(x for m in models[version, head_dim].values() for x in m["terms"].values() if x > 0)
    hi = max([m["upper"] for m in models[version, head_dim].values()]
             + [b["seconds"] for m in models[version, head_dim].values()
                for b in m.get("published") or []])
    ax2.set_ylim(lo * 1e6 / 2, max(hi, *(measured_s or {0: 0}).values()) * 1e6 * 3)
    ax2.set_ylabel("µs per launch (log)", fontsize=8)
    ax2.legend(fontsize=6.5, loc="upper left", bbox_to_anchor=(-0.2, -0.16), ncol=2)
    m0 = next(iter(models[version, head_dim].values()))
    ax2.set_title(f"MODEL, B={m0['B']}, n_head={m0['n_head']}, T={m0['T']}"
                  f"{', causal' if m0['causal'] else ''}", fontsize=9)
    if asked is not None and asked != version:
        fig.suptitle(f"{asked}: no head_dim {head_dim}; {version} runs", fontsize=10,
                     color="#a00000")
        fig.tight_layout(rect=(0, 0, 1, 0.95))
    else:
        fig.tight_layout()
    return fig


def model_overview_figure(models: dict, gpu: str = "H200"):
    """The model bound of every (version, head_dim) on one GPU: hatched outlined bars (a model,
    never a measurement), grouped by head_dim; where published kernels are cited for a head_dim,
    the band of their times for the same work is shaded behind that group. The legend sits
    outside the axes, so it covers no bar."""
    import matplotlib.pyplot as plt
    import numpy as np

    hds = sorted({hd for _, hd in models})
    # Legible where the book shows it: 7.6 in at the 680-px content column of a 1280-px window,
    # no text under 10 pt (about 9.3 pt as displayed), the legend under the axes (issue 39).
    fs = 10
    fig, ax = plt.subplots(figsize=(7.6, 4.6))
    versions = [v for v in registry.ladder() if any(key[0] == v for key in models)]
    width = 0.8 / len(versions)
    for i, v in enumerate(versions):
        low = np.array([models[v, hd][gpu]["lower"] * 1e6 if (v, hd) in models else np.nan
                        for hd in hds])
        up = np.array([models[v, hd][gpu]["upper"] * 1e6 if (v, hd) in models else np.nan
                       for hd in hds])
        ax.bar(np.arange(len(hds)) + (i - (len(versions) - 1) / 2) * width, up - low,
               width * 0.9, bottom=low, edgecolor=color(v), label=f"{v}: MODEL",
               **MODEL_STYLE)
    banded = False
    for x, hd in enumerate(hds):
        band = next((m[gpu].get("published") for (v, h), m in models.items()
                     if h == hd and gpu in m and m[gpu].get("published")), None)
        if band:
            lo, hi = (f(b["seconds"] for b in band) * 1e6 for f in (min, max))
            ax.fill_between([x - 0.45, x + 0.45], lo, hi, color="#2ca02c", alpha=0.25,
                            label=None if banded else "published*")
            banded = True
    ax.set_xticks(range(len(hds)), [str(hd) for hd in hds], fontsize=fs)
    ax.set_xlabel("head_dim", fontsize=fs)
    ax.tick_params(axis="y", labelsize=fs)
    ax.set_yscale("log")
    plain_log(ax.yaxis)
    low = min(m[gpu]["lower"] for m in models.values() if gpu in m) * 1e6
    high = max(m[gpu]["upper"] for m in models.values() if gpu in m) * 1e6
    ax.set_ylim(low / 2, high * 2)
    ax.set_ylabel("µs per launch (log), MODEL", fontsize=fs)
    m0 = next(iter(models.values()))[gpu]
    ax.set_title(f"{MODEL_LABEL}, {m0['gpu']}\n"
                 f"B={m0['B']}, n_head={m0['n_head']}, T={m0['T']}, {m0['dtype']}, "
                 f"{'causal' if m0['causal'] else 'full'}", fontsize=fs)
    ax.legend(fontsize=fs, loc="upper left", bbox_to_anchor=(0, -0.16), ncol=2, frameon=False)
    fig.subplots_adjust(left=0.13, right=0.98, top=0.87, bottom=0.3)
    return fig


# ------------------------------------------------------------------ n_head at a fixed d_model
def n_head_figure(rows: list, n_head: int):
    """What n_head changes at a fixed d_model, one bar per n_head (rows: kernels.
    head_dim_evidence.at_fixed_d_model(n) for each n), n_head's outlined: the kernel the
    dispatcher runs at d_model / n_head and its instructions per score, the launch's blocks and
    the SMs they occupy on an H200, the scores per head and in all, and the time MODEL
    (hatched band: every term overlapped .. none)."""
    import matplotlib.pyplot as plt
    import numpy as np

    r = next((x for x in rows if x["n_head"] == n_head), None)
    if r is None:
        raise ValueError(f"n_head={n_head!r} is not one of {[x['n_head'] for x in rows]}")
    x = np.arange(len(rows))
    labels = [f"{q['n_head']} x {q['head_dim']}\n{q['version']}" for q in rows]
    edge = ["black" if q["n_head"] == n_head else "none" for q in rows]
    col = [color(q["version"]) for q in rows]
    fig, axes = plt.subplots(1, 4, figsize=(12, 3.6))
    a, b, c, d = axes
    a.bar(x, [q["instr_per_score"] for q in rows], color=col, edgecolor=edge, linewidth=2)
    a.set_yscale("log")
    a.set_title("instructions per score", fontsize=9)
    blocks = [q["model"]["H200"]["blocks"] for q in rows]
    busy = [q["model"]["H200"]["sms_busy"] for q in rows]
    b.bar(x, blocks, color="#cccccc", edgecolor=edge, linewidth=2, label="blocks launched")
    b.bar(x, busy, 0.4, color=col, label="SMs busy")
    b.set_yscale("log")
    b.set_title("grid on an H200", fontsize=9)
    b.legend(fontsize=7, loc="upper left")
    c.bar(x - 0.2, [q["scores_per_head"] for q in rows], 0.4, color="#9ecae1", edgecolor=edge,
          label="scores per head")
    c.bar(x + 0.2, [q["scores"] for q in rows], 0.4, color="#08519c", edgecolor=edge,
          label="scores in all")
    c.set_yscale("log")
    c.set_title("scores per launch", fontsize=9)
    c.legend(fontsize=7, loc="upper left")
    lo = np.array([q["model"]["H200"]["lower_us"] for q in rows])
    hi = np.array([q["model"]["H200"]["upper_us"] for q in rows])
    d.bar(x, hi - lo, 0.7, bottom=lo, edgecolor=col, label=f"{MODEL_LABEL}", **MODEL_STYLE)
    for xi, q in zip(x, rows):
        if q["n_head"] == n_head:
            d.axvspan(xi - 0.5, xi + 0.5, color="#fff2a8", zorder=0)
    d.set_yscale("log")
    d.set_ylim(lo.min() / 2, hi.max() * 2)
    d.set_title("MODEL, H200, µs", fontsize=9)
    for ax in axes:
        ax.set_xticks(x, labels, fontsize=7)
        plain_log(ax.yaxis)
    d_model = r["d_model"]
    fig.suptitle(f"d_model = {d_model} = n_head x head_dim: B={r['B']}, T={r['T']}",
                 fontsize=10)
    fig.tight_layout()
    return fig
