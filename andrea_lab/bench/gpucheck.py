"""Check the CUDA kernels on a real GPU in a few minutes, and write what was found as JSON.

    python -m andrea_lab.bench gpu-check --out DIR

On a machine with an NVIDIA GPU this
  1. sweeps the readers' entry point, `andrea_edu.dispatch.attention(q, k, v, causal,
     backend=...)`, with backend cuda-naive (v1), cuda-wmma (v2) and cuda-flash (v3, on
     sm_80+) against the fp32 reference, over the property cases of the CPU tests: seq_len 1
     and tails that are not a multiple of 16 or 64, batch 1, one head, causal or not,
     head_dims, and each dtype the backend runs (fp32 only on cuda-naive); then a few calls
     with backend="auto" whose decision must be the one `choose_backend` makes for this GPU.
     A case passes when the backend that ran is the one expected (no silent fallback) and the
     output is within andrea_edu.dispatch.TOLERANCE of the reference;
  2. runs the `gpu`-marked tests (pytest in a subprocess, ANDREA_FAST=1, --noconftest: the
     tests' conftest loads Jupyter pieces a bare GPU image lacks), when the tests folder is
     present beside the package;
  3. writes DIR/gpucheck.json: device, driver, CUDA, torch, NVRTC and andrea_edu versions, git
     commit, date, and per case the backend that ran, the max abs error and pass/fail.
One backend's unexpected exception is data: the case records it and the sweep goes on. The
JSON is rewritten (atomically) after each backend, and once more when the process is stopped
(SIGTERM from `timeout`, Ctrl-C), with "complete": false, so that a run cut short still says
what it found. Exit status 0 when everything passed, 1 when something failed or the run was
cut short, 2 when there is no GPU (nothing is written then). Budget: well under 5 minutes on
an H200 (about 700 small launches; the kernels compile in seconds). No chapter reads the
file yet: scripts/land_gpu_out.py lands it in book/data/ beside the measurements, as the record
of what was checked on that GPU.

One process per kernel version (scripts/gpu_suite.sh: --backends cuda-naive, ...): a sticky CUDA
error (an illegal address) breaks a process's context, so the sweep stops at the first one and
reports it once, with its backend and case (StickyError), and the other versions' processes
are untouched; --merge joins their reports into one gpucheck.json.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

import torch

from andrea_edu.env import __version__, cpu_provenance
from andrea_edu.data import DataFileError

from andrea_edu.kernels import registry
from andrea_edu.kernels.limits import V3_MIN_SM
from andrea_edu.dispatch import attention, choose_backend, compare_to_reference

SHAPES = [(1, 1, 1), (1, 1, 17), (2, 3, 77), (1, 12, 256), (3, 2, 65), (1, 2, 1000)]  # B, nh, T
# head_dims no kernel is compiled for, run by a kernel whose tile covers them (v1's CHUNKS):
# each kernel is swept over its compiled head_dims and these, where its limits allow them
TAIL_HEAD_DIMS = (1, 8, 24, 72, 100)
# --small (the GPU suite's stage 1, minutes of a lease): two shapes and the headline's head_dims
SMALL_SHAPES = [(1, 1, 17), (2, 3, 77)]
SMALL_HEAD_DIMS = (8, 32, 64, 72, 80, 96, 100, 128)
DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def cuda_backends() -> tuple[str, ...]:
    """Every registered kernel's backend, baseline first (kernels.registry)."""
    return tuple(s.backend for s in registry.specs())


def all_backends() -> tuple[str, ...]:
    return (*cuda_backends(), "auto")

# backend="auto" calls: (head_dim, dtype); the decision must match choose_backend's for this GPU
AUTO_CASES = ((64, torch.float16), (64, torch.bfloat16), (48, torch.float16),
              (72, torch.float16), (64, torch.float32), (256, torch.bfloat16))
