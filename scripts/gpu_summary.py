"""Write gpu_summary.md: one page saying what scripts/gpu_suite.sh found, step by step.

    python scripts/gpu_summary.py OUT STEPS_TSV [--rehearse]

STEPS_TSV: one line per step, tab-separated: name, status (pass, fail, skipped, refused),
seconds, budget seconds, reason. The page adds, when their files are in OUT: gpu-check's
result per backend (gpucheck.json), the head_dim sweep's headline ratios at head_dim 64
(bench_headdim_*.json: the kernels' time over SDPA's), Nsight Compute's counters for v2 and v3
(ncu.csv), and the SASS time model's lower bounds (sass_model.json, a model). Standard library
only: it runs on the bare GPU image. Exit status 0 written; 2 bad arguments.
"""
from __future__ import annotations

import csv
import json
import sys
from pathlib import Path


def _load(path: Path):
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


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
            and r.get("params", {}).get("head_dim") == 64 and str(r.get("backend", "")).startswith("cuda")]
    if not rows:
        return []
    lines = [f"## Headline ratios, head_dim 64 ({files[0].name}, measured)", "",
             "| shape | backend | median ms | TFLOP/s | time / SDPA's |", "|---|---|---|---|---|"]
    for r in rows:
        p = r["params"]
        lines.append(f"| {p.get('shape')} B={p.get('B')} T={p.get('T')} nh={p.get('n_head')} "
                     f"{p.get('dtype')} causal={p.get('causal')} | {r['backend']} | "
                     f"{r.get('median_ms', float('nan')):.3f} | {r.get('tflops', float('nan')):.1f} | "
                     f"{r.get('time_ratio_to_sdpa', float('nan')):.2f} |")
    return lines + [""]


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
    return lines + [""]


def model_lines(out: Path) -> list[str]:
    rep = _load(out / "sass_model.json")
    if not isinstance(rep, dict):
        return []
    lines = ["## SASS time model (a model, not a measurement)", ""]
    for r in rep.get("rows", []):
        ev, m = r.get("evidence", {}), r.get("model", {})
        if ev.get("head_dim") == 64:
            lines.append(f"- {m.get('gpu')} {ev.get('version')} hd=64: lower bound "
                         f"{m.get('seconds', 0) * 1e6:.1f} us ({m.get('bound_by')}-bound, model)")
    return lines + [""]


def main(argv: list[str]) -> int:
    args = [a for a in argv if not a.startswith("--")]
    if len(args) not in (2, 3):
        print(__doc__, file=sys.stderr)
        return 2
    out, steps = Path(args[0]), Path(args[1])
    work = Path(args[2]) if len(args) == 3 else None
    rehearse = "--rehearse" in argv
    rows = [ln.rstrip("\n").split("\t") for ln in steps.read_text().splitlines() if ln.strip()]
    env = next((r[4] for r in rows if r[0] == "environment"), "")
    failed = [r[0] for r in rows if len(r) > 1 and r[1] == "fail"]
    head = ["# GPU suite: " + ("REHEARSAL on a CPU (GPU steps skipped)" if rehearse else
                               "first-contact run"), "",
            f"Overall: **{'fail' if failed else 'pass'}**" +
            (f" (failed: {', '.join(failed)})" if failed else "") + ".", "", env, ""]
    page = head + steps_table(rows) + [""] + gpucheck_lines(out) + headline_lines(out) + \
        ncu_lines(out, work) + model_lines(out)
    page.append("Files: gpucheck.json, bench_*_<gpu>.json, sass_model.json (copy the bench and "
                "model files into book/data/), notebooks.tar.gz (the chapters, executed), "
                "logs.tar.gz (every step's log, the sanitizer reports, ncu.csv).")
    tmp = out / ".gpu_summary.md.tmp"
    tmp.write_text("\n".join(page) + "\n")
    tmp.replace(out / "gpu_summary.md")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
