"""Check the CUDA kernels on a real GPU in a few minutes, and write what was found as JSON.

    python -m andrea_edu.bench gpu-check --out DIR

On a machine with an NVIDIA GPU this
  1. runs the `gpu`-marked tests (pytest in a subprocess, ANDREA_FAST=1), when the tests
     folder is present beside the package;
  2. sweeps cuda-naive (v1), cuda-wmma (v2) and cuda-flash (v3, on sm_80+) against the fp32
     reference over shapes
     (seq_len 1, non-multiples of 16 and 64, batch 1, one head), head_dims, dtypes, causal or not,
     with the tolerances of andrea_edu.attention.TOLERANCE, plus a few calls through the
     dispatcher (backend="auto") to check its decisions on this GPU;
  3. writes DIR/gpucheck.json: device, driver, CUDA, torch, NVRTC and andrea_edu versions, git
     commit, date, and per case the max abs error and pass/fail.
Exit status 0 when everything passed, 1 when something failed, 2 when there is no GPU (nothing
is written then). Budget: well under 5 minutes on an H200 (about 700 small launches; the 36
kernels compile in seconds). Chapter: "One kernel, many heads" reports the committed result.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import os
import subprocess
import sys
import time
from pathlib import Path

import torch

from andrea_edu.env import __version__, cpu_provenance, git_commit

from andrea_edu.kernels.limits import V2_HEAD_DIMS, V3_HEAD_DIMS, V3_MIN_SM
from andrea_edu.attention import attention, compare_to_reference

SHAPES = [(1, 1, 1), (1, 1, 17), (2, 3, 77), (1, 12, 256), (3, 2, 65), (1, 2, 1000)]  # B, nh, T
V1_HEAD_DIMS = (1, 8, 24, 32, 64, 72, 100, 128, 256)
DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def cases(sm: int | None = None):
    """(kernel, dtype, B, nh, T, hs, causal) for the sweep; v3 only when sm (the GPU's
    10*major + minor) is None or at least V3_MIN_SM."""
    v3 = sm is None or sm >= V3_MIN_SM
    out = []
    for causal in (False, True):
        for B, nh, T in SHAPES:
            for dt in DTYPES:
                out += [("v1", dt, B, nh, T, hs, causal) for hs in V1_HEAD_DIMS]
                if dt != torch.float32:
                    out += [("v2", dt, B, nh, T, hs, causal) for hs in V2_HEAD_DIMS]
                    out += [("v3", dt, B, nh, T, hs, causal) for hs in V3_HEAD_DIMS if v3]
    out += [("v2", torch.float16, 8, 12, 1024, 64, c) for c in (False, True)]  # ANDREA-120M
    out += [("v3", dt, 8, 12, 1024, 64, c) for dt in (torch.float16, torch.bfloat16)
            for c in (False, True) if v3]
    return out


def run_sweep(log=print) -> list[dict]:
    from andrea_edu.kernels.launch import launch_attention
    results = []
    gen = torch.Generator(device="cuda").manual_seed(0)
    major, minor = torch.cuda.get_device_capability()
    for kernel, dt, B, nh, T, hs, causal in cases(10 * major + minor):
        q, k, v = (torch.randn(B, nh, T, hs, device="cuda", generator=gen).to(dt)
                   for _ in range(3))
        t0 = time.perf_counter()
        row = dict(kernel=kernel, dtype=str(dt).replace("torch.", ""), B=B, n_head=nh,
                   seq_len=T, head_dim=hs, causal=causal)
        try:
            out = launch_attention(q, k, v, causal=causal, version=kernel)
            torch.cuda.synchronize()
            row.update(compare_to_reference(out, q, k, v, causal))
        except Exception as e:  # a failing case is data: record it and go on
            row.update(passed=False, error=f"{type(e).__name__}: {e}"[:2000])
        row["seconds"] = round(time.perf_counter() - t0, 4)
        if not row["passed"]:
            log(f"FAIL {row}")
        results.append(row)
    for hs, dt in ((64, torch.float16), (64, torch.bfloat16), (48, torch.float16),
                   (72, torch.float16), (64, torch.float32)):
        q = torch.randn(2, 3, 50, hs, device="cuda", dtype=dt)
        try:
            out, d = attention(q, q, q, causal=True, return_decision=True)
            row = dict(kernel="auto", dtype=str(dt).replace("torch.", ""), B=2, n_head=3,
                       seq_len=50, head_dim=hs, causal=True, backend=d.backend,
                       reason=d.reason, **compare_to_reference(out, q, q, q, True))
        except Exception as e:
            row = dict(kernel="auto", head_dim=hs, passed=False, error=f"{type(e).__name__}: {e}")
        results.append(row)
    return results


def run_gpu_tests(timeout: int = 240) -> dict:
    tests = Path(__file__).resolve().parents[2] / "tests"
    if not tests.is_dir():
        return dict(returncode=None, note=f"no tests folder at {tests}: skipped")
    env = dict(os.environ, ANDREA_FAST="1")
    cmd = [sys.executable, "-m", "pytest", "-q", "-m", "gpu", "-p", "no:cacheprovider",
           str(tests / "test_cuda.py"), str(tests / "test_attention.py"),
           str(tests / "test_emulator.py")]
    t0 = time.perf_counter()
    try:
        run = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env,
                             cwd=tests.parent)
        rc, text = run.returncode, run.stdout + run.stderr
    except subprocess.TimeoutExpired as e:
        rc, text = "timeout", f"pytest ran past {timeout} s\n{e.stdout or ''}"
    return dict(returncode=rc, seconds=round(time.perf_counter() - t0, 1),
                tail="\n".join(str(text).splitlines()[-40:]))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m andrea_edu.bench gpu-check", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True,
                    help="folder for gpucheck.json (created if missing; must be writable)")
    ap.add_argument("--skip-pytest", action="store_true",
                    help="only the correctness sweep, not the gpu-marked tests")
    args = ap.parse_args(argv)
    from andrea_edu.bench.args import check_out_dir, fail
    problem = check_out_dir("--out", args.out)
    if problem:  # before minutes of GPU work, not after
        return fail(ap.prog, problem)
    from andrea_edu.kernels.launch import device_info, has_gpu
    if not has_gpu():
        print("gpucheck needs an NVIDIA GPU, and torch sees none here "
              "(torch.cuda.is_available() is False); nothing was written. On a CPU machine "
              "run the CPU tests (pytest) and use backend='emulator'.", file=sys.stderr)
        return 2
    t0 = time.perf_counter()
    report = dict(schema="andrea_edu.gpucheck/1", device=device_info(),
                  versions=dict(andrea_edu=__version__, torch=torch.__version__,
                                torch_cuda=torch.version.cuda, python=sys.version.split()[0]),
                  git_commit=git_commit(), cpu_numerics=cpu_provenance(),
                  date=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"))
    report["versions"]["nvrtc"] = report["device"].get("nvrtc")
    report["versions"]["driver_cuda"] = report["device"].get("driver_cuda")
    report["pytest"] = dict(returncode=None, note="--skip-pytest") if args.skip_pytest \
        else run_gpu_tests()
    report["cases"] = run_sweep(log=lambda m: print(m, file=sys.stderr))
    failed = [c for c in report["cases"] if not c["passed"]]
    report.update(n_cases=len(report["cases"]), n_failed=len(failed),
                  seconds=round(time.perf_counter() - t0, 1))
    report["passed"] = not failed and report["pytest"]["returncode"] in (0, None)
    out = Path(args.out)
    from andrea_edu.env import write_json_atomic
    write_json_atomic(out / "gpucheck.json", report, indent=1)  # temp file + rename
    print(f"gpucheck on {report['device'].get('name')}: {report['n_cases'] - len(failed)}/"
          f"{report['n_cases']} cases passed, pytest rc={report['pytest']['returncode']}, "
          f"{report['seconds']} s -> {out / 'gpucheck.json'}")
    return 0 if report["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