# explicit backends asked for something they cannot run: attention() falls back and says so
FALLBACK_CASES = (("cuda-flash", 48, torch.float16), ("cuda-wmma", 72, torch.bfloat16),
                  ("cuda-flash", 64, torch.float32))

Case = tuple[str, torch.dtype, int, int, int, int, bool]


def cases(sm: int | None = None, small: bool = False) -> list[Case]:
    """(backend, dtype, B, nh, T, hs, causal) for the sweep through attention(): every
    registered kernel at every shape, dtype and head_dim (its compiled ones and TAIL_HEAD_DIMS)
    its limits let run on an sm GPU (10*major + minor; None: no GPU named); then the design
    case, the fallbacks and the auto calls of the book's ladder (cuda-flash only when sm is None
    or at least V3_MIN_SM). small: SMALL_SHAPES and SMALL_HEAD_DIMS only (the rest as
    above: the design case, the fallbacks and the auto calls)."""
    v3 = sm is None or sm >= V3_MIN_SM
    out: list[Case] = []
    for causal in (False, True):
        for B, nh, T in (SMALL_SHAPES if small else SHAPES):
            for dt in DTYPES:
                for spec in registry.specs():
                    out += [(spec.backend, dt, B, nh, T, hs, causal)
                            for hs in sorted(set(spec.head_dims) | set(TAIL_HEAD_DIMS))
                            if spec.ineligibility(hs, dt, sm) is None
                            and (not small or hs in SMALL_HEAD_DIMS)]
    out += [("cuda-wmma", torch.float16, 8, 12, 1024, 64, c) for c in (False, True)]  # 120M
    out += [("cuda-flash", dt, 8, 12, 1024, 64, c) for dt in (torch.float16, torch.bfloat16)
            for c in (False, True) if v3]
    for backend, hs, dt in FALLBACK_CASES:
        if v3 or backend != "cuda-flash":
            out.append((backend, dt, 2, 3, 50, hs, True))
    out += [("auto", dt, 2, 3, 50, hs, c) for hs, dt in AUTO_CASES for c in (False, True)]
    return out


def run_case(case: Case, sm: int, gen: torch.Generator | None = None) -> dict:
    """One call of attention() on the GPU, compared with the fp32 reference; never raises
    (an exception is recorded in the row, passed=False)."""
    backend, dt, B, nh, T, hs, causal = case
    row: dict[str, Any] = dict(backend=backend, dtype=str(dt).replace("torch.", ""), B=B,
                               n_head=nh, seq_len=T, head_dim=hs, causal=causal)
    t0 = time.perf_counter()
    try:
        expected = choose_backend(hs, dt, "cuda", backend, sm)
        row.update(expected_backend=expected.backend, kernel=expected.kernel)
        q, k, v = (torch.randn(B, nh, T, hs, device="cuda", generator=gen).to(dt)
                   for _ in range(3))
        with torch.no_grad():
            out, decision = attention(q, k, v, causal=causal, backend=backend,
                                      return_decision=True)
        torch.cuda.synchronize()
        row.update(ran=decision.backend, reason=decision.reason)
        row.update(compare_to_reference(out, q, k, v, causal))
        if decision.backend != expected.backend:
            row.update(passed=False, error=f"ran {decision.backend}, expected "
                                           f"{expected.backend} ({expected.reason})")
    except Exception as e:  # a failing case is data: record it and go on
        row.update(passed=False, error=f"{type(e).__name__}: {e}"[:2000])
    row["seconds"] = round(time.perf_counter() - t0, 4)
    return row




class StickyError(RuntimeError):
    """A case left a sticky CUDA error: this process's context is broken, the sweep stops."""


