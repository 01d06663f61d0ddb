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

    python scripts/gpu_fault_standin.py suite gpu-check ARGS...   the suite's per-backend
        gpu-check command (andrea_lab.bench.cli.main, its real argument parsing), with a GPU
        stood in for: every case passes
    python scripts/gpu_fault_standin.py suite gpu-suite ARGS...   the bench step's command: its
        arguments parsed and checked by the bench CLI's own parser, then tiny CPU runs of the
        three suites written by the real writer into --out, labelled as STANDIN_GPU's
    python scripts/gpu_fault_standin.py suite gpu-headline ARGS...   stage 1's bench command:
        parsed by the bench CLI, the headline sweep with its real options at CPU fast sizes,
        checkpointed case by case, labelled as STANDIN_GPU's
    python scripts/gpu_fault_standin.py suite pipeline ARGS...    the pipeline step's command:
        parsed by andrea_lab.pipeline_timing's parser, a tiny CPU timing written by save_timing
The `suite` stand-ins serve tests/test_gpu_suite.py, which runs the whole of gpu_suite.sh's GPU
path on a CPU (tests/gpu_standin/python dispatches to them); what they write is labelled
STANDIN_GPU, and scripts/land_gpu_out.py refuses to land it.

Wiring only: nothing here runs on a GPU or says anything about one. Exit status as the real
commands' (gpucheck: 1 when a case failed or the run was cut short).
"""
from __future__ import annotations

import signal
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

STICKY = ("RuntimeError: CUDA driver call cuLaunchKernel(andrea::attention_v2_wmma<__half, 64>, "
          "grid=(6, 1, 1)) failed: CUDA_ERROR_ILLEGAL_ADDRESS (stand-in)")


STANDIN_GPU = "stand-in GPU (no GPU: CPU numbers, not a measurement)"
STANDIN_SLUG = "stand-in-gpu"


def _stand_in_gpu(run_case) -> None:
    """gpucheck's GPU stood in for: has_gpu true, the device named as a stand-in, run_case."""
    from andrea_lab.bench import gpucheck
    from andrea_edu.kernels import launch
    launch.has_gpu = lambda: True
    launch.device_info = lambda device=None: {"name": "stand-in (no GPU)"}
    gpucheck.run_case = run_case


def _gpucheck(out: str, backend: str, run_case) -> int:
    from andrea_lab.bench import gpucheck
    _stand_in_gpu(run_case)
    return gpucheck.main(["--out", out, "--skip-pytest", "--backends", backend])


def _passing_case(case, sm, gen=None) -> dict:
    return dict(backend=case[0], dtype=str(case[1])[6:], B=case[2], n_head=case[3],
                seq_len=case[4], head_dim=case[5], causal=case[6], expected_backend=case[0],
                passed=True, max_abs_err=0.0)


def _as_standin_gpu(prov: dict) -> None:
    prov.update(device_kind="gpu", device=STANDIN_GPU, device_slug=STANDIN_SLUG, driver="0.0",
                cuda="0.0")


def suite_bench(argv: list[str]) -> int:
    """The bench step's `-m andrea_lab.bench gpu-suite ...`, parsed and checked by the bench CLI's
    own parser (a flag the CLI does not know fails here as it would there), then each suite run
    tiny on the CPU and written by the real writer, as STANDIN_GPU's."""
    from andrea_edu.bench import suites
    from andrea_lab.bench import cli
    from andrea_lab.bench.writer import write_results
    args = cli._parser().parse_args(argv)
    problem = cli._check_args(args)
    if args.cmd != "gpu-suite" or problem:
        print(f"bench stand-in: {problem or f'{args.cmd}: not the gpu-suite command'}",
              file=sys.stderr)
        return 2
    runs: dict[str, dict[str, Any]] = {
        "projections": dict(repeats=1, warmup=0), "layout": {},
        "headdim": dict(backends=("sdpa",), head_dims=(64,), shapes=("ANDREA-12M",),
                        series=("n_head",), repeats=1, warmup=0)}
    for suite, kw in runs.items():   # the order of the real gpu-suite
        obj = suites.run_suite(suite, device="cpu", fast=True, progress=False, **kw)
        _as_standin_gpu(obj["provenance"])
        path = write_results(obj, args.out)
        print(f"[bench] {suite}: stand-in -> {path}")
    return 0


