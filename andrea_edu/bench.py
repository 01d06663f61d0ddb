"""Benchmarks with provenance: timing, FLOP formulas, JSON results, their schema, the CLI.

Introduced in the chapter "The configuration mirrors the hardware" (the head_dim sweep); the
chapters "Three matrices per head, or one big matrix" and "How CUDA stores the heads" read the
`projections` and `layout` results. The suites themselves live in `andrea_edu.bench_cases`.

    python -m andrea_edu.bench head-dim            # sweep head_dim, per backend -> book/data/
    python -m andrea_edu.bench projections         # per-head (36 matmuls), fused (3), c_attn (1)
    python -m andrea_edu.bench layout              # strided vs contiguous matmul, .contiguous()
    python -m andrea_edu.bench all                 # the three above, on this machine
    python -m andrea_edu.bench gpu-check --out D   # andrea_edu.gpucheck.main
    python -m andrea_edu.bench gpu-suite --out D   # everything GPU, <= 5 min on an H200

Rules every suite follows (as llm.c's dev/cuda and Triton's tutorials do):
  1. validate each backend's output against the fp32 reference BEFORE timing it; a wrong
     result is never timed (strict: raise ValidationError; otherwise status "invalid");
  2. warm up, then time `repeats` calls, the backends of one case taking turns: CUDA events
     on a GPU, time.perf_counter on a CPU; report min / median / max in milliseconds;
  3. TFLOP/s from a FLOP formula written below, and the time ratio to torch's SDPA;
  4. every file carries its provenance; CPU figures are labelled CPU, never passed off as GPU.
Results go to `book/data/bench_<suite>_<device>.json` (device: "cpu" or e.g. "nvidia-h200").
"""
from __future__ import annotations

import argparse
import datetime as _dt
import os
import platform
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

from .bench_results import (SCHEMA, SCHEMA_VERSION, SUITES, data_dir, load_results,
                            validate_result, write_results)

__all__ = ["attention_flops", "matmul_flops", "time_fn", "time_fns", "check_close", "tolerance",
           "provenance", "pick_device", "ValidationError", "SCHEMA", "SCHEMA_VERSION", "SUITES",
           "validate_result", "write_results", "load_results", "data_dir", "main"]
_REPO = Path(__file__).resolve().parents[1]


class ValidationError(RuntimeError):
    """A backend's output disagrees with the reference: it is not timed."""


# ------------------------------------------------------------------------- FLOP formulas
def attention_flops(B: int, nh: int, T: int, hs: int, causal: bool) -> float:
    """FLOPs of one attention forward, counting a multiply-add as 2 FLOPs.

    Two matmuls per head: scores = Q K^T is (T x hs) @ (hs x T) = 2*T*T*hs FLOPs, and
    out = P V is (T x T) @ (T x hs) = 2*T*T*hs FLOPs: 4*B*nh*T*T*hs in all. Softmax, scaling and
    masking (O(B*nh*T*T) non-matmul work) are not counted. Causal attention needs only the lower
    triangle, T*(T+1)/2 of the T*T scores; by the usual convention we count exactly half.
    """
    for name, v in (("B", B), ("nh", nh), ("T", T), ("hs", hs)):
        if not isinstance(v, int) or v < 1:
            raise ValueError(f"{name}={v!r} must be a positive int")
    flops = 4.0 * B * nh * T * T * hs
    return flops / 2 if causal else flops


def matmul_flops(M: int, N: int, K: int) -> float:
    """FLOPs of an (M x K) @ (K x N) matmul: 2*M*N*K (one multiply-add = 2 FLOPs)."""
    return 2.0 * M * N * K


# ------------------------------------------------------------------------- provenance
def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"


def _git_commit() -> str:
    if os.environ.get("ANDREA_GIT_COMMIT"):
        return os.environ["ANDREA_GIT_COMMIT"]
    try:
        run = dict(cwd=_REPO, capture_output=True, text=True, timeout=10)
        sha = subprocess.run(["git", "rev-parse", "HEAD"], **run).stdout.strip()
        if not sha:
            return "unknown"
        dirty = subprocess.run(["git", "status", "--porcelain", "andrea_edu"], **run).stdout
        return sha + ("-dirty" if dirty.strip() else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def _driver_version() -> str | None:
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20).stdout.strip()
        return out.splitlines()[0] if out else None
    except (OSError, subprocess.SubprocessError):
        return None


def device_slug(name: str) -> str:
    """'NVIDIA H200' -> 'nvidia-h200': the device part of a results file name."""
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-") or "gpu"


def provenance(device: str, command: str = "") -> dict:
    """Where a measurement came from: device, versions, commit, date (goes into every file)."""
    import andrea_edu

    p = {"device_kind": "gpu" if device == "cuda" else "cpu",
         "torch": torch.__version__, "cuda": torch.version.cuda,
         "andrea_edu": andrea_edu.__version__, "python": platform.python_version(),
         "git_commit": _git_commit(), "command": command,
         "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")}
    if device == "cuda":
        props = torch.cuda.get_device_properties(0)
        p.update(device=torch.cuda.get_device_name(0), device_slug=device_slug(props.name),
                 compute_capability=f"{props.major}.{props.minor}",
                 sm_count=props.multi_processor_count, driver=_driver_version())
    else:
        p.update(device=f"CPU: {_cpu_model()}", device_slug="cpu", driver=None,
                 cpu_threads=torch.get_num_threads(), cpu_count=os.cpu_count())
    if hasattr(os, "getloadavg"):  # other work on a shared machine slows CPU timings: say so
        p["load_avg_1min"] = round(os.getloadavg()[0], 2)
    return p