def run_sweep(log: Callable[[str], Any] = print,
              checkpoint: Callable[[list[dict]], Any] | None = None,
              backends=None, run=None, small: bool = False) -> list[dict]:
    """Every case of cases() for `backends` through attention(); `checkpoint(results)` after
    each backend (and every 50 cases). A case that leaves a sticky CUDA error (an illegal
    address: andrea_edu.kernels.launch.is_sticky_error) ends the sweep with StickyError, its row
    recorded: every later case in this process would fail with the same error, so the suite runs
    one process per backend. backends None: all_backends(). run: run_case (tests stand in for
    it). small: cases(small=True)."""
    from andrea_edu.kernels.launch import is_sticky_error
    run = run or run_case
    results: list[dict] = []
    gen = torch.Generator(device="cuda").manual_seed(0) if torch.cuda.is_available() else None
    major, minor = torch.cuda.get_device_capability() if torch.cuda.is_available() else (9, 0)
    sm = 10 * major + minor   # no GPU: only a stand-in `run` gets here (the fault rehearsal)
    todo = cases(sm, small=small)
    for backend in all_backends() if backends is None else backends:
        for case in (c for c in todo if c[0] == backend):
            row = run(case, sm, gen)
            if not row["passed"]:
                log(f"FAIL {row}")
            results.append(row)
            if not row["passed"] and is_sticky_error(row.get("error", "")):
                if checkpoint is not None:
                    checkpoint(results)
                raise StickyError(
                    f"sticky CUDA error in backend {backend}, case B={case[2]} nh={case[3]} "
                    f"T={case[4]} hs={case[5]} {str(case[1])[6:]} causal={case[6]}: "
                    f"{row['error'][:300]}; the rest of this process's cases were not run")
            if checkpoint is not None and len(results) % 50 == 0:
                checkpoint(results)
        if checkpoint is not None:
            checkpoint(results)
    return results


def merge_reports(parts: list[dict]) -> dict:
    """One gpucheck report from the per-backend processes' reports (scripts/gpu_suite.sh runs
    one process per kernel version): cases concatenated, complete only when every part is, each
    part's stop reason kept with its backends."""
    if not parts:
        raise ValueError("no gpucheck reports to merge")
    out = dict(parts[0])
    out["cases"] = [c for p in parts for c in p.get("cases", [])]
    out["complete"] = all(p.get("complete") for p in parts)
    stops = [f"{','.join(p.get('backends') or ['?'])}: {p['stopped']}" for p in parts
             if p.get("stopped")]
    out.pop("stopped", None)
    if stops:
        out["stopped"] = " | ".join(stops)
    out["backends"] = [b for p in parts for b in (p.get("backends") or [])]
    out["parts"] = len(parts)
    pytests = [p["pytest"] for p in parts if p.get("pytest", {}).get("returncode") is not None]
    out["pytest"] = pytests[0] if pytests else dict(returncode=None, note="not run here")
    failed = [c for c in out["cases"] if not c.get("passed")]
    out.update(n_cases=len(out["cases"]), n_failed=len(failed), by_backend=summarize(out),
               seconds=round(max(p.get("seconds", 0) for p in parts), 1))
    out["passed"] = bool(out["complete"] and out["cases"] and not failed
                         and out["pytest"].get("returncode") in (0, None))
    return out


def gpu_test_files(tests: Path) -> list[Path]:
    """The test files holding gpu-marked tests (scripts/gpu_suite.sh --rehearse collects the same
    files in the image's environment, so that an import the image lacks fails there first)."""
    return sorted(p for p in tests.glob("test_*.py") if "pytest.mark.gpu" in p.read_text())


