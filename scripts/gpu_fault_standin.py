"""Fault-injecting stand-ins for the GPU suite's rehearsal on a CPU (scripts/gpu_suite.sh
--rehearse): the suite's real code paths, with a kernel that faults or hangs stood in for.

    python scripts/gpu_fault_standin.py sticky BACKEND OUT   gpucheck (andrea_lab.bench.gpucheck
        .main, one process, --backends BACKEND) where BACKEND's third case raises the error an
        illegal address leaves (CUDA_ERROR_ILLEGAL_ADDRESS, sticky): the sweep must stop there,
        report it once with the backend and the case, and write OUT/gpucheck.json; any other
        BACKEND passes every case (the process beside it, unaffected)
    python scripts/gpu_fault_standin.py bench OUT   the head_dim suite (run_suite, fast, CPU)
        with cuda-wmma's second case raising the sticky error: later cases are skipped with
        one reason, and the checkpoints wrote OUT/bench_headdim_cpu.json before the end
    python scripts/gpu_fault_standin.py hang   a kernel that never returns: blocked in
        synchronize, where Python's SIGTERM handler cannot run (SIGTERM is ignored here as it
        would be then); only timeout's kill-after (SIGKILL) ends it
    python scripts/gpu_fault_standin.py slow OUT   gpucheck whose cases each take 0.5 s: the
        step's budget ends it with SIGTERM, and gpucheck writes what it found (complete=false)

Wiring only: nothing here runs on a GPU or says anything about one. Exit status as the real
commands' (gpucheck: 1 when a case failed or the run was cut short).
"""
from __future__ import annotations

import signal
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

STICKY = ("RuntimeError: CUDA driver call cuLaunchKernel(andrea::attention_v2_wmma<__half, 64>, "
          "grid=(6, 1, 1)) failed: CUDA_ERROR_ILLEGAL_ADDRESS (stand-in)")


def _gpucheck(out: str, backend: str, run_case) -> int:
    from andrea_lab.bench import gpucheck
    from andrea_edu.kernels import launch
    launch.has_gpu = lambda: True
    launch.device_info = lambda device=None: {"name": "stand-in (no GPU)"}
    gpucheck.run_case = run_case
    return gpucheck.main(["--out", out, "--skip-pytest", "--backends", backend])


def sticky(backend: str, out: str) -> int:
    seen = [0]

    def run_case(case, sm, gen=None):
        seen[0] += 1
        row = dict(backend=case[0], dtype=str(case[1])[6:], B=case[2], n_head=case[3],
                   seq_len=case[4], head_dim=case[5], causal=case[6], expected_backend=case[0])
        if backend == "cuda-wmma" and seen[0] == 3:
            return dict(row, passed=False, error=STICKY)
        return dict(row, passed=True, max_abs_err=0.0)
    return _gpucheck(out, backend, run_case)


def slow(out: str) -> int:
    def run_case(case, sm, gen=None):
        time.sleep(0.5)
        return dict(backend=case[0], passed=True, max_abs_err=0.0)
    return _gpucheck(out, "cuda-naive", run_case)


def bench(out: str) -> int:
    from andrea_edu.bench import cases, suites
    from andrea_lab.bench.results import write_results
    sdpa = cases.BACKEND_FNS["sdpa"]

    def faulty(q, k, v, causal):   # the second case's first call faults
        if q.shape[-1] == 32:
            raise RuntimeError(STICKY)
        return sdpa(q, k, v, causal)
    cases.BACKEND_FNS["cuda-wmma"] = faulty
    saved = [0]

    def checkpoint(obj):
        saved[0] += 1
        write_results(obj, out, replace=True)
    obj = suites.run_suite("headdim", device="cpu", fast=True, progress=False, strict=False,
                           backends=("sdpa", "cuda-wmma"), head_dims=(16, 32, 64, 72),
                           shapes=("ANDREA-12M",), series=("n_head",), checkpoint=checkpoint,
                           checkpoint_every=1, repeats=1, warmup=0)
    recs = obj["records"]
    skipped = [r for r in recs if r["status"] == "skipped"]
    failed = [r for r in recs if r["status"] == "failed"]
    reasons = {r["reason"] for r in skipped}
    print(f"bench stand-in: {len(recs)} records, {len(failed)} failed, {len(skipped)} skipped "
          f"with {len(reasons)} reason(s); {saved[0]} checkpoint(s) written before the end")
    for r in failed[:1]:
        print(f"failed: {r['case']} [{r['backend']}]: {r['reason'][:160]}")
    for why in sorted(reasons):
        print(f"skipped because: {why[:200]}")
    ok = len(failed) == 1 and skipped and len(reasons) == 1 and saved[0] >= 1
    return 0 if ok else 1


def hang() -> int:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    print("hang stand-in: blocked (SIGTERM ignored, as in cudaDeviceSynchronize)", flush=True)
    while True:
        time.sleep(3600)


def main(argv: list[str]) -> int:
    if argv[:1] == ["sticky"] and len(argv) == 3:
        return sticky(argv[1], argv[2])
    if argv[:1] == ["bench"] and len(argv) == 2:
        return bench(argv[1])
    if argv == ["hang"]:
        return hang()
    if argv[:1] == ["slow"] and len(argv) == 2:
        return slow(argv[1])
    print("usage: gpu_fault_standin.py sticky BACKEND OUT | bench OUT | hang | slow OUT",
          file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
