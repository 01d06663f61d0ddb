"""Timing, FLOP formulas and provenance: what every benchmark of the book stands on.

    attention_flops(B, nh, T, hs, causal), matmul_flops(M, N, K)     the formulas, in one place
    time_fns({name: fn}, device, repeats, warmup)   the backends of one case take turns: on a
                                                    GPU a group of calls queued between one
                                                    pair of CUDA events (kernel time, with the
                                                    host's time per call apart); on a CPU
                                                    perf_counter on one thread, beside the
                                                    thread's CPU time; median and p25/p75
    timing_ok(t) -> (ok, why)                       may this timing carry a ratio or verdict?
                                                    (spread, scheduler quanta, waits, host-bound)
    check_close(out, ref, dtype, what)              validation before timing (ValidationError)
    provenance(device, command)                     device, driver, CUDA, torch, date...

Rules every suite follows (as llm.c's dev/cuda and Triton's tutorials do):
  1. validate each backend's output against the fp32 reference BEFORE timing it; a wrong
     result is never timed (strict: raise ValidationError; otherwise status "invalid");
  2. warm up, then time `repeats` rounds, the backends of one case taking turns: CUDA events
     around a queued group on a GPU, time.perf_counter on one thread on a CPU; report min /
     p25 / median / p75 / max in milliseconds per call, and whether the timing passes
     timing_ok (a ratio or verdict rests only on timings that pass);
  3. TFLOP/s from a FLOP formula written below, and the time ratio to torch's SDPA;
  4. every file carries its provenance; CPU figures are labelled CPU, never passed off as GPU.
"""
from __future__ import annotations

import os
import re
import statistics
import subprocess
import time
from pathlib import Path
from typing import Any

import torch

from andrea_edu.env import cpu_name

__all__ = ["attention_flops", "matmul_flops", "time_fn", "time_fns", "timing_ok", "timing_quality",
           "spread_text", "checked_ratio", "refusal", "ms_cell", "check_cell", "check_close", "tolerance", "provenance", "pick_device", "device_slug",
           "ValidationError", "QueuedEvents"]


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


def provenance(device: str, command: str = "", what: str = "timings") -> dict:
    """Where a measurement came from (goes into every file): the one schema's shared keys
    (`andrea_edu.data.new_provenance`: command as produced_by, UTC date, CPU numerics,
    versions) and the timing's own: device, driver, CUDA, threads, the load. The laboratory's
    writer adds the commit when it writes the file (andrea_lab.store.stamped)."""
    from andrea_edu.data import new_provenance

    own: dict[str, Any] = {"device_kind": "gpu" if device == "cuda" else "cpu",
                           "cuda": torch.version.cuda}
    if device == "cuda":
        props = torch.cuda.get_device_properties(0)
        own.update(device=torch.cuda.get_device_name(0), device_slug=device_slug(props.name),
                   compute_capability=f"{props.major}.{props.minor}",
                   sm_count=props.multi_processor_count, driver=_driver_version())
    else:
        own.update(device=f"CPU: {cpu_name()}", device_slug="cpu", driver=None,
                   cpu_threads=torch.get_num_threads(), cpu_count=os.cpu_count())
    if hasattr(os, "getloadavg"):  # other work on a shared machine slows CPU timings: say so
        own["load_avg_1min"] = round(os.getloadavg()[0], 2)
    return new_provenance(what, command, **own)


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


# How a timing is taken, and when it is not trusted (timing_ok). CPU: perf_counter around a
# group of calls on ONE torch thread, with the thread's own CPU time beside it (time.thread_time):
# wall time well above CPU time means the thread waited for a core (another process held it for
# a scheduler quantum), which on a loaded 2-core machine puts medians on multiples of ~4-8 ms.
# GPU: a group of calls queued back to back between ONE pair of CUDA events, after a
# torch.cuda._sleep that keeps the GPU busy while the host queues them, so the events measure
# the kernels and not the Python that issued them; the host's own time per call is reported
# apart (host_ms_per_call).
CPU_MIN_REPEATS = 11         # samples per callable on a CPU, at least (the median of 11 stands
                             # while 5 of them are hit by a quantum)