def suite_headline(argv: list[str]) -> int:
    """Stage 1's `-m andrea_lab.bench gpu-headline ...`, parsed and checked by the bench CLI's
    own parser, then the headline sweep with the CLI's own options (headline_options: every
    kernel, attention()'s choice with pad off and on, SDPA, cold beside warm) on the CPU at
    fast sizes and two of its head_dims, checkpointed case by case into --out by the CLI's own
    checkpoint writer, as STANDIN_GPU's."""
    from andrea_edu.bench import suites
    from andrea_lab.bench import cli
    from andrea_lab.bench.writer import write_results
    args = cli._parser().parse_args(argv)
    problem = cli._check_args(args)
    if args.cmd != "gpu-headline" or problem:
        print(f"bench stand-in: {problem or f'{args.cmd}: not the gpu-headline command'}",
              file=sys.stderr)
        return 2
    opts = dict(cli.headline_options(), head_dims=(64, 72), shapes=("ANDREA-12M",))
    save = cli._checkpoint(args)

    def checkpoint(obj):
        _as_standin_gpu(obj["provenance"])
        save(obj)
    obj = suites.run_suite("headdim", device="cpu", fast=True, progress=False, repeats=1,
                           warmup=0, checkpoint=checkpoint, strict=False, **opts)
    _as_standin_gpu(obj["provenance"])
    path = write_results(obj, args.out, replace=True)
    cold = sum("cold" in r for r in obj["records"])
    print(f"[bench] headdim: stand-in, {len(obj['records'])} records ({cold} with a cold "
          f"timing) -> {path}")
    return 0


def suite_pipeline(argv: list[str]) -> int:
    """The pipeline step's `-m andrea_lab.pipeline_timing ...`, parsed by its own parser, then a
    tiny model timed on the CPU and written by save_timing into --out, as STANDIN_GPU's."""
    from andrea_edu.config import PRESETS, AndreaConfig
    from andrea_edu.model import AndreaModel
    from andrea_edu.pipeline import timing as PT
    from andrea_lab import pipeline_timing
    a = pipeline_timing._parser(PRESETS).parse_args(argv)
    tiny = AndreaConfig(d_model=32, n_head=4, n_layer=1, vocab_size=64, block_size=16,
                        name="tiny")
    t = PT.time_steps(AndreaModel(tiny, seed=1), B=1, T=8, repeats=1, warmup=0)
    t.device_kind, t.device = "gpu", STANDIN_GPU
    _as_standin_gpu(t.provenance)
    print(f"pipeline stand-in: {a.config} B={a.B} T={a.T} {a.dtype} asked; wrote "
          f"{pipeline_timing.save_timing(t, a.out, replace=a.replace)}")
    return 0


def suite(argv: list[str]) -> int:
    if argv[:1] == ["gpu-check"]:
        from andrea_lab.bench import cli
        _stand_in_gpu(_passing_case)
        return cli.main(argv)
    if argv[:1] == ["gpu-suite"]:
        return suite_bench(argv)
    if argv[:1] == ["gpu-headline"]:
        return suite_headline(argv)
    if argv[:1] == ["pipeline"]:
        return suite_pipeline(argv[1:])
    print("usage: gpu_fault_standin.py suite gpu-check|gpu-suite|gpu-headline|pipeline ARGS...",
          file=sys.stderr)
    return 2


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
    from andrea_lab.bench.writer import write_results
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
    if argv[:1] == ["suite"]:
        return suite(argv[1:])
    print("usage: gpu_fault_standin.py sticky BACKEND OUT | bench OUT | hang | slow OUT | "
          "suite ARGS...",
          file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
