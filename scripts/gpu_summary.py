"""Write gpu_summary.md: one page saying what scripts/gpu_suite.sh found, step by step.

    python scripts/gpu_summary.py OUT STEPS_TSV [LOGS] [--rehearse] [--deadline S] [--stage N]
    python scripts/gpu_summary.py --mark-under-load DIR   put a first cell into every executed
        chapter in DIR saying its timings were taken while the correctness steps shared the GPU

STEPS_TSV: one line per step, tab-separated: name, status (pass, fail, skipped, refused),
seconds, budget seconds, reason. The page keeps kernel results (every GPU step) apart from
chapter results (notebooks, and chapter:<name> rows: a chapter skipped with its reason), each
with its own verdict: a chapter that cannot run here never makes the kernels' verdict fail. The page adds, when their files are in OUT: gpu-check's
result per backend (gpucheck.json), the head_dim sweep's headline ratios at head_dim 64
(bench_headdim_*.json: the kernels' time over SDPA's), Nsight Compute's counters for v2 and v3
(ncu.csv, with what each bank-conflict counter covers), the sanitizer's findings per tool
(LOGS/sanitizer, scripts/gpu_sanitizer_report.py), and the SASS time model's lower bounds
(LOGS/model/sass_model.json, a model). The suite rewrites it after every step. Standard library
only: it runs on the bare GPU image. Exit status 0 written; 2 bad arguments.
"""
from __future__ import annotations

import csv
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


def _load(path: Path):
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def is_chapter_row(r: list[str]) -> bool:
    return bool(r) and (r[0] == "notebooks" or r[0].startswith("chapter:"))


def steps_table(rows: list[list[str]]) -> list[str]:
    out = ["| step | status | seconds (budget) | reason |", "|---|---|---|---|"]
    for r in rows:
        r = (r + [""] * 5)[:5]
        out.append(f"| {r[0]} | **{r[1]}** | {r[2]} ({r[3]}) | {r[4].replace('|', '/')} |")
    return out


def gpucheck_lines(out: Path) -> list[str]:
    rep = _load(out / "gpucheck.json")
    if not isinstance(rep, dict):
        return []
    lines = [f"## Correctness through attention() (gpucheck.json)", "",
             f"{rep.get('n_cases', 0) - rep.get('n_failed', 0)}/{rep.get('n_cases', 0)} cases "
             f"passed on {rep.get('device', {}).get('name')}; complete={rep.get('complete')}; "
             f"pytest -m gpu returncode={rep.get('pytest', {}).get('returncode')}.", ""]
    for b, n in (rep.get("by_backend") or {}).items():
        first = f" First failure: {n['first'][0][:200]}" if n.get("first") else ""
        lines.append(f"- {b}: {n['passed']}/{n['cases']} passed.{first}")
    return lines + [""]