SAMPLE_MS = {"cpu": 0.3, "cuda": 1.0}   # a sample groups calls until it lasts about this long
MAX_CALLS_PER_SAMPLE = 200
MAX_SPREAD = 0.5             # (p75 - p25) / median above this: too spread to rest a ratio on
MAX_WAITED_SHARE = 0.25      # share of CPU samples whose wall time exceeds CPU time by this...
WAIT_SLACK = 0.2             # ...fraction (or 0.5 ms): the thread waited for a core
QUANTUM_MS = 4.0             # Linux's scheduler tick at HZ=250; medians on its multiples are suspect
_SLEEP_CAP_MS = 50.0


def _quantile(xs: list[float], q: float) -> float:
    """Linear-interpolation quantile of a non-empty list (numpy's default method)."""
    s = sorted(xs)
    pos = (len(s) - 1) * q
    lo = int(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def _event():
    """One timing CUDA event (a hook: the CPU tests stand in for it)."""
    return torch.cuda.Event(enable_timing=True)


def _gpu_sleep(cycles: int) -> None:
    """Keep the GPU busy for `cycles` clock cycles (a hook: the CPU tests stand in for it)."""
    if cycles > 0:
        torch.cuda._sleep(int(cycles))


def _sleep_cycles_per_ms(sync) -> float:
    """GPU clock cycles of torch.cuda._sleep per millisecond, measured once (clocks vary)."""
    if _CYCLES_PER_MS:
        return _CYCLES_PER_MS[0]
    cycles = 1_000_000
    start, end = _event(), _event()
    sync()
    start.record()
    _gpu_sleep(cycles)
    end.record()
    end.synchronize()
    ms = start.elapsed_time(end)
    rate = cycles / ms if ms and ms > 0 else 2.0e6
    _CYCLES_PER_MS.append(rate)
    return rate


_CYCLES_PER_MS: list[float] = []


# host_bound's margin: a device that waited for the host ends its events this close to the
# host's own time (an event lands on the device microseconds after the host records it)
HOST_BOUND_MARGIN_MS = 0.02
HOST_BOUND_MARGIN_SHARE = 0.05


class QueuedEvents:
    """The one GPU timer of the book (time_fns' groups, the pipeline's steps and forward): a
    torch.cuda._sleep head start of `ahead_ms` on the stream, so that the host queues what
    follows before the device reaches it, then a CUDA event at `start()`, one at each `mark()`,
    and `stop()` -> (device ms between consecutive events, host ms between the same points).
    The events measure the device's work, Python's time is the host list, apart.

    host_bound: whether the queue drained (some device gap is the host's). An event recorded
    before the sleep gives the device's own time from there to the last mark; a device that
    had to wait for the host ends there within microseconds of the host's own time
    (HOST_BOUND_MARGIN_*), one that did not ends later by the head start's spare. So the check
    reads what the device did, not what the sleep was meant to do (torch.cuda._sleep's rate is
    calibrated once per process and clocks that rise later shorten the real head start; that
    shows here). sleep_ms: the head start asked for; slept_ms: the device's own measure of it.
    cap_ms bounds the head start."""

    def __init__(self, cap_ms: float = _SLEEP_CAP_MS):
        self.cap_ms = cap_ms
        self.sleep_ms = self.slept_ms = 0.0
        self.host_bound = False
        self._events: list = []
        self._host: list[float] = []

    def start(self, ahead_ms: float = 0.0) -> None:
        self.sleep_ms = min(max(float(ahead_ms), 0.0), self.cap_ms)
        rate = _sleep_cycles_per_ms(torch.cuda.synchronize) if self.sleep_ms > 0 else 0.0
        e0 = _event()
        e0.record()
        self._h0 = time.perf_counter()
        if self.sleep_ms > 0:
            _gpu_sleep(int(self.sleep_ms * rate))
        ev = _event()
        ev.record()
        self._e0, self._events, self._host = e0, [ev], [time.perf_counter()]

    def mark(self) -> None:
        h = time.perf_counter()
        ev = _event()
        ev.record()
        self._events.append(ev)
        self._host.append(h)

    def stop(self) -> tuple[list[float], list[float]]:
        self._events[-1].synchronize()
        ev, h = self._events, self._host
        device = [a.elapsed_time(b) for a, b in zip(ev, ev[1:])]
        host = [(b - a) * 1e3 for a, b in zip(h, h[1:])]
        self.slept_ms = self._e0.elapsed_time(ev[0])
        dev_total = self._e0.elapsed_time(ev[-1])
        host_total = (h[-1] - self._h0) * 1e3
        self.host_bound = dev_total < host_total * (1 + HOST_BOUND_MARGIN_SHARE) + \
            HOST_BOUND_MARGIN_MS
        return device, host


def timing_quality(t: dict) -> tuple[bool, str | None]:
    """(ok, reason) of one timing from time_fns: too spread, dominated by scheduler quanta, the
    thread waiting for a core, or (GPU) the host unable to keep the queue full."""
    med = t.get("median_ms")
    if not med or med <= 0:
        return False, "no median"
    spread = t.get("iqr_over_median")
    if spread is None:
        return False, "no spread recorded"
    if t.get("host_bound"):
        return False, (f"host-bound: queuing one call took {t.get('host_ms_per_call', 0):.3g} "
                       f"ms on the host, the GPU ran out of work between calls")
    n = t.get("repeats") or 0
    waited = t.get("waited_samples") or 0
    if n and waited / n > MAX_WAITED_SHARE:
        return False, (f"{waited} of {n} samples waited for a CPU core (wall time above the "
                       f"thread's CPU time): other work shared the CPU")
    cpu = t.get("cpu_median_ms")
    per = t.get("calls_per_sample") or 1
    group = med * per
    if cpu is not None and group >= QUANTUM_MS * 0.9 and med > cpu * (1 + WAIT_SLACK):
        k = round(group / QUANTUM_MS)
        if k >= 1 and abs(group - k * QUANTUM_MS) < 0.05 * QUANTUM_MS:
            return False, (f"the median sits on a scheduler quantum ({group:.2f} ms per sample "
                           f"~ {k} x {QUANTUM_MS:g} ms) while the thread computed for "
                           f"{cpu * per:.2f} ms")
    if spread > MAX_SPREAD:
        return False, (f"too spread: (p75 - p25) / median = {spread:.2f} > {MAX_SPREAD}")
    return True, None


def timing_ok(t: dict | None) -> tuple[bool, str]:
    """Whether a timing (a time_fns entry or a results record) may carry a ratio or a verdict:
    (True, "") or (False, one line saying why not). A record written before timings carried
    their spread (the committed CPU files of schema 1) is not trusted: it says so."""
    if not t or not t.get("median_ms"):
        return False, "nothing was measured"
    if "quality_ok" not in t:
        return False, ("recorded before timings carried their spread and check (min, median, "
                       "max only): not used for a ratio or verdict")
    if t["quality_ok"]:
        return True, ""
    return False, str(t.get("quality_reason") or "failed the timing check")


def spread_text(t: dict) -> str:
    """'1.23 ms (p25-p75 1.20-1.31, n=11)' or, for an old record, the median and min."""
    if t.get("p25_ms") is not None and t.get("p75_ms") is not None:
        return (f"{t['median_ms']:.3g} ms (p25-p75 {t['p25_ms']:.3g}-{t['p75_ms']:.3g}, "
                f"n={t.get('repeats')})")
    return f"{t['median_ms']:.3g} ms (min {t.get('min_ms', float('nan')):.3g}, spread unknown)"


def checked_ratio(a: dict | None, b: dict | None, key: str = "median_ms"
                  ) -> tuple[float | None, str]:
    """(a[key] / b[key], "") when both timings pass timing_ok; else (None, why not). What a
    chapter's ratio sentence or verdict rests on."""
    for t in (a, b):
        ok, why = timing_ok(t)
        if not ok:
            return None, why
    assert a is not None and b is not None
    return a[key] / b[key], ""


def refusal(what: str, why: str) -> str:
    """The one line a chapter shows instead of a ratio or verdict resting on a failing timing."""
    return f"no {what} is stated here: a timing it would rest on fails the check ({why})"


def ms_cell(t: dict, scale: float = 1.0, digits: int = 3, key: str = "median_ms") -> str:
    """A table cell: the value with its spread, e.g. '1.234 (1.20-1.31)' (p25-p75), times
    `scale` (1e3 for µs); a timing without a spread shows its value alone."""
    v = f"{t[key] * scale:.{digits}f}"
    if t.get("p25_ms") is not None and t.get("p75_ms") is not None:
        return f"{v} ({t['p25_ms'] * scale:.{digits}f}-{t['p75_ms'] * scale:.{digits}f})"
    return v


def check_cell(t: dict) -> str:
    """'ok' or the reason a timing fails timing_ok, for a table's last column."""
    ok, why = timing_ok(t)
    return "ok" if ok else why.replace("|", "/")


def time_fns(fns: dict, device: str, repeats: int = 10, warmup: int = 3,
             budget_s: float | None = None, threads: int | None = 1,
             sleep: bool = True) -> dict:
    """Time several zero-argument callables that take turns; per name a dict with min_ms,
    median_ms, max_ms, p25_ms, p75_ms (per call), iqr_over_median, repeats (samples),
    calls_per_sample, timer, quality_ok and quality_reason (timing_quality), and
    CPU: threads, cpu_median_ms (the thread's own CPU time), waited_samples;
    GPU: host_ms_per_call (the host's time to queue one call, its own number), host_bound.

    `warmup` untimed rounds, then `repeats` rounds in which every fn takes its turn, so that a
    drift of the machine (clocks, other load) hits all of them alike. A round times a group of
    calls_per_sample back-to-back calls (sized from the last warm-up round so that a group lasts
    about SAMPLE_MS; 1 without a warm-up) and divides.
    GPU: the group is queued between one pair of CUDA events, after a torch.cuda._sleep long
    enough for the host to queue it (sleep=True): the events measure the device's work. Pass
    prepared callables (andrea_edu.kernels.launch.prepare_attention): whatever Python a fn runs
    counts toward host_ms_per_call, and makes the run host-bound when it outlasts the kernel.
    CPU: on `threads` torch threads (default 1; None keeps the current setting), restored
    afterwards; at least CPU_MIN_REPEATS rounds.
    budget_s: repeats is lowered (never below 3, on a CPU never below CPU_MIN_REPEATS) so that
    the timed rounds take about budget_s.
    """
    if repeats < 1 or warmup < 0:
        raise ValueError(f"repeats={repeats} must be >= 1 and warmup={warmup} >= 0")
    if device not in ("cpu", "cuda"):
        raise ValueError(f"device={device!r} is not one of 'cpu', 'cuda'")
    on_gpu = device == "cuda"
    before = torch.get_num_threads()
    if not on_gpu and threads is not None:
        torch.set_num_threads(threads)
    try:
        return _time_fns(fns, on_gpu, repeats, warmup, budget_s, sleep)
    finally:
        if not on_gpu and threads is not None:
            torch.set_num_threads(before)


def _time_fns(fns: dict, on_gpu: bool, repeats: int, warmup: int, budget_s: float | None,
              sleep: bool) -> dict:
    sync = torch.cuda.synchronize if on_gpu else (lambda: None)
    floor = 3 if on_gpu else CPU_MIN_REPEATS
    if not on_gpu:
        repeats = max(repeats, CPU_MIN_REPEATS)
    last: dict[str, float] = {name: 0.0 for name in fns}   # ms of one call, last warm-up round
    for _ in range(warmup):
        for name, fn in fns.items():
            sync()
            t0 = time.perf_counter()
            fn()
            sync()
            last[name] = (time.perf_counter() - t0) * 1e3
    target = SAMPLE_MS["cuda" if on_gpu else "cpu"]
    per = {name: (1 if not warmup else
                  max(1, min(MAX_CALLS_PER_SAMPLE, int(target / max(last[name], 1e-6)))))
           for name in fns}
    if budget_s is not None:
        per_round = max(sum(last[n] * per[n] for n in fns) / 1e3, 1e-9) if warmup else None
        if per_round is None:
            sync()
            t0 = time.perf_counter()
            for fn in fns.values():
                fn()
            sync()
            per_round = max(time.perf_counter() - t0, 1e-9)
        repeats = max(min(floor, repeats), min(repeats, int(budget_s / per_round)))
    if on_gpu and sleep:
        _sleep_cycles_per_ms(sync)   # calibrated before the first timed group
    clock = QueuedEvents()
    wall: dict[str, list[float]] = {name: [] for name in fns}
    cpu: dict[str, list[float]] = {name: [] for name in fns}
    host: dict[str, list[float]] = {name: [] for name in fns}
    bound: dict[str, int] = {name: 0 for name in fns}
    sync()
    for _ in range(repeats):
        for name, fn in fns.items():
            n = per[name]
            if on_gpu:
                # a head start long enough for the host to queue the group (last round's pace)
                clock.start(1.5 * n * (statistics.median(host[name]) if host[name] else
                                       max(last[name], 0.05)) + 0.05 if sleep else 0.0)
                for _ in range(n):
                    fn()
                clock.mark()
                (ms,), (h_ms,) = clock.stop()
                host[name].append(h_ms / n)
                bound[name] += clock.host_bound   # the queue drained: host time in the gap
                wall[name].append(ms / n)
            else:
                c0, t0 = time.thread_time(), time.perf_counter()
                for _ in range(n):
                    fn()
                t1, c1 = time.perf_counter(), time.thread_time()
                wall[name].append((t1 - t0) * 1e3 / n)
                cpu[name].append((c1 - c0) * 1e3 / n)
    out = {}
    for name in fns:
        w = wall[name]
        med = statistics.median(w)
        t: dict[str, Any] = {
            "min_ms": min(w), "median_ms": med, "max_ms": max(w),
            "p25_ms": _quantile(w, 0.25), "p75_ms": _quantile(w, 0.75),
            "iqr_over_median": (_quantile(w, 0.75) - _quantile(w, 0.25)) / med if med > 0
            else 0.0,
            "repeats": repeats, "calls_per_sample": per[name],
            "timer": "cuda-events-queued" if on_gpu else "perf_counter-1-thread"}
        if on_gpu:
            t["host_ms_per_call"] = statistics.median(host[name])
            t["host_bound"] = bound[name] > repeats // 2
        else:
            t["threads"] = torch.get_num_threads()
            t["cpu_median_ms"] = statistics.median(cpu[name])
            t["waited_samples"] = sum(
                wi - ci > max(0.5 / per[name], WAIT_SLACK * ci) for wi, ci in zip(w, cpu[name]))
        t["quality_ok"], t["quality_reason"] = timing_quality(t)
        out[name] = t
    return out


def time_fn(fn, device: str, repeats: int = 10, warmup: int = 3) -> dict:
    """time_fns for one callable (see there for the fields)."""
    return time_fns({"fn": fn}, device, repeats, warmup)["fn"]


def tolerance(dtype) -> tuple[float, float]:
    """(atol, rtol) of andrea_edu.dispatch.TOLERANCE: one set of tolerances for the library,
    gpucheck and the benchmarks (bf16 keeps 8 bits of mantissa, fp16 11, fp32 24)."""
    from andrea_edu.dispatch import TOLERANCE
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


