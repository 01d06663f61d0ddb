"""Figures of the chapter "From one block per head to FlashAttention: a kernel worklog".

    VERSIONS, BACKEND                          v1, v2, v3 and the dispatcher backend of each
    version_header(version) -> dict            the .cu file's own entry in "Versions in this file"
    ladder_markdown(versions)                  one row per version: idea, grid, speed (from the .cu)
    loop_lines(version, start) -> [(n, line)]  one loop of a kernel, from `start` to its brace
    excerpt(version, start, marks)             that loop as a code block numbered as in the .cu,
                                               marked lines highlighted, plus a table of them
    changes_markdown(rows)                     one row per role: the line each version uses
    decomposition_figure(trace)                the emulator's launch: blocks, and the tiles of one
                                               head's score matrix each block computed
    evidence_figure(...), measured_figure(...) SASS counts, the time model (hatched, "model")
                                               and measurements (solid) when a GPU file exists

The figures module formats and draws; every number a chapter states is computed in a cell from
andrea_edu.kernels (sources, compiler, emulator, SASS evidence) or andrea_edu.bench.
"""
from __future__ import annotations

import re

from andrea_edu.env import book_build
from andrea_edu.kernels import grid
from andrea_edu.kernels.toolkit import KERNEL_FILES, kernel_source

VERSIONS = ("v1", "v2", "v3")
BACKEND = {"v1": "cuda-naive", "v2": "cuda-wmma", "v3": "cuda-flash"}
COLORS = {"v1": "#7f7f7f", "v2": "#1f77b4", "v3": "#d62728"}


# ------------------------------------------------------------------ the .cu files, as text
def version_header(version: str) -> dict:
    """{"name", "title", "idea", "grid", "limits", "speed"} of the kernel's entry in its file's
    "Versions in this file" comment (continuation lines joined)."""
    name = grid.KERNEL_NAMES[version]
    lines = kernel_source(version).splitlines()
    start = next((i for i, t in enumerate(lines) if re.match(rf"// {name}\s{{2,}}\S", t)), None)
    if start is None:
        raise ValueError(f"{KERNEL_FILES[version]} has no '// {name}  <title>' version entry")
    out = {"name": name, "title": lines[start][len(f"// {name}"):].strip()}
    key = None
    for t in lines[start + 1:]:
        m = re.match(r"//\s{2,4}(\w+):\s+(.*)", t)
        if m:
            key, out[m.group(1)] = m.group(1), m.group(2).strip()
        elif key and re.match(r"//\s{5,}\S", t):
            out[key] += " " + t[2:].strip()
        else:
            break
    return out


def _first_sentence(text: str) -> str:
    m = re.match(r"(.+?)\.(\s|$)", text)
    return m.group(1) if m else text


def ladder_markdown(versions=VERSIONS) -> str:
    """The worklog's ladder as a Markdown table, every cell read from the .cu files."""
    rows = ["| version | file | idea (the file's title) | grid | speed (as the file says) |",
            "|---|---|---|---|---|"]
    for v in versions:
        h = version_header(v)
        rows.append(f"| {v} `{h['name']}` | `{KERNEL_FILES[v]}` | {h['title']} | "
                    f"{_first_sentence(h['grid'])} | {_first_sentence(h['speed'])} |")
    return "\n".join(rows)


def _code(line: str) -> str:
    return line.split("//")[0]


def _file_lines(version: str) -> list[tuple[int, str]]:
    return list(enumerate(kernel_source(version).splitlines(), start=1))


def loop_lines(version: str, start: str, whole_file: bool = False) -> list[tuple[int, str]]:
    """(line number in the .cu file, line) from the first line matching `start` (in the kernel
    function, or anywhere in the file with whole_file=True) to the brace closing its block."""
    lines = _file_lines(version) if whole_file else grid.kernel_lines(version)
    i0 = next((i for i, (_, t) in enumerate(lines) if re.search(start, _code(t))), None)
    if i0 is None:
        raise ValueError(f"no line of {KERNEL_FILES[version]} matches {start!r}")
    depth, opened = 0, False
    for i in range(i0, len(lines)):
        code = _code(lines[i][1])
        depth += code.count("{") - code.count("}")
        opened = opened or "{" in code
        if opened and depth <= 0:
            return lines[i0:i + 1]
    raise ValueError(f"the block opened at {KERNEL_FILES[version]}:{lines[i0][0]} never closes")


def first_line(version: str, pattern: str) -> tuple[int, str]:
    """(line number, code) of the kernel function's first line whose code matches `pattern`."""
    return marked_lines(grid.kernel_lines(version), [(pattern, "")])[0][:2]