def headline_lines(out: Path) -> list[str]:
    files = sorted(out.glob("bench_headdim_*.json"))
    rep = _load(files[0]) if files else None
    if not isinstance(rep, dict):
        return []
    rows = [r for r in rep.get("records", []) if r.get("status") == "ok"
            and r.get("params", {}).get("head_dim") == 64
            and (str(r.get("backend", "")).startswith(("cuda", "auto")) or "cold" in r)]
    if not rows:
        return []
    lines = [f"## Headline ratios, head_dim 64 ({files[0].name}, measured)", "",
             "| shape | backend | median ms | TFLOP/s | time / SDPA's | p25-p75 ms | "
             "host ms per launch | attention() host ms | timing check |",
             "|---|---|---|---|---|---|---|---|---|"]
    nan = float("nan")
    for r in rows:
        p = r["params"]
        check = "ok" if r.get("quality_ok") else (r.get("quality_reason") or "not recorded")
        lines.append(f"| {p.get('shape')} B={p.get('B')} T={p.get('T')} nh={p.get('n_head')} "
                     f"{p.get('dtype')} causal={p.get('causal')} | {r['backend']} | "
                     f"{r.get('median_ms', nan):.3f} | {r.get('tflops', nan):.1f} | "
                     f"{r.get('time_ratio_to_sdpa', nan):.2f} | "
                     f"{r.get('p25_ms', nan):.3f}-{r.get('p75_ms', nan):.3f} | "
                     f"{r.get('host_ms_per_call', nan):.4f} | {r.get('host_path_ms', nan):.3f} | "
                     f"{str(check)[:80].replace('|', '/')} |")
    lines += ["", "Kernel time: launches queued back to back between one pair of CUDA events "
              "(prepared launches, one cuLaunchKernel each); the host's own time per launch and "
              "per attention() call are the last columns, measured apart. Every median above "
              "is warm (the same inputs every call)."]
    cold = [r for r in rows if isinstance(r.get("cold"), dict)]
    if cold:
        lines += ["", "| backend | warm median ms | cold median ms | cold / warm | how cold |",
                  "|---|---|---|---|---|"]
        for r in cold:
            c = r["cold"]
            if c.get("status") != "ok":
                lines.append(f"| {r['backend']} | {r.get('median_ms', nan):.3f} | failed | | "
                             f"{str(c.get('reason', ''))[:80].replace('|', '/')} |")
                continue
            lines.append(f"| {r['backend']} | {r.get('median_ms', nan):.3f} | "
                         f"{c.get('median_ms', nan):.3f} | "
                         f"{c.get('median_ms', nan) / r.get('median_ms', nan):.2f} | "
                         f"{str(c.get('method', ''))[:120].replace('|', '/')} |")
    sweep = sorted({(r.get("params", {}).get("head_dim"), r.get("backend"))
                    for r in rep.get("records", []) if r.get("status") == "ok"})
    hds = sorted({h for h, _ in sweep if isinstance(h, int)})
    if hds and len(hds) > 1:
        by = {(r.get("params", {}).get("head_dim"), r.get("backend")): r
              for r in rep.get("records", []) if r.get("status") == "ok"}
        backends = [b for b in dict.fromkeys(b for _, b in sweep) if b != "sdpa"]
        lines += ["", "Time over SDPA's, by head_dim (warm; `auto` is attention()'s own choice, "
                  "`auto:pad` with pad=True):", "",
                  "| head_dim | " + " | ".join(backends) + " |",
                  "|---|" + "---|" * len(backends)]
        for h in hds:
            cells = [f"{by[h, b].get('time_ratio_to_sdpa', nan):.2f}" if (h, b) in by else "-"
                     for b in backends]
            lines.append(f"| {h} | " + " | ".join(cells) + " |")
    if rep.get("incomplete"):
        lines += ["", f"**Incomplete**: {str(rep['incomplete'])[:200]}"]
    return lines + [""]


NCU_COVERS = {
    "_op_ld.": "bank conflicts of LSU shared-memory loads (ld.shared): not ldmatrix, not cp.async",
    "_op_st.": "bank conflicts of LSU shared-memory stores (st.shared)",
    "_op_ldsm.": "bank conflicts of ldmatrix (shared memory to registers, the tensor-core "
                 "operand loads of v3)",
    "_op_ldgsts.": "bank conflicts of cp.async (LDGSTS: global to shared, v3's tile copies)",
}


