"""The command line: python -m andrea_lab.bench {head-dim|projections|layout|all|gpu-check|gpu-suite}.

    python -m andrea_lab.bench head-dim            # sweep head_dim, per backend -> andrea_runs/
    python -m andrea_lab.bench projections         # per-head (36 matmuls), fused (3), c_attn (1)
    python -m andrea_lab.bench layout              # strided vs contiguous matmul, .contiguous()
    python -m andrea_lab.bench all                 # the three above, on this machine
    python -m andrea_lab.bench gpu-check --out D   # andrea_lab.bench.gpucheck.main
    python -m andrea_lab.bench gpu-suite --out D   # everything GPU, <= 5 min on an H200
    python -m andrea_lab.bench gpu-headline --out D   # the GPU suite's stage 1: head_dim
                                                   # 32..128 at the headline shape, every
                                                   # kernel, attention()'s choice (pad on and
                                                   # off) and SDPA, cold and warm at 64

Arguments are checked before anything runs (one line naming the flag, exit status 2). A fast
run, or one that measured nothing, never replaces full-size data unless --replace says so.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

from andrea_edu.bench import suites as bench_cases
from andrea_edu.bench.results import data_dir
from andrea_lab.arg_checks import (check_device, check_int, check_number, check_out_dir,
                                   check_threads, fail, first_problem)
from andrea_lab.bench.writer import write_results
from andrea_lab.process import sigterm_interrupts
from andrea_edu.bench.timing import pick_device
from andrea_edu.env import fast_mode
from andrea_lab.store import committed_reason, default_out_dir


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m andrea_lab.bench",
                                 description=__doc__.split("\n")[0],
                                 epilog="CPU instruction sets are pinned to AVX2 (ANDREA_CPU_ISA="
                                 "native turns that off); provenance records them.",
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True, metavar="COMMAND")
    for name, help_ in (("head-dim", "head_dim sweep per backend"),
                        ("projections", "per-head vs fused vs c_attn projections"),
                        ("layout", "strided vs contiguous matmul, cost of .contiguous()"),
                        ("all", "head-dim, projections and layout on this machine"),
                        ("gpu-suite", "everything GPU in <= 5 min (refuses to run on a CPU)"),
                        ("gpu-headline", "stage 1 of the GPU suite: the head_dim headline, "
                                         "written case by case (refuses to run on a CPU)")):
        p = sub.add_parser(name, help=help_, description=help_)
        p.add_argument("--out", default=None,
                       help="output folder, created if missing (default: $ANDREA_OUT_DIR, else "
                            "andrea_runs/; the book's data only when named here)")
        p.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"],
                       help="where to measure: auto = cuda when torch sees a GPU, else cpu; "
                            "cuda without a GPU is refused (default: auto)")
        p.add_argument("--fast", action="store_true",
                       help="tiny sizes, seconds (also: ANDREA_FAST=1); never replaces "
                            "full-size data unless --replace")
        p.add_argument("--repeats", type=int, default=None,
                       help=f"timed calls per case, an integer in 1..{MAX_REPEATS} (default: 20 "
                            "on a GPU, 7 on a CPU, 3 when fast; a case's time budget may run fewer, "
                            "and its record says how many)")
        p.add_argument("--warmup", type=int, default=None,
                       help="untimed calls per case, an integer >= 0 (default: 3, 1 when fast)")
        p.add_argument("--budget-s", type=float, default=None,
                       help="seconds > 0: stop timing new cases after this long (the rest is "
                            "recorded as 'skipped'); default: no limit (270 for gpu-suite)")
        p.add_argument("--threads", type=int, default=None,
                       help="torch CPU threads while measuring, an integer >= 1 (default on a "
                            "CPU: 1)")
        p.add_argument("--no-progress", action="store_true",
                       help="draw no tqdm progress bar on stderr (logs stay clean)")
        p.add_argument("--keep-going", action="store_true",
                       help="record an invalid backend and go on (exit status 1 at the end)")
        p.add_argument("--replace", action="store_true",
                       help="allow a fast run, or one that measured nothing, to replace a file "
                            "of full-size measurements")
    g = sub.add_parser("gpu-check", help="andrea_lab.bench.gpucheck.main (extra arguments "
                       "passed on; see gpu-check --help)")
    g.add_argument("rest", nargs=argparse.REMAINDER,
                   help="everything after gpu-check, passed on untouched (e.g. --out DIR; see "
                        "gpu-check --help)")
    return ap


MAX_REPEATS = 100_000  # timed calls per case; the case budget lowers them for slow cases anyway
MAX_WARMUP = 1_000     # untimed calls per case: a few reach steady clocks and warm caches


def _check_args(args) -> str | None:
    """One line naming the first bad flag and what is allowed, or None (before any work)."""
    return first_problem(check_int("--repeats", args.repeats, 1, MAX_REPEATS),
                         check_int("--warmup", args.warmup, 0, MAX_WARMUP),
                         check_threads("--threads", args.threads),
                         check_number("--budget-s", args.budget_s, 0.0),
                         check_device("--device", args.device),
                         check_out_dir("--out", args.out))


def main(argv=None) -> int:
    """Exit status: 0 all measured; 1 a backend invalid or failed, or nothing measured at all
    (every case skipped or unavailable: nothing is written then); 2 bad arguments, no GPU for
    gpu-suite, or a refusal to replace full-size data."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["gpu-check"]:  # everything after the word goes to gpucheck untouched
        try:
            from andrea_lab.bench import gpucheck
        except ImportError as e:
            print(f"gpu-check: andrea_lab.bench.gpucheck is not available ({e})", file=sys.stderr)
            return 2
        return int(gpucheck.main(argv[1:]) or 0)
    ap = _parser()
    args = ap.parse_args(argv)
    prog = f"{ap.prog} {args.cmd}"
    problem = _check_args(args)
    if problem:
        return fail(prog, problem)
    fast = args.fast or fast_mode()
    if args.out is None:  # never the book's own data folder unless named
        args.out = str(default_out_dir())
    gpu_cmd = args.cmd in ("gpu-suite", "gpu-headline")
    if gpu_cmd:
        if not torch.cuda.is_available():
            return fail(prog, "torch sees no CUDA GPU; nothing measured (run `all` for the CPU)")
        args.device = "cuda"
        if args.budget_s is None:
            args.budget_s = 270.0  # the suite must finish in 5 minutes on an H200
    # all / gpu-suite: the short torch-only suites first, so that they are on disk even if a
    # kernel of the head_dim sweep misbehaves
    suites = {"head-dim": ["headdim"], "projections": ["projections"], "layout": ["layout"],
              "gpu-headline": ["headdim"]}.get(args.cmd, ["projections", "layout", "headdim"])
    options = headline_options() if args.cmd == "gpu-headline" else {}
    device = pick_device(args.device)
    if not args.replace:  # refuse before measuring, not after: a fast run over full data
        problem = _would_replace_full(suites, device, fast, args.out)
        if problem:
            return fail(prog, problem)
    deadline = None if args.budget_s is None else time.monotonic() + args.budget_s
    command = "python -m andrea_lab.bench " + " ".join(argv)
    bad = nothing = 0
    with sigterm_interrupts():  # SIGTERM as Ctrl-C: what was measured is saved, labelled
        # incomplete
        for i, suite in enumerate(suites):
            try:
                obj = bench_cases.run_suite(suite, device=device, fast=fast, repeats=args.repeats,
                                            warmup=args.warmup, deadline=deadline,
                                            progress=not args.no_progress,
                                            strict=not (args.keep_going or gpu_cmd),
                                            command=command, threads=args.threads,
                                            checkpoint=_checkpoint(args) if gpu_cmd else None,
                                            **options)
            except (Exception, KeyboardInterrupt) as e:
                partial = getattr(e, "partial", None)
                if partial is None:
                    if isinstance(e, KeyboardInterrupt):
                        print(f"[bench] {suite}: interrupted before anything was measured; nothing "
                              f"written", file=sys.stderr)
                        return 130
                    raise
                if gpu_cmd:
                    # the device returns at most 8 files: the partial results go into the
                    # suite's own file (its checkpoint's place), labelled incomplete inside,
                    # never into a ninth file beside it
                    where = _save_partial_in_place(partial, args.out)
                else:
                    where = _save_incomplete(partial, args.out)
                left = ", ".join(suites[i + 1:])
                print(f"[bench] {suite}: stopped ({e}); what was measured is saved, labelled "
                      f"incomplete, in {where}; nothing replaced"
                      + (f"; not run: {left}" if left else ""), file=sys.stderr)
                return 1
            n = {s: sum(r["status"] == s for r in obj["records"]) for s in
                 ("ok", "unavailable", "invalid", "failed", "skipped")}
            bad += n["invalid"] + n["failed"]
            if not n["ok"]:
                nothing += 1
                print(f"[bench] {suite}: {n}: nothing measured, nothing written", file=sys.stderr)
                continue
            try:
                path = write_results(obj, args.out, replace=args.replace)
            except FileExistsError as e:
                return fail(prog, str(e))
            except ValueError as e:  # measured, then refused by the validator: keep it apart
                obj["incomplete"] = f"failed validation: {e}"
                where = _save_incomplete(obj, args.out)
                print(f"[bench] {suite}: the measurements fail validation ({e}); saved, labelled "
                      f"incomplete, in {where}; nothing replaced", file=sys.stderr)
                return 1
            print(f"[bench] {suite}: {n} -> {path}")
    return 1 if (bad or nothing) else 0