def marked_lines(lines, marks) -> list[tuple[int, str, str]]:
    """(line number, code without its comment, role) for each (pattern, role) in `marks`: the
    first line matching the pattern that no earlier mark took (two marks on `__syncthreads`
    find both)."""
    out, taken = [], set()
    for pattern, role in marks:
        hit = next(((n, _code(t).strip()) for n, t in lines
                    if n not in taken and re.search(pattern, _code(t))), None)
        if hit is None:
            raise ValueError(f"no line matches {pattern!r} (the source changed?)")
        taken.add(hit[0])
        out.append((*hit, role))
    return out


def _cell(text: str) -> str:
    return text.replace("|", "&#124;")


def excerpt(version: str, start: str, marks=(), whole_file: bool = False) -> list:
    """Display objects: the block starting at `start` (numbered as in the .cu, marked lines
    highlighted in the book) and a table of the marked lines and what they do."""
    from IPython.display import Markdown

    lines = loop_lines(version, start, whole_file)
    marked = marked_lines(lines, marks)
    body = "\n".join(t for _, t in lines)
    first = lines[0][0]
    if book_build():
        emph = ",".join(str(n - first + 1) for n, _, _ in marked)
        code = (f"```{{code-block}} cuda\n:lineno-start: {first}\n"
                + (f":emphasize-lines: {emph}\n" if emph else "") + f"{body}\n```")
    else:
        code = f"```cpp\n// {KERNEL_FILES[version]}, lines {first}-{lines[-1][0]}\n{body}\n```"
    if not marked:
        return [Markdown(code)]
    table = "| line | code | what it does |\n|---|---|---|\n" + "\n".join(
        f"| {n} | `{_cell(t)}` | {role} |" for n, t, role in marked)
    return [Markdown(code), Markdown(table)]


def changes_markdown(rows) -> str:
    """rows: [(role, {version: (line number, code)})] -> role x version table of source lines."""
    vs = [v for v in VERSIONS if any(v in cols for _, cols in rows)]
    out = ["| step | " + " | ".join(f"{v} (`{KERNEL_FILES[v]}`)" for v in vs) + " |",
           "|---|" + "---|" * len(vs)]
    for role, cols in rows:
        cells = [f"{cols[v][0]}: `{_cell(cols[v][1])}`" if v in cols else "" for v in vs]
        out.append(f"| {role} | " + " | ".join(cells) + " |")
    return "\n".join(out)


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
    ax.set_title(f"{trace.kernel}: grid {trace.grid}, {trace.n_blocks} blocks\nnumber = launch "
                 f"order; darker = more K/V tiles (max {max(work.values())})", fontsize=9)
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
    if trace.causal:
        ax2.plot([0, T], [0, T], color="black", lw=0.8)
    ax2.set_xlim(0, T)
    ax2.set_ylim(T, 0)
    ax2.set_aspect("equal")
    ax2.set_xlabel("key j", fontsize=8)
    ax2.set_ylabel("query i", fontsize=8)
    ax2.tick_params(labelsize=7)
    ax2.set_title(f"head (b, h) = {tuple(pair)}: {len(mine)} block(s), T={T}\ncolour = block; "
                  f"hatched = tile holds a masked score", fontsize=9)
    fig.tight_layout()
    return fig


def _tile_width(trace) -> int:
    from andrea_edu.kernels.toolkit import kernel_constants

    c = kernel_constants(trace.kernel)
    return c.get("V1_BC") or c.get(f"{trace.kernel.upper()}_BK")


# ------------------------------------------------------------------ sentences and tables
def code_part(line: str) -> str:
    """A .cu line without its // comment."""
    return _code(line)


def setup_sentence(cfg, B, T, dtype, causal, gpu_here, fast) -> str:
    dt = str(dtype).replace("torch.", "")
    where = ("A CUDA GPU is visible: the kernels also run." if gpu_here else
             "No CUDA GPU is visible here: the kernels compile, the emulator runs them on the CPU.")
    return (f"Design case: {cfg.name}, B={B}, T={T}, n_head={cfg.n_head}, "
            f"head_dim={cfg.head_dim}, {dt}, {'causal' if causal else 'not causal'}. {where}"
            + (" (fast mode)" if fast else ""))


def barrier_sentence(barriers: dict, loops: dict) -> str:
    parts = [f"{v}: {n} `__syncthreads` in a {len(loops[v])}-line loop" for v, n in
             barriers.items()]
    return "Block-wide barriers per K/V tile: " + "; ".join(parts) + "."


def emulator_table(traces: dict, checks: dict) -> str:
    rows = ["| version | grid | blocks | blocks per (b, h) | K/V tile loads | max abs error "
            "vs reference | within tolerance |", "|---|---|---|---|---|---|---|"]
    for v, tr in traces.items():
        B, nh = tr.shape[:2]
        c = checks[v]
        rows.append(f"| {v} | {tr.grid} | {tr.n_blocks} | {tr.n_blocks // (B * nh)} | "
                    f"{tr.kv_tiles_loaded()} | {c['max_abs_err']:.1e} | {c['passed']} |")
    return "\n".join(rows)