def ncu_lines(out: Path, work: Path | None) -> list[str]:
    path = next((p for p in ((work or out) / "ncu.csv", out / "ncu.csv") if p.is_file()), None)
    if path is None:
        return []
    rows = []
    with path.open(newline="") as f:
        text = [ln for ln in f if ln.startswith('"')]   # ncu prints its own lines first
    for r in csv.DictReader(text):
        if r.get("Metric Name"):
            rows.append(r)
    if not rows:
        return []
    lines = ["## Nsight Compute, headline case (B=8, T=1024, nh=12, hs=64, causal, bf16; "
             "--clock-control none)", "", "| kernel | metric | value | unit |", "|---|---|---|---|"]
    for r in rows:
        name = r.get("Kernel Name", "")[:60]
        lines.append(f"| {name} | {r['Metric Name']} | {r.get('Metric Value')} | "
                     f"{r.get('Metric Unit', '')} |")
    names = {r["Metric Name"] for r in rows}
    covers = [f"- `...{k}sum`: {v}" for k, v in NCU_COVERS.items()
              if any(k in n and "bank_conflicts" in n for n in names)]
    if covers:
        lines += ["", "What each bank-conflict counter covers (a kernel's conflicts are their "
                  "sum; v3 moves nearly all its shared-memory data through ldmatrix and "
                  "cp.async):"] + covers
    return lines + [""]


def sanitizer_lines(logs: Path | None) -> list[str]:
    folder = logs / "sanitizer" if logs is not None else None
    if folder is None or not folder.is_dir() or not any(folder.glob("*.log")):
        return []
    import gpu_sanitizer_report as R
    status, text = R.verdict(folder)
    lines = ["## compute-sanitizer (one process per tool and kernel version; API errors "
             "returned to the host not counted)", ""]
    lines += [f"- {part}" for part in text.split("; ") if part]
    return lines + [""]


def model_lines(out: Path, logs: Path | None = None) -> list[str]:
    rep = _load(out / "sass_model.json")
    if rep is None and logs is not None:
        rep = _load(logs / "model" / "sass_model.json")
    if not isinstance(rep, dict):
        return []
    lines = ["## SASS time model (a model, not a measurement)", ""]
    for r in rep.get("rows", []):
        ev, m = r.get("evidence", {}), r.get("model", {})
        if ev.get("head_dim") == 64:
            lo, up = m.get("lower", m.get("seconds", 0)), m.get("upper")
            bracket = (f"{lo * 1e6:.1f}-{up * 1e6:.1f} us (every term overlapped - none)"
                       if up is not None else f"from {lo * 1e6:.1f} us (every term overlapped)")
            lines.append(f"- {m.get('gpu')} {ev.get('version')} hd=64: MODEL {bracket}, "
                         f"largest term: {m.get('bound_by')}")
    return lines + [""]


UNDER_LOAD = ("**Executed on the lent GPU while gpu-check and compute-sanitizer shared it** "
              "(scripts/gpu_suite.sh): any time this chapter printed was taken under that load "
              "and is not evidence. The measurements are the suite's bench and pipeline files.")


def mark_under_load(folder: Path) -> int:
    """Put the UNDER_LOAD note first in every executed notebook under folder; the count."""
    n = 0
    for nb_path in sorted(folder.rglob("*.ipynb")):
        nb = _load(nb_path)
        if not isinstance(nb, dict) or not isinstance(nb.get("cells"), list):
            continue
        if nb["cells"] and UNDER_LOAD in "".join(nb["cells"][0].get("source", "")):
            continue
        nb["cells"].insert(0, {"cell_type": "markdown", "metadata": {"tags": ["under-load"]},
                               "source": [UNDER_LOAD]})
        nb_path.write_text(json.dumps(nb, indent=1))
        n += 1
    return n