def run_gpu_tests(timeout: int = 240) -> dict:
    """pytest -m gpu over gpu_test_files() in a subprocess. --noconftest: tests/conftest.py loads
    the Jupyter pieces (jupyter_client, pyzmq) the book build needs and a bare GPU image lacks;
    the gpu-marked tests need none of it."""
    tests = Path(__file__).resolve().parents[2] / "tests"
    if not tests.is_dir():
        return dict(returncode=None, note=f"no tests folder at {tests}: skipped")
    env = dict(os.environ, ANDREA_FAST="1")
    cmd = [sys.executable, "-m", "pytest", "-q", "-m", "gpu", "-p", "no:cacheprovider",
           "--noconftest", *map(str, gpu_test_files(tests))]
    t0 = time.perf_counter()
    rc: int | str
    try:
        run = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env,
                             cwd=tests.parent)
        rc = run.returncode
        text = run.stdout + run.stderr
    except subprocess.TimeoutExpired as e:
        # On POSIX the exception carries bytes even with text=True: decode, or "b'...'" is shown.
        partial = e.stdout.decode(errors="replace") if isinstance(e.stdout, bytes) else e.stdout
        rc, text = "timeout", f"pytest ran past {timeout} s\n{partial or ''}"
    return dict(returncode=rc, seconds=round(time.perf_counter() - t0, 1),
                tail="\n".join(str(text).splitlines()[-40:]))


class _Stopped(Exception):
    """SIGTERM arrived (e.g. from `timeout`): write what was found, then stop."""


def _on_sigterm(signum, frame):  # noqa: ARG001
    raise _Stopped(f"signal {signum}")