# stage 1 of the GPU suite (scripts/gpu_suite.sh --stage 1): the head_dims of the headline
# (32, 64 and the misaligned 72, 80, 96, 100, 128), the headline shape only, every registered
# kernel, attention()'s own choice with pad off and on, SDPA; cold beside warm at 64
HEADLINE_HEAD_DIMS = (32, 64, 72, 80, 96, 100, 128)
HEADLINE_CASE_BUDGET_S = 0.5


def headline_options() -> dict:
    """run_suite's options for gpu-headline (and checkpoints after every case)."""
    from andrea_edu.bench.cases import dispatched_backends
    from andrea_edu.kernels import registry
    return dict(head_dims=HEADLINE_HEAD_DIMS, shapes=("ANDREA-120M",), series=("n_head",),
                backends=("sdpa", *(s.backend for s in registry.specs()),
                          *dispatched_backends()),
                cold_head_dims=(64,), case_budget_s=HEADLINE_CASE_BUDGET_S,
                checkpoint_every=1)


def _save_incomplete(obj: dict, out, name: str | None = None) -> Path:
    """incomplete_bench_<suite>_<device>.json (or `name`: andrea_lab.pipeline_timing's
    incomplete_pipeline_<device>.json) beside the results (or in store.default_out_dir() when
    that folder is committed data): never a file the loaders read."""
    from andrea_edu.data import MANIFEST
    from andrea_lab.store import stamped, write_json_atomic
    if isinstance(obj.get("provenance"), dict):  # the commit, as every written record
        obj = dict(obj, provenance=stamped(obj["provenance"]))
    folder = Path(out) if out is not None else default_out_dir()
    if (folder / MANIFEST).exists():
        folder = default_out_dir()
    slug = obj.get("provenance", {}).get("device_slug", "unknown")
    path = folder / (name or f"incomplete_bench_{obj['suite']}_{slug}.json")
    return write_json_atomic(path, obj, manifest=False, indent=1)