def resources_table(compiled: dict, occ: dict, fills: dict, B: int, nh: int, T: int) -> str:
    rows = ["| GPU | version | registers/thread | spill bytes | shared memory/block | "
            "blocks/SM (limited by) | warps/SM | blocks at the design case |",
            "|---|---|---|---|---|---|---|---|"]
    for (g, v), ck in compiled.items():
        r, o = ck.resources, occ[g, v]
        rows.append(f"| {g} (`{ck.arch}`) | {v} | {r.registers} | "
                    f"{r.spill_stores + r.spill_loads} | {r.shared_bytes:,} B | "
                    f"{o['blocks_per_sm']} ({o['limiting']}) | {o['warps_per_sm']} | "
                    f"{fills[v]['n_blocks'] if g == 'H200' else ''} |")
    return "\n".join(rows)


# ------------------------------------------------------------------ measurements (GPU files)
HEAD_DIMS = (32, 64, 96, 128)  # the head_dims every version compiles for (v3's set)


def measured_rows(results, nh: int, head_dims=HEAD_DIMS, shape: str = "ANDREA-120M") -> list:
    """One dict per (version, head_dim) measured in a head_dim results file (None -> []):
    version, head_dim, ms (median), sdpa_ms, speed (SDPA time / this time: 1 = as fast),
    kernel (the kernel that really ran), B, T, causal, dtype."""
    if not results:
        return []
    by_case = {}
    for r in results["records"]:
        p = r.get("params", {})
        if p.get("shape") == shape and p.get("series") == f"n_head={nh}" and \
                p.get("head_dim") in head_dims:
            by_case.setdefault(p["head_dim"], {})[r["backend"]] = r
    rows = []
    for hd in sorted(by_case):
        recs = by_case[hd]
        sdpa = recs.get("sdpa", {})
        for v in VERSIONS:
            r = recs.get(BACKEND[v])
            if not r or r.get("status") != "ok" or not sdpa.get("median_ms"):
                continue
            p = r["params"]
            rows.append(dict(version=v, head_dim=hd, ms=r["median_ms"], sdpa_ms=sdpa["median_ms"],
                             speed=sdpa["median_ms"] / r["median_ms"], kernel=r.get("kernel"),
                             B=p.get("B"), T=p.get("T"), causal=p.get("causal"),
                             dtype=p.get("dtype")))
    return rows


def _device(results) -> str:
    prov = results["provenance"]
    return f"{prov['device']} (driver {prov.get('driver')}, CUDA {prov.get('cuda')}, " \
           f"{prov.get('date', '')[:10]}, commit {prov.get('git_commit', '')[:8]})"


def measured_markdown(rows: list, results) -> str:
    out = [f"Measured on {_device(results)}, file `{results['_path'].split('/')[-1]}`:", "",
           "| version | head_dim | kernel that ran | median (ms) | SDPA (ms) | "
           "throughput vs SDPA |", "|---|---|---|---|---|---|"]
    out += [f"| {r['version']} | {r['head_dim']} | {r['kernel']} | {r['ms']:.3f} | "
            f"{r['sdpa_ms']:.3f} | {r['speed']:.2f}x |" for r in rows]
    return "\n".join(out)


def not_measured_markdown(folder) -> str:
    return (f"**Not yet measured on a GPU**: `{folder}` holds no `bench_headdim_<gpu>.json`. "
            "To produce it on a machine with an NVIDIA GPU: `OUT=gpu-out bash "
            "scripts/gpu_suite.sh`, then copy `gpu-out/bench_headdim_*.json` into `book/data/` "
            "and re-run this chapter.")


def measured_figure(rows: list, results, model=None):
    """Time per version and head_dim: measured (solid) beside SDPA (grey); `model`
    {(version, head_dim): seconds}, when given, drawn hatched and outlined, labelled "model"."""
    import matplotlib.pyplot as plt
    import numpy as np

    hds = sorted({r["head_dim"] for r in rows})
    fig, ax = plt.subplots(figsize=(8, 3.6))
    width = 0.8 / (len(VERSIONS) + 1)
    x = np.arange(len(hds))
    sdpa = [next((r["sdpa_ms"] for r in rows if r["head_dim"] == hd), np.nan) for hd in hds]
    ax.bar(x - 0.4 + width / 2, sdpa, width, color="#bbbbbb", label="torch SDPA (measured)")
    for i, v in enumerate(VERSIONS, start=1):
        ms = [next((r["ms"] for r in rows if r["head_dim"] == hd and r["version"] == v), np.nan)
              for hd in hds]
        xs = x - 0.4 + width * (i + 0.5)
        ax.bar(xs, ms, width * 0.5, color=COLORS[v], label=f"{v} (measured)")
        if model:
            mm = [model.get((v, hd), np.nan) * 1e3 for hd in hds]
            ax.bar(xs + width * 0.5, mm, width * 0.5, facecolor="none", edgecolor=COLORS[v],
                   hatch="///", label=f"{v} model (lower bound)")
    ax.set_xticks(x, [f"head_dim {hd}" for hd in hds])
    ax.set_yscale("log")
    ax.set_ylabel("ms per call (log)")
    ax.legend(fontsize=7, ncol=2)
    r0 = rows[0]
    ax.set_title(f"B={r0['B']}, T={r0['T']}, {r0['dtype']}, causal={r0['causal']}: "
                 f"{results['provenance']['device']}", fontsize=9)
    fig.tight_layout()
    return fig