def summarize(report: dict) -> dict:
    """Per backend: cases, passed, failed, and the first failures' errors (for the summary)."""
    by: dict[str, dict] = {}
    for c in report.get("cases", []):
        b = by.setdefault(c.get("backend", "?"), dict(cases=0, passed=0, failed=0, first=[]))
        b["cases"] += 1
        b["passed" if c.get("passed") else "failed"] += 1
        if not c.get("passed") and len(b["first"]) < 3:
            b["first"].append(c.get("error") or f"max_abs_err={c.get('max_abs_err')}")
    return by


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m andrea_lab.bench gpu-check", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True,
                    help="folder for gpucheck.json (created if missing; must be writable)")
    ap.add_argument("--skip-pytest", action="store_true",
                    help="only the correctness sweep, not the gpu-marked tests")
    ap.add_argument("--pytest-timeout", type=int, default=240,
                    help="seconds the gpu-marked tests may run, an integer >= 1 (default 240)")
    allowed = all_backends()
    ap.add_argument("--backends", default=",".join(allowed),
                    help=f"comma-separated subset of {','.join(allowed)} (default: all); "
                         f"the suite runs one process per kernel version")
    ap.add_argument("--small", action="store_true",
                    help="two shapes and the headline's head_dims only, beside the design case, "
                         "the fallbacks and the auto calls (the GPU suite's stage 1)")
    ap.add_argument("--merge", nargs="+", metavar="REPORT", default=None,
                    help="write OUT/gpucheck.json merged from these per-backend reports (no GPU "
                         "needed) and exit")
    args = ap.parse_args(argv)
    backends = [b for b in args.backends.split(",") if b]
    bad = [b for b in backends if b not in allowed]
    if bad or not backends:
        return _fail(ap.prog, f"--backends: {bad or args.backends!r} not allowed; allowed: a "
                              f"comma-separated subset of {','.join(allowed)}")
    if args.merge:
        return _merge_main(ap.prog, args.merge, Path(args.out))
    from andrea_lab.arg_checks import check_int, check_out_dir, fail, first_problem
    problem = first_problem(check_out_dir("--out", args.out),
                            check_int("--pytest-timeout", args.pytest_timeout, 1))
    if problem:  # before minutes of GPU work, not after
        return fail(ap.prog, problem)
    from andrea_edu.kernels.launch import device_info, has_gpu
    if not has_gpu():
        print("gpucheck needs an NVIDIA GPU, and torch sees none here "
              "(torch.cuda.is_available() is False); nothing was written. On a CPU machine "
              "run the CPU tests (pytest) and use backend='emulator'.", file=sys.stderr)
        return 2
    from andrea_lab.store import git_commit, write_json_atomic
    out = Path(args.out)
    t0 = time.perf_counter()
    report: dict[str, Any] = dict(
        schema="andrea_edu.gpucheck/2", entry_point="andrea_edu.dispatch.attention(backend=...)",
        complete=False, device=device_info(),
        versions=dict(andrea_edu=__version__, torch=torch.__version__,
                      torch_cuda=torch.version.cuda, python=sys.version.split()[0]),
        git_commit=git_commit(), cpu_numerics=cpu_provenance(),
        date=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        cases=[], pytest=dict(returncode=None, note="not run yet"), backends=backends)
    report["versions"]["nvrtc"] = report["device"].get("nvrtc")
    report["versions"]["driver_cuda"] = report["device"].get("driver_cuda")

    def save(cases_so_far: list[dict] | None = None) -> None:
        if cases_so_far is not None:
            report["cases"] = list(cases_so_far)
        failed = [c for c in report["cases"] if not c["passed"]]
        report.update(n_cases=len(report["cases"]), n_failed=len(failed),
                      seconds=round(time.perf_counter() - t0, 1), by_backend=summarize(report))
        report["passed"] = bool(report["complete"] and report["cases"] and not failed
                                and report["pytest"]["returncode"] in (0, None))
        write_json_atomic(out / "gpucheck.json", report, indent=1)  # temp file + rename

    old = signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        report["cases"] = run_sweep(log=lambda m: print(m, file=sys.stderr), checkpoint=save,
                                    backends=backends, small=args.small)
        report["grid"] = "small" if args.small else "full"
        save()
        report["pytest"] = dict(returncode=None, note="--skip-pytest") if args.skip_pytest \
            else run_gpu_tests(args.pytest_timeout)
        report["complete"] = True
    except StickyError as e:   # reported once, with its backend and case
        report["stopped"] = str(e)[:2000]
        print(f"gpucheck: {report['stopped']}", file=sys.stderr)
    except (_Stopped, KeyboardInterrupt) as e:
        report["stopped"] = f"stopped early ({e or 'Ctrl-C'}): the results are partial"
        print(f"gpucheck: {report['stopped']}", file=sys.stderr)
    except Exception as e:  # noqa: BLE001  (never leave without writing what was found)
        report["stopped"] = f"{type(e).__name__}: {e}"[:2000]
        print(f"gpucheck: unexpected {report['stopped']}", file=sys.stderr)
    finally:
        signal.signal(signal.SIGTERM, old)
        save()
    print(f"gpucheck on {report['device'].get('name')} through attention(): "
          f"{report['n_cases'] - report['n_failed']}/{report['n_cases']} cases passed, "
          f"pytest rc={report['pytest']['returncode']}, {report['seconds']} s -> "
          f"{out / 'gpucheck.json'}")
    for b, n in report["by_backend"].items():
        print(f"  {b}: {n['passed']}/{n['cases']} passed" +
              (f"; first failure: {n['first'][0]}" if n["first"] else ""))
    return 0 if report["passed"] else 1


SCHEMA = "andrea_edu.gpucheck/2"
_CASE_KEYS = {"backend": str, "passed": bool}


