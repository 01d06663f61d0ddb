"""The benchmark runner every suite shares: validate, then time, honouring a deadline.

Shapes per device, the dtype, a tqdm progress bar, and `_Runner`, which checks each backend
against the fp32 reference (andrea_edu.bench.timing.check_close) before it times anything.
Used by bench.cases (the head_dim sweep) and bench.matmuls (projections, layout).
Names: B batch, T seq_len, C d_model, nh n_head, hs head_dim.
"""
from __future__ import annotations

import sys
import time
import warnings

import torch

from andrea_edu.bench import timing as bench

# Shapes. GPU: the real ones (ANDREA-120M trains with B=8, T=1024; ANDREA-12M's context is 512).
# CPU: reduced so a 2-core machine finishes in about a minute; fast mode: seconds. The JSON
# records the shapes actually used.
SHAPES = {
    "cuda": {"ANDREA-120M": dict(B=8, T=1024, d_model=768),
             "ANDREA-12M": dict(B=8, T=512, d_model=384)},
    "cpu": {"ANDREA-120M": dict(B=1, T=512, d_model=768),
            "ANDREA-12M": dict(B=1, T=256, d_model=384)},
    "fast": {"ANDREA-120M": dict(B=1, T=64, d_model=768),
             "ANDREA-12M": dict(B=1, T=32, d_model=384)},
}


N_HEAD = 12  # series 1: n_head fixed at 12, d_model = 12 * head_dim


# series 2: d_model fixed at the preset's (768 / 384), n_head = d_model / head_dim where it divides
DTYPE = torch.bfloat16
# keys a backend's info may carry (popped by _Runner.check, never written): TIMED, the callable
# to time instead of the backend's whole path (a prepared launch); HOST_PATH, the whole path,
# whose host time per call is reported apart (host_path_ms)
TIMED, HOST_PATH = "_timed", "_host_path"
# PREPARE (a kernel backend's info): fn(q, k, v) -> a prepared launch on those tensors, so that
# a cold timing can prepare one per rotated input set (popped by the suite, never written)
PREPARE = "_prepare"
# cold timings: the rotated input sets together hold at least this many times the last-level
# cache (the GPU's L2 as the device reports it; COLD_CPU_CACHE_BYTES on a CPU), at most
# COLD_MAX_SETS sets and COLD_MAX_BYTES in all
COLD_CACHE_FACTOR = 3
COLD_CPU_CACHE_BYTES = 64 * 2**20
COLD_MAX_SETS = 64
COLD_MAX_BYTES = 4 * 2**30


def _why(e, caught) -> str:
    """The exception plus the warnings torch emitted just before it (SDPA lists its reasons)."""
    notes = " | ".join(dict.fromkeys(str(w.message).strip() for w in caught))
    return (f"{type(e).__name__}: {e}" + (f" [torch said: {notes}]" if notes else ""))[:2000]