# ------------------------------------------------------------------------- timing
def pick_device(device: str = "auto") -> str:
    """'cuda' when asked for and present (or 'auto' and present), else 'cpu'."""
    if device not in ("auto", "cpu", "cuda"):
        raise ValueError(f"device={device!r} is not one of 'auto', 'cpu', 'cuda'")
    has = torch.cuda.is_available()
    if device == "cuda" and not has:
        raise RuntimeError("device='cuda' was asked for but torch sees no CUDA GPU "
                           "(torch.cuda.is_available() is False); use device='cpu' or 'auto'")
    return "cuda" if (device == "cuda" or (device == "auto" and has)) else "cpu"


def time_fns(fns: dict, device: str, repeats: int = 10, warmup: int = 3,
             budget_s: float | None = None) -> dict:
    """Time several callables that take turns: {name: {min_ms, median_ms, max_ms, repeats}}.

    `warmup` untimed rounds, then `repeats` rounds in which every fn() runs once, so that a
    drift of the machine (clocks, other load on a shared CPU) hits all of them alike.
    budget_s: after the warm-up, one more untimed round measures what a round costs, and
    repeats is lowered (never below 3) so that the timed rounds take about budget_s.
    GPU: one pair of CUDA events around each call (device time, launch included).
    CPU: time.perf_counter around each call.
    """
    if repeats < 1 or warmup < 0:
        raise ValueError(f"repeats={repeats} must be >= 1 and warmup={warmup} >= 0")
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    for _ in range(warmup):
        for fn in fns.values():
            fn()
    if budget_s is not None:
        sync()
        t0 = time.perf_counter()
        for fn in fns.values():
            fn()
        sync()
        per_round = max(time.perf_counter() - t0, 1e-9)
        repeats = max(min(3, repeats), min(repeats, int(budget_s / per_round)))
    times = {name: [] for name in fns}
    sync()
    for _ in range(repeats):
        for name, fn in fns.items():
            if device == "cuda":
                start, end = (torch.cuda.Event(enable_timing=True) for _ in range(2))
                start.record()
                fn()
                end.record()
                end.synchronize()
                times[name].append(start.elapsed_time(end))
            else:
                t0 = time.perf_counter()
                fn()
                times[name].append((time.perf_counter() - t0) * 1e3)
    return {name: {"min_ms": min(t), "median_ms": statistics.median(t), "max_ms": max(t),
                   "repeats": repeats} for name, t in times.items()}


def time_fn(fn, device: str, repeats: int = 10, warmup: int = 3) -> dict:
    """time_fns for one callable: {min_ms, median_ms, max_ms, repeats}."""
    return time_fns({"fn": fn}, device, repeats, warmup)["fn"]


def tolerance(dtype) -> tuple[float, float]:
    """(atol, rtol) of andrea_edu.attention.TOLERANCE: one set of tolerances for the library,
    gpucheck and the benchmarks (bf16 keeps 8 bits of mantissa, fp16 11, fp32 24)."""
    from .attention import TOLERANCE
    return TOLERANCE[dtype]


def check_close(out, ref, dtype, what: str) -> float:
    """Max abs error of out vs ref; raises ValidationError (also on NaN) when it exceeds
    atol + rtol * max|ref| (tolerance(dtype)): scaled by the largest value, since a bf16 result
    of size 30 carries rounding errors of about 0.1."""
    if tuple(out.shape) != tuple(ref.shape):
        raise ValidationError(f"{what}: output shape {tuple(out.shape)} differs from the "
                              f"reference's {tuple(ref.shape)}")
    ref = ref.float()
    err = (out.float() - ref).abs().max().item()
    atol, rtol = tolerance(dtype)
    allowed = atol + rtol * ref.abs().max().item()
    if not err <= allowed:  # NaN fails this too
        raise ValidationError(f"{what}: max |out - reference| = {err:.3g} exceeds the tolerance "
                              f"{allowed:.3g} for {dtype}: not timed")
    return err


# ------------------------------------------------------------------------- CLI
def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m andrea_edu.bench", description=__doc__.split(
        "\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
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
            from . import gpucheck
        except ImportError as e:
            print(f"gpu-check: andrea_edu.gpucheck is not available ({e})", file=sys.stderr)
            return 2
        return int(gpucheck.main(argv[1:]) or 0)
    args = _parser().parse_args(argv)
    from . import bench_cases
    from .env import fast_mode

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


if __name__ == "__main__":
    # Run the package's copy of this module, so that its classes are the ones bench_cases uses.
    from andrea_edu.bench import main as _main

    sys.exit(_main())