def read_report(path) -> dict:
    """A gpucheck.json, checked as every landed data file is (andrea_edu.data): a file its
    folder's SHA256SUMS lists but that is gone, a file whose bytes differ from its manifest line
    or its pin (damage, or a write cut short before its manifest: the line names
    `git checkout -- <folder>`), or that a manifest beside it does not list, is refused; then its
    content: the schema name, a device with a name, every case a record with a backend and a
    boolean passed, the counts agreeing with the cases, no NaN or Infinity, no case twice.
    DataFileError (one line: the file and the reason) otherwise. A folder without a manifest
    (a scratch folder, the suite's per-backend parts) is read without one."""
    import json

    from andrea_edu.data import first_nonfinite, listed_but_missing, manifest_problem
    path = Path(path)

    def bad(why: str):
        raise DataFileError(f"{path}: {why}")
    if not path.is_file():
        gone = listed_but_missing(path.parent, path.name)
        if gone:
            raise DataFileError(gone)   # names the file and the manifest
        bad("missing (no gpucheck report here)")
    try:
        rep = json.loads(path.read_text(), parse_constant=lambda c: bad(f"{c} is not a number"))
    except (OSError, UnicodeDecodeError, ValueError) as e:
        if isinstance(e, DataFileError):
            raise
        bad(f"not readable JSON: {e}")
    problem = manifest_problem(path)   # its manifest line (and, in book/data, its pin)
    if problem:
        bad(problem)
    if not isinstance(rep, dict) or rep.get("schema") != SCHEMA:
        bad(f"not a gpucheck report (schema {SCHEMA!r} expected)")
    nonfinite = first_nonfinite(rep)
    if nonfinite:
        bad(f"{nonfinite} is NaN or Infinity")
    dev = rep.get("device")
    if not isinstance(dev, dict) or not isinstance(dev.get("name"), str) or not dev["name"]:
        bad("device.name is missing: a report must say which GPU it checked")
    cases = rep.get("cases")
    if not isinstance(cases, list):
        bad("cases is not a list")
    seen = set()
    for i, c in enumerate(cases):
        if not isinstance(c, dict):
            bad(f"cases[{i}] is not an object")
        for k, typ in _CASE_KEYS.items():
            if not isinstance(c.get(k), typ):
                bad(f"cases[{i}].{k} must be {typ.__name__}, got {c.get(k)!r}")
        for k in ("B", "n_head", "seq_len", "head_dim"):
            v = c.get(k)
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
                bad(f"cases[{i}].{k} = {v!r}; expected an integer >= 1")
        err = c.get("max_abs_err")
        if err is not None and (isinstance(err, bool) or not isinstance(err, (int, float))
                                or err < 0):
            bad(f"cases[{i}].max_abs_err = {err!r}; expected a number >= 0")
        key = json.dumps({k: c.get(k) for k in ("backend", "dtype", "B", "n_head", "seq_len",
                                                  "head_dim", "causal")}, sort_keys=True)
        if key in seen:
            bad(f"cases[{i}] repeats an earlier case ({key})")
        seen.add(key)
    n_failed = sum(not c["passed"] for c in cases)
    if rep.get("n_cases") != len(cases) or rep.get("n_failed") != n_failed:
        bad(f"n_cases={rep.get('n_cases')!r}, n_failed={rep.get('n_failed')!r} but the cases "
            f"give {len(cases)} and {n_failed}")
    if not isinstance(rep.get("complete"), bool) or not isinstance(rep.get("passed"), bool):
        bad("complete and passed must be true or false")
    if rep["passed"] and (n_failed or not rep["complete"]):
        bad("passed is true, but a case failed or the run was not complete")
    return rep


def _fail(prog: str, problem: str) -> int:
    from andrea_lab.arg_checks import fail
    return fail(prog, problem)


def _merge_main(prog: str, paths: list[str], out: Path) -> int:
    """--merge: the per-backend reports that exist (a process killed before its first write
    left none: that backend is named as missing), merged into out/gpucheck.json."""
    import json
    from andrea_lab.store import write_json_atomic
    parts, missing = [], []
    for p in paths:
        try:
            parts.append(json.loads(Path(p).read_text()))
        except (OSError, ValueError):
            missing.append(p)
    if not parts:
        return _fail(prog, f"--merge: none of {paths} is a readable gpucheck report")
    report = merge_reports(parts)
    if missing:
        report["complete"] = report["passed"] = False
        report["missing_parts"] = missing
    write_json_atomic(out / "gpucheck.json", report, indent=1)
    print(f"gpucheck merged {len(parts)} reports ({len(missing)} missing): "
          f"{report['n_cases'] - report['n_failed']}/{report['n_cases']} cases passed"
          + (f"; stopped: {report['stopped'][:300]}" if report.get("stopped") else ""))
    return 0 if report["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