class _Runner:
    """Validate-then-time, honouring a deadline; collects records.

    check() validates one backend and queues it; time_queued() times every queued backend of
    the case together (they take turns, see andrea_edu.bench.time_fns)."""

    def __init__(self, device, repeats, warmup, deadline, strict, case_budget_s=None):
        self.device, self.repeats, self.warmup = device, repeats, warmup
        self.deadline, self.strict, self.records, self._queue = deadline, strict, [], {}
        self.case_budget_s = case_budget_s
        self.broken: str | None = None    # set by a sticky CUDA error: later cases are skipped
        self.after_case = None            # called after each case's timings (checkpoints)
        self._params_of_case: dict = {}

    def check(self, case, backend, params, fn, ref, flops=None, extra=None, unavailable=(
            ValueError, ImportError, NotImplementedError)):
        """fn() -> (out, info). Runs it once, checks out against ref, queues it for timing.
        Appends and returns the record (status "ok" = validated; timings come later)."""
        rec = {"case": case, "backend": backend, "params": params, "status": "ok", "reason": None,
               "flops": flops, **(extra or {})}
        self.records.append(rec)
        if self.broken is not None:
            rec.update(status="skipped", reason=self.broken)
            return rec
        if self.deadline is not None and time.monotonic() > self.deadline:
            rec.update(status="skipped", reason="time budget used up before this case")
            return rec
        caught: list = []
        try:
            with warnings.catch_warnings(record=True) as caught:  # torch says why, as warnings
                warnings.simplefilter("always")
                out, info = fn()
            timed, host_path = info.pop(TIMED, None), info.pop(HOST_PATH, None)
            rec.update(info)
            if ref is not None:
                rec["max_abs_err"] = bench.check_close(out, ref, params["dtype_t"],
                                                       f"{case} [{backend}]")
        except bench.ValidationError as e:
            if self.strict:
                raise
            rec.update(status="invalid", reason=str(e))
            return rec
        except unavailable as e:
            rec.update(status="unavailable", reason=_why(e, caught))
            return rec
        except RuntimeError as e:
            rec.update(status="failed", reason=_why(e, caught))
            self.note_fault(rec["reason"], f"{case} [{backend}]")
            return rec
        self._queue[id(rec)] = (rec, timed or fn, host_path)
        return rec

    def note_fault(self, reason: str, where: str) -> None:
        """A sticky CUDA error breaks this process's context: every later case is skipped with
        one reason naming the case that broke it (not N copies of the same failure)."""
        from andrea_edu.kernels.launch import is_sticky_error
        if self.broken is None and is_sticky_error(reason):
            self.broken = (f"not run: the CUDA context broke at {where} ({reason[:300]}); "
                           f"a new process is needed")

    def fail_case(self, case: str, backends, reason: str) -> None:
        """Every backend of a case that could not be set up (its inputs or reference failed)."""
        for b in backends:
            self.records.append({"case": case, "backend": b, "params": self._params_of_case,
                                 "status": "failed", "reason": reason[:2000], "flops": None})
        self.note_fault(reason, case)

    def time_queued(self):
        """Time the queued (validated) backends together; fill in their timings and TFLOP/s.
        A failure while timing (a kernel fault) marks the queued records failed, not the run."""
        queue, self._queue = self._queue, {}
        if not queue:
            return
        try:
            timings = bench.time_fns({k: fn for k, (_, fn, _) in queue.items()}, self.device,
                                     self.repeats, self.warmup, self.case_budget_s,
                                     threads=None)   # run_suite has set the threads
            host = {k: _host_ms(h) for k, (_, _, h) in queue.items() if h is not None}
        except RuntimeError as e:
            why = f"while timing: {type(e).__name__}: {e}"[:2000]
            for rec, _, _ in queue.values():
                rec.update(status="failed", reason=why)
            self.note_fault(why, str(next(iter(queue.values()))[0]["case"]))
            return
        for k, (rec, _, _) in queue.items():
            rec.update(timings[k])
            if k in host:
                rec["host_path_ms"] = host[k]
            if rec["flops"]:
                rec["tflops"] = rec["flops"] / (rec["median_ms"] * 1e-3) / 1e12
        if self.after_case is not None:
            self.after_case()

    def time_cold(self, rec: dict, q, k, v, fn, prepare, causal: bool) -> None:
        """rec["cold"]: the backend timed again (time_fns) on input sets rotated call by call,
        copies of q, k, v that together exceed the last-level cache (COLD_*), so that no call
        finds its inputs where the previous call left them; a kernel backend through a launch
        prepared per set (`prepare`), any other through fn(q_i, k_i, v_i, causal). The rest of
        rec is the warm timing (the same inputs every call), and rec["cache"] says so. A
        failure is recorded in rec["cold"], never raised."""
        import itertools
        rec["cache"] = "warm: the same inputs every call"
        per_set = sum(t.numel() * t.element_size() for t in (q, k, v)) * 2   # inputs + output
        if self.device == "cuda":
            cache = int(getattr(torch.cuda.get_device_properties(0), "L2_cache_size", 0) or 0)
        else:
            cache = COLD_CPU_CACHE_BYTES
        n = max(2, min(COLD_MAX_SETS, -(-COLD_CACHE_FACTOR * cache // max(per_set, 1)),
                       COLD_MAX_BYTES // max(per_set, 1)))
        sets: list[tuple] = []
        calls: list = []
        try:
            sets = [tuple(t.clone() for t in (q, k, v)) for _ in range(n)]
            calls = ([prepare(*s_) for s_ in sets] if prepare is not None else
                     [lambda s_=s_: fn(*s_, causal) for s_ in sets])
            turn = itertools.cycle(calls)
            t = bench.time_fns({"cold": lambda: next(turn)()}, self.device, self.repeats,
                               self.warmup, self.case_budget_s, threads=None)["cold"]
        except (RuntimeError, MemoryError) as e:
            rec["cold"] = {"status": "failed", "reason": f"{type(e).__name__}: {e}"[:300]}
            return
        finally:   # freed before the next case
            sets.clear()
            calls.clear()
        rec["cold"] = {k_: t[k_] for k_ in ("min_ms", "median_ms", "p25_ms", "p75_ms",
                                             "max_ms", "repeats", "calls_per_sample",
                                             "quality_ok", "quality_reason")}
        rec["cold"].update(status="ok", input_sets=n, bytes_per_set=per_set,
                           cache_bytes=cache, method=(
                               f"inputs rotated through {n} copies ({n * per_set / 2**20:.0f} "
                               f"MiB, >= {COLD_CACHE_FACTOR} x the {cache / 2**20:.0f} MiB "
                               f"cache where the caps allow): no call reuses the last one's "
                               f"inputs from the cache"))

    def run(self, *args, **kw):
        """check() then time_queued(): one backend on its own."""
        rec = self.check(*args, **kw)
        self.time_queued()
        return rec


def _host_ms(fn, calls: int = 5) -> float:
    """Median host milliseconds of one call of fn, no synchronisation (on a GPU: the Python
    path's cost per call, which a prepared launch leaves out of the timed region)."""
    import statistics
    fn()
    samples = []
    for _ in range(calls):
        t0 = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - t0) * 1e3)
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return statistics.median(samples)


def _shape_table(device, fast):
    return SHAPES["fast" if fast else device]


def _params(**kw):
    kw["dtype"] = str(kw["dtype_t"]).replace("torch.", "")
    return kw


class _progress:
    """A tqdm bar on stderr (or nothing) usable as a context manager."""

    def __init__(self, total, enabled, desc):
        self.bar = None
        if enabled:
            from tqdm.auto import tqdm
            self.bar = tqdm(total=total, desc=desc, file=sys.stderr, leave=False)

    def __enter__(self):
        return self

    def update(self, n):
        if self.bar is not None:
            self.bar.update(n)

    def __exit__(self, *exc):
        if self.bar is not None:
            self.bar.close()

