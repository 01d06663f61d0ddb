"""The command line: python -m andrea_edu.bench {head-dim|projections|layout|all|gpu-check|gpu-suite}.

    python -m andrea_edu.bench head-dim            # sweep head_dim, per backend -> book/data/
    python -m andrea_edu.bench projections         # per-head (36 matmuls), fused (3), c_attn (1)
    python -m andrea_edu.bench layout              # strided vs contiguous matmul, .contiguous()
    python -m andrea_edu.bench all                 # the three above, on this machine
    python -m andrea_edu.bench gpu-check --out D   # andrea_edu.bench.gpucheck.main
    python -m andrea_edu.bench gpu-suite --out D   # everything GPU, <= 5 min on an H200
"""
from __future__ import annotations

import argparse
import sys
import time

import torch

from andrea_edu.bench import suites as bench_cases
from andrea_edu.bench.results import write_results
from andrea_edu.bench.timing import pick_device
from andrea_edu.env import fast_mode



def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m andrea_edu.bench", description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    for name, help_ in (("head-dim", "head_dim sweep per backend"),
                        ("projections", "per-head vs fused vs c_attn projections"),
                        ("layout", "strided vs contiguous matmul, cost of .contiguous()"),
                        ("all", "head-dim, projections and layout on this machine"),
                        ("gpu-suite", "everything GPU in <= 5 min (refuses to run on a CPU)")):
        p = sub.add_parser(name, help=help_)
        p.add_argument("--out", default=None, help="output folder (default: book/data)")
        p.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
        p.add_argument("--fast", action="store_true", help="tiny sizes (also: ANDREA_FAST=1)")
        p.add_argument("--repeats", type=int, default=None, help="timed calls per case")
        p.add_argument("--warmup", type=int, default=None, help="untimed calls per case")
        p.add_argument("--budget-s", type=float, default=None,
                       help="stop timing new cases after this many seconds (left: 'skipped')")
        p.add_argument("--threads", type=int, default=None,
                       help="torch CPU threads while measuring (default on a CPU: 1)")
        p.add_argument("--no-progress", action="store_true", help="no tqdm progress bar")
        p.add_argument("--keep-going", action="store_true",
                       help="record an invalid backend and go on (exit status 1 at the end)")
    g = sub.add_parser("gpu-check", help="andrea_edu.gpucheck.main (extra arguments passed on)")
    g.add_argument("rest", nargs=argparse.REMAINDER)
    return ap


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["gpu-check"]:  # everything after the word goes to gpucheck untouched
        try:
            from andrea_edu.bench import gpucheck
        except ImportError as e:
            print(f"gpu-check: andrea_edu.bench.gpucheck is not available ({e})", file=sys.stderr)
            return 2
        return int(gpucheck.main(argv[1:]) or 0)
    args = _parser().parse_args(argv)
    fast = args.fast or fast_mode()
    if args.cmd == "gpu-suite":
        if not torch.cuda.is_available():
            print("gpu-suite: torch sees no CUDA GPU; nothing measured (run `all` for the CPU)",
                  file=sys.stderr)
            return 2
        args.device = "cuda"
        if args.budget_s is None:
            args.budget_s = 270.0  # the suite must finish in 5 minutes on an H200
    # all / gpu-suite: the short torch-only suites first, so that they are on disk even if a
    # kernel of the head_dim sweep misbehaves
    suites = {"head-dim": ["headdim"], "projections": ["projections"], "layout": ["layout"]}.get(
        args.cmd, ["projections", "layout", "headdim"])
    device = pick_device(args.device)
    deadline = None if args.budget_s is None else time.monotonic() + args.budget_s
    command = "python -m andrea_edu.bench " + " ".join(argv)
    bad = 0
    for suite in suites:
        obj = bench_cases.run_suite(suite, device=device, fast=fast, repeats=args.repeats,
                                    warmup=args.warmup, deadline=deadline,
                                    progress=not args.no_progress,
                                    strict=not (args.keep_going or args.cmd == "gpu-suite"),
                                    command=command, threads=args.threads)
        path = write_results(obj, args.out)
        n = {s: sum(r["status"] == s for r in obj["records"]) for s in
             ("ok", "unavailable", "invalid", "failed", "skipped")}
        bad += n["invalid"] + n["failed"]
        print(f"[bench] {suite}: {n} -> {path}")
    return 1 if bad else 0

