"""run_suite: one entry point for every benchmark suite ("headdim", "projections", "layout").

The suites live in bench.cases (head_dim sweep) and bench.matmuls (projections, layout); the
runner in bench.runner; the schema in bench.results. The CLI (python -m andrea_lab.bench) calls
run_suite and writes what it returns with andrea_lab.bench.writer.write_results.
"""
from __future__ import annotations

import torch

from andrea_edu.bench import timing as bench
from andrea_edu.bench.cases import headdim_suite
from andrea_edu.bench.matmuls import layout_suite, projections_suite
from andrea_edu.bench.results import SCHEMA_VERSION
from andrea_edu.bench.runner import DTYPE, _Runner, _shape_table

FLOP_FORMULA = {
    "headdim": "attention_flops = 4*B*nh*T*T*hs (QK^T and PV, 2 FLOPs per multiply-add), "
               "halved when causal; softmax not counted",
    "projections": "matmul_flops = 2*B*T*C*(3*C): X[B*T, C] @ [C, 3C], however it is split",
    "layout": "scores: 2*B*nh*T*T*hs (Q K^T); copy: bytes = 2 * numel * element size "
              "(read + write)",
}


TIMING_METHOD = {
    "cuda": "per sample, a group of calls queued back to back between one pair of CUDA events "
            "after a torch.cuda._sleep (kernel time; the cuda-* backends as prepared launches, "
            "one cuLaunchKernel each); host_ms_per_call and host_path_ms: the host's time per "
            "call, apart",
    "cpu": "per sample, perf_counter around a group of calls on one torch thread, beside the "
           "thread's CPU time; quality_ok/quality_reason: bench.timing.timing_quality",
}


def _suites():
    return {"headdim": headdim_suite, "projections": projections_suite, "layout": layout_suite}


def run_suite(suite: str, device: str = "cpu", fast: bool = False, repeats=None, warmup=None,
              deadline=None, progress: bool = True, strict: bool = True,
              command: str = "", case_budget_s=None, threads=None, checkpoint=None,
              checkpoint_every: int = 4, **options) -> dict:
    """Run one suite ("headdim", "projections", "layout") and return the results object
    (valid against andrea_edu.bench.SCHEMA); write it with andrea_lab.bench.writer.write_results.
    case_budget_s: seconds of timed rounds per case (fewer repeats for slow backends, at
    least 3; default 2 on a GPU, 10 on a CPU). threads: torch's CPU threads during the run
    (default on a CPU: 1, restored afterwards; on a shared or small machine several threads
    wait for each other and the timings scatter by 10x, one thread measures the arithmetic).
    checkpoint(obj): called with the results so far every `checkpoint_every` cases (the CLI
    writes them: a run cut short by a fault or a timeout keeps what it measured).
    options go to the suite (headdim_suite: head_dims, shapes, series, backends).
    A suite stopped part-way (an error, Ctrl-C, SIGTERM) after measuring raises that error with
    `.partial`: the results object of what was measured, labelled {"incomplete": reason}; the
    CLI saves it apart (incomplete_bench_<suite>_<device>.json), never as a results file."""
    suites = _suites()
    if suite not in suites:
        raise ValueError(f"suite={suite!r} is not one of {tuple(suites)}")
    if device not in ("cpu", "cuda"):
        raise ValueError(f"device={device!r} is not one of 'cpu', 'cuda'")
    for name, v, lo in (("repeats", repeats, 1), ("warmup", warmup, 0), ("threads", threads, 1)):
        if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v < lo):
            raise ValueError(f"{name}={v!r} must be an int >= {lo} (None: the default)")
    repeats = repeats if repeats is not None else (3 if fast else (20 if device == "cuda" else 7))
    if device == "cpu":   # time_fns takes at least this many samples on a CPU
        repeats = max(repeats, bench.CPU_MIN_REPEATS)
    warmup = 1 if fast and warmup is None else (warmup if warmup is not None else 3)
    if case_budget_s is None:
        case_budget_s = 2.0 if device == "cuda" else 10.0
    r = _Runner(device, repeats, warmup, deadline, strict, case_budget_s)
    before = torch.get_num_threads()
    if threads is None and device == "cpu":
        threads = 1
    stopped: str | None = None
    exc: BaseException | None = None
    prov: dict = {}

    def result(records) -> dict:
        recs = [dict(rec, params={k: v for k, v in rec["params"].items() if k != "dtype_t"})
                for rec in records]
        return {"schema_version": SCHEMA_VERSION, "suite": suite,
                "provenance": prov,
                "settings": {"dtype": str(DTYPE).replace("torch.", ""), "repeats": repeats,
                             "warmup": warmup, "fast": fast, "case_budget_s": case_budget_s,
                             "timer": "cuda-events" if device == "cuda" else "perf_counter",
                             "method": TIMING_METHOD["cuda" if device == "cuda" else "cpu"],
                             "cache": "warm (the same inputs every call) unless a record's "
                                      "'cold' field gives the cold timing beside it",
                             "shapes": _shape_table(device, fast)},
                "flop_formula": FLOP_FORMULA[suite], "options": {k: list(v) if isinstance(
                    v, (tuple, list)) else v for k, v in options.items()}, "records": recs}

    if checkpoint is not None:
        done = [0]

        def after_case():
            done[0] += 1
            if done[0] % checkpoint_every == 0:
                checkpoint(result(r.records))
        r.after_case = after_case
    try:
        if threads:
            torch.set_num_threads(threads)
        prov = bench.provenance(device, command,  # records the thread count in use
                                what=f"the {suite} benchmark suite")
        with torch.no_grad():  # not inference_mode: under it aten.matmul is not decomposed,
            suites[suite](r, fast, progress, **options)  # and count_aten_ops would miss mm/bmm
    except (Exception, KeyboardInterrupt) as e:  # keep what was measured: raised below
        stopped = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}".strip()
        exc = e
        if not any(rec.get("median_ms") is not None for rec in r.records):
            raise
    finally:
        torch.set_num_threads(before)
    for rec in r.records:
        rec["params"].pop("dtype_t", None)
        if stopped and rec["status"] == "ok" and rec.get("median_ms") is None:
            rec.update(status="skipped", reason=f"not timed: the run stopped ({stopped})")
    obj = result(r.records)
    if exc is not None:  # the error itself goes on, carrying what was measured before it
        obj["incomplete"] = stopped
        setattr(exc, "partial", obj)
        raise exc
    return obj