def live_markdown(live: dict, times: dict, device: str, B: int, T: int) -> str:
    out = [f"Live on {device}, B={B}, T={T}: each version validated, then timed.", "",
           "| version | backend that ran | max abs error | passed | median (ms) | "
           "throughput vs SDPA |", "|---|---|---|---|---|---|"]
    base = times["sdpa"]["median_ms"]
    for v, r in live.items():
        t = times.get(v)
        out.append(f"| {v} | {r['decision'].backend} | {r['check']['max_abs_err']:.1e} | "
                   f"{r['check']['passed']} | {t['median_ms']:.3f} | {base / t['median_ms']:.2f}x |"
                   if t else f"| {v} | {r['decision'].backend} | "
                   f"{r['check']['max_abs_err']:.1e} | {r['check']['passed']} | not timed | |")
    out.append(f"| sdpa | sdpa | | | {base:.3f} | 1.00x |")
    return "\n".join(out)


# ------------------------------------------------------------------ Checking the source
CLAIM_ONE_BLOCK = "Each thread block handles one (batch, head) pair"
CLAIM_NEVER_KNOWS = "The kernel never knows that it processes several heads"


def one_block_row(v, trace, per_pair: dict, design_grid, B, nh, T) -> tuple:
    counts = set(per_pair.values())
    per_pair_design = design_grid[1] * design_grid[2]
    measured = (f"{v}: the emulated launch (B={trace.shape[0]}, n_head={trace.shape[1]}, "
                f"T={trace.shape[2]}) gives every block one (b, h); each (b, h) gets "
                f"{'/'.join(map(str, sorted(counts)))} block(s). At B={B}, T={T}: grid "
                f"{design_grid}, {per_pair_design} block(s) per (b, h)")
    if counts == {1} and per_pair_design == 1:
        verdict = "holds"
    else:
        verdict = "holds with a caveat"
        measured += (": one block per (batch, head, query tile); a block never mixes heads, "
                     "but each pair is split over query tiles to fill the GPU")
    return (f"{CLAIM_ONE_BLOCK} ({v})", measured, verdict)


def never_knows_row(v, sig, heads_in_params, reads, same_bits: bool) -> tuple:
    measured = (f"{v}: parameters {', '.join(sig.param_names)} ("
                + ("no n_head, no batch" if not heads_in_params else
                   f"head parameters: {heads_in_params}") + "); grid read on "
                + "; ".join(f"line {n}: {_code(c).strip()}" for n, c in reads)
                + f". All heads in one launch vs one launch per (b, h): "
                + ("identical bits" if same_bits else "different results"))
    verdict = "holds" if not heads_in_params and same_bits else "does not hold"
    return (f"{CLAIM_NEVER_KNOWS} ({v})", measured, verdict)


def summary_markdown(traces, checks, compiled, occ, fills, barriers, B, nh, T, measured) -> str:
    g = "H200"
    items = []
    for v in VERSIONS:
        ck, o, f = compiled[g, v], occ[g, v], fills[v]
        items.append(f"- **{v}** ({version_header(v)['title']}): {f['n_blocks']} blocks at "
                     f"B={B}, n_head={nh}, T={T}; {ck.resources.registers} registers, "
                     f"{ck.resources.shared_bytes:,} B of shared memory and {o['blocks_per_sm']} "
                     f"resident blocks per SM on an H200; {barriers[v]} block-wide barrier(s) "
                     f"per K/V tile; emulated error vs reference {checks[v]['max_abs_err']:.1e}.")
    if measured:
        best = {v: max((r["speed"] for r in measured if r["version"] == v), default=None)
                for v in VERSIONS}
        items.append("- Measured throughput vs torch SDPA (best head_dim): " + ", ".join(
            f"{v} {s:.2f}x" for v, s in best.items() if s is not None) + ".")
    else:
        items.append("- No GPU measurement yet: the speeds above are the model's bounds, not "
                     "measurements.")
    return "\n".join(items)