def _save_partial_in_place(obj: dict, out) -> Path | str:
    """gpu-suite, stopped: what was measured, labelled {"incomplete": reason} inside, written as
    the suite's own bench_<suite>_<device>.json over its checkpoint (never over committed data:
    write_results refuses that); a file that cannot be written is said, not raised."""
    if not any(r["status"] == "ok" for r in obj["records"]):
        return "nowhere (nothing measured)"
    slug = obj.get("provenance", {}).get("device_slug", "unknown")
    if committed_reason(Path(out) / f"bench_{obj['suite']}_{slug}.json"):
        return _save_incomplete(obj, out)   # apart, as the other commands do
    try:
        return write_results(obj, out, replace=True)
    except (OSError, ValueError) as e:
        return f"nowhere ({e})"


def _checkpoint(args):
    """gpu-suite: write the results so far every few cases, so that a run stopped by a fault or
    by the slot's end keeps what it measured (the final write replaces them). A checkpoint is
    labelled incomplete inside ("incomplete": how far it got): a file left by a cut says so."""
    def save(obj):   # never over committed data unless --replace (as the final write)
        if any(r["status"] == "ok" for r in obj["records"]):
            done = sum(r["status"] != "skipped" for r in obj["records"])
            obj = dict(obj, incomplete=f"checkpoint: {done} records so far; the run had not "
                                       f"finished when this was written")
            try:
                write_results(obj, args.out, replace=True if _own_checkpoint(obj, args.out)
                              else args.replace)
            except (OSError, ValueError) as e:   # FileExistsError included: said, not fatal
                print(f"[bench] checkpoint not written: {e}", file=sys.stderr)
    return save


def _own_checkpoint(obj: dict, out) -> bool:
    """Whether the file this checkpoint would replace is an earlier checkpoint (labelled
    incomplete) of a run, not finished results."""
    slug = obj.get("provenance", {}).get("device_slug", "unknown")
    path = Path(out) / f"bench_{obj['suite']}_{slug}.json"
    try:
        return not committed_reason(path) and bool(json.loads(path.read_text()).get("incomplete"))
    except (OSError, ValueError, AttributeError):
        return False


def _would_replace_full(suites, device, fast, out) -> str | None:
    """The reason to refuse, when a fast run would land on a file of full-size measurements,
    or any run on a committed file (andrea_lab.store.committed_reason)."""
    from andrea_lab.bench.writer import _is_full
    from andrea_edu.bench.timing import device_slug
    folder = Path(out) if out is not None else data_dir()
    slug = "cpu" if device == "cpu" else device_slug(torch.cuda.get_device_properties(0).name)
    for suite in suites:
        path = folder / f"bench_{suite}_{slug}.json"
        why = committed_reason(path) if path.exists() else None
        if why:
            return (f"--out: {path} {why}; add --replace to replace it, or write elsewhere with "
                    f"--out DIR")
        if not fast:
            continue
        try:
            old = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(old, dict) and _is_full(old):
            return (f"--fast: {path} holds full-size measurements; a fast run does not replace "
                    f"them (add --replace, or write elsewhere with --out DIR)")
    return None