def main(argv: list[str]) -> int:
    if argv[:1] == ["--mark-under-load"] and len(argv) == 2:
        if not Path(argv[1]).is_dir():
            print(f"gpu_summary: --mark-under-load {argv[1]!r} is not a folder", file=sys.stderr)
            return 2
        n = mark_under_load(Path(argv[1]))
        print(f"{n} executed chapter(s) marked as run under load (timings not evidence)")
        return 0
    opts: dict[str, str | None] = {"--deadline": None, "--stage": None}
    for flag in opts:
        if flag in argv:
            i = argv.index(flag)
            if i + 1 >= len(argv) or argv[i + 1].startswith("--"):
                print(f"gpu_summary: {flag} needs a value", file=sys.stderr)
                return 2
            opts[flag] = argv[i + 1]
            argv = argv[:i] + argv[i + 2:]
    deadline, stage = opts["--deadline"], opts["--stage"]
    unknown = [a for a in argv if a.startswith("--") and a != "--rehearse"]
    args = [a for a in argv if not a.startswith("--")]
    if unknown or len(args) not in (2, 3):
        print(__doc__, file=sys.stderr)
        return 2
    out, steps = Path(args[0]), Path(args[1])
    work = Path(args[2]) if len(args) == 3 else None
    if not out.is_dir():
        print(f"gpu_summary: OUT {args[0]!r} is not a folder", file=sys.stderr)
        return 2
    try:
        text = steps.read_text(errors="replace")
    except OSError as e:
        print(f"gpu_summary: STEPS_TSV {args[1]!r} cannot be read ({e.strerror or e})",
              file=sys.stderr)
        return 2
    rehearse = "--rehearse" in argv
    rows = [ln.rstrip("\n").split("\t") for ln in text.splitlines() if ln.strip()]
    env = next((r[4] for r in rows if r[0] == "environment" and len(r) > 4), "")
    failed = [r[0] for r in rows if len(r) > 1 and r[1] == "fail"]
    k_failed = [n for n in failed if not is_chapter_row([n])]
    c_failed = [n for n in failed if is_chapter_row([n])]
    c_skipped = [r[0] for r in rows if r[0].startswith("chapter:") and len(r) > 1
                 and r[1] == "skipped"]
    head = ["# GPU suite: " + ("REHEARSAL on a CPU (GPU steps skipped)" if rehearse else
                               "first-contact run")
            + (f", stage {stage}" if stage and stage != "all" else ""), "",
            f"Overall: **{'fail' if failed else 'pass'}**" +
            (f" (failed: {', '.join(failed)})" if failed else "") + ".",
            f"Kernels: **{'fail' if k_failed else 'pass'}**"
            + (f" ({', '.join(k_failed)})" if k_failed else "")
            + f". Chapters: **{'fail' if c_failed else 'pass'}**"
            + (f" ({', '.join(c_failed)})" if c_failed else "")
            + (f"; {len(c_skipped)} skipped with their reason" if c_skipped else "") + ".",
            "", env, ""]
    if deadline:
        head += [f"Global deadline {deadline} s; every step's limit derived from it (a "
                 f"torch-importing step gets a floor, up to 40 s past it); worst case "
                 f"{deadline} + 40 (floors) + 5 (kill grace) + 15 (final summary) s, under the "
                 f"device's 600 s "
                 f"per command. This page is rewritten after every step: "
                 f"{len(rows)} step(s) so far"
                 + ("." if any(r[0] == "summary" for r in rows) else
                    " (the run has not finished, or was cut short)."), ""]
    kernel_rows = [r for r in rows if not is_chapter_row(r)]
    chapter_rows = [r for r in rows if is_chapter_row(r)]
    page = head + ["## Kernel results (every GPU step)", ""] + steps_table(kernel_rows) + [""]
    if chapter_rows:
        page += ["## Chapter results (a chapter that cannot run here is skipped, with its "
                 "reason)", ""] + steps_table(chapter_rows) + [""]
    page = page + gpucheck_lines(out) + headline_lines(out) + \
        sanitizer_lines(work) + ncu_lines(out, work) + model_lines(out, work)
    page.append("Files: gpucheck.json, bench_*_<gpu>.json, pipeline_<gpu>.json (land them: python "
                "scripts/land_gpu_out.py OUT), notebooks.tar.gz (the chapters, executed under "
                "load), logs.tar.gz (every step's log, the sanitizer reports, ncu.csv, "
                "sass_model.json).")
    tmp = out / ".gpu_summary.md.tmp"
    tmp.write_text("\n".join(page) + "\n")
    tmp.replace(out / "gpu_summary.md")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
