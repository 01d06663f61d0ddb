"""Time every step of one ANDREA forward pass on this machine, and record what each step ran.

Introduced in the chapter "The final picture".

    t = time_steps(model, B=1, T=128, repeats=3)
    t.shares()                 # {group: share of the forward's time}; the shares sum to 1
    t.shares(by="name")        # per step name, summed over the layers
    t.ops["qkv"]               # the aten ops the step ran, e.g. ["aten.mm.default", ...]
    t.kernels                  # {step: CUDA kernel names} from torch.profiler (GPU only)
    t.decision                 # the attention dispatcher's Decision, as a dict
    load_pipeline_timing("gpu")    # a committed GPU measurement, or None

How it measures: `pipeline.model_in_steps` runs the model's own forward with a mark after each
step. On the CPU a mark reads time.perf_counter. On a GPU the pass is timed by the benchmarks'
one timer (`bench.timing.QueuedEvents`): a torch.cuda._sleep head start, sized from the last
pass's host time, lets the host queue the whole pass before the device reaches it; a mark
records a CUDA event (no synchronisation between steps, one at the end of the pass), and a
step's time is the device's between its event and the one before: kernel time, with the
host's time per step apart (`host_median_ms`) and the passes the host outran counted
(provenance "host_bound_passes"). The forward is timed whole too (`forward_ms`), so the
marks' own overhead shows. Op names come from a separate untimed pass under a TorchDispatchMode
that records every aten op, CUDA kernel names from a torch.profiler pass on a GPU
(`pipeline_ops`).

The laboratory writes the JSON the chapter reads (andrea_lab.pipeline_timing; run it on a GPU
machine to commit a GPU measurement):
    python -m andrea_lab.pipeline_timing --config ANDREA-120M -B 8 -T 1024 --dtype bfloat16
"""
from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch

from andrea_edu.bench.timing import QUANTUM_MS
from andrea_edu.data import DataFileError
from andrea_edu.pipeline.steps import STEP_INFO, model_in_steps, sum_by
from andrea_edu.pipeline.ops import OpRecorder, main_ops, profile_steps

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


# A pass's head start on a GPU may be longer than one benchmark group's: a whole forward of the
# 120M model (12 layers of dispatch and launches) is queued behind it.
PASS_SLEEP_CAP_MS = 250.0


class _Clock:
    """The timing mark after each step. CPU: a perf_counter timestamp. GPU: bench.timing's one
    timer (QueuedEvents): a torch.cuda._sleep head start sized from the last pass's host time,
    so that the host queues the whole pass before the device reaches it, then one CUDA event per
    mark; a step's time is the device's between two events, and the host's time between the same
    marks is kept apart (`host_ms`), with `host_bound` when the head start did not cover it."""

    def __init__(self, device: str):
        from andrea_edu.bench.timing import QueuedEvents
        self.device = device
        self.marks: list = []  # (layer, name, timestamp) on a CPU; (layer, name, None) on a GPU
        self.info: dict[str, Any] = {}
        self.host_ms: list[float] = []   # the host's ms per step of the last pass (GPU)
        self.host_bound = False
        self.ahead_ms = PASS_SLEEP_CAP_MS   # the first pass: the longest head start
        self._q = QueuedEvents(cap_ms=PASS_SLEEP_CAP_MS) if device == "cuda" else None

    def start(self):
        self.marks = []
        if self._q is not None:
            self._q.start(self.ahead_ms)
        else:
            self.t0 = time.perf_counter()

    def __call__(self, layer, name, out, **info):
        if self._q is not None:
            self._q.mark()
            self.marks.append((layer, name, None))
        else:
            self.marks.append((layer, name, time.perf_counter()))
        if info:
            self.info.setdefault(name, info)
        return out

    def durations_ms(self) -> list[tuple]:
        """[(layer, name, ms)] of the last pass, in order: device time on a GPU (the host's
        apart in self.host_ms), wall time on a CPU."""
        if self._q is not None:
            device, self.host_ms = self._q.stop()
            self.host_bound = self._q.host_bound
            self.ahead_ms = 1.5 * sum(self.host_ms) + 0.05   # the next pass's head start
            return [(layer, name, ms) for (layer, name, _), ms in zip(self.marks, device)]
        out, prev = [], self.t0
        for layer, name, t in self.marks:
            out.append((layer, name, (t - prev) * 1e3))
            prev = t
        return out


@dataclasses.dataclass
class StepTiming:
    """Measured time of every step of one forward pass (see the module docstring)."""

    config: str
    B: int
    T: int
    dtype: str
    backend: str
    device: str  # "CPU: <model>" or the GPU's name
    device_kind: str  # "cpu" or "gpu"
    repeats: int
    steps: list  # [{"layer", "name", "median_ms", "min_ms"}], forward order
    forward_ms: float  # median of the plain model(idx), no marks
    marked_forward_ms: float  # median of the marked pass, all steps together
    decision: dict  # the attention Decision of layer 0, as a dict ({}: no dispatcher ran)
    ops: dict  # {step name: [aten ops]}
    kernels: dict  # {step name: [CUDA kernel names]}; {} on a CPU
    provenance: dict

    def ms(self, by: str = "group", stat: str = "min") -> dict:
        """Milliseconds summed by "group" (GROUPS order) or by step "name". stat: each step's
        "min" over the repeats (default: other work on the machine only ever adds time, so the
        fastest run is the least disturbed) or its "median"."""
        if stat not in ("min", "median"):
            raise ValueError(f"stat must be 'min' or 'median', got {stat!r}")
        return sum_by(((s["name"], s[f"{stat}_ms"]) for s in self.steps), by)

    def shares(self, by: str = "group", stat: str = "min") -> dict:
        """Each group's (or step name's) share of the summed step times; they sum to 1."""
        ms = self.ms(by, stat)
        total = sum(ms.values())
        if not total > 0:
            raise RuntimeError(f"the steps' times sum to {total} ms: nothing was measured")
        return {k: v / total for k, v in ms.items()}

    def main_ops(self, name: str) -> list[str]:
        """`main_ops` of the step called `name` (see the module-level function)."""
        return main_ops(self.ops.get(name, []))

    def label(self) -> str:
        """Where and how it was measured, for a figure's title."""
        return (f"{self.device}, {self.config}, B={self.B}, T={self.T}, {self.dtype}, "
                f"each step's fastest of {self.repeats}")

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def file_name(self) -> str:
        return pipeline_file_name(self.provenance.get("device_slug", self.device_kind))

    @classmethod
    def from_dict(cls, d: dict) -> "StepTiming":
        """Rebuild from `to_dict()`'s output; ValueError names what is missing or wrong."""
        fields = {f.name for f in dataclasses.fields(cls)}
        missing = sorted(fields - set(d))
        if missing:
            raise ValueError(f"pipeline timing file lacks {missing}")
        t = cls(**{k: d[k] for k in fields})
        if t.device_kind not in ("cpu", "gpu") or not t.steps:
            raise ValueError(f"device_kind={t.device_kind!r} must be 'cpu' or 'gpu', and steps "
                             f"must be non-empty (got {len(t.steps)})")
        unknown = sorted({s["name"] for s in t.steps} - set(STEP_INFO))
        if unknown:
            raise ValueError(f"unknown step names {unknown}; known: {list(STEP_INFO)}")
        if t.device_kind == "cpu" and not t.device.startswith("CPU"):
            raise ValueError(f"device={t.device!r}: a CPU measurement must be labelled 'CPU: ...'")
        for name, v in (("B", t.B), ("T", t.T), ("repeats", t.repeats)):
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name}={v!r} must be a positive int")
        for i, st in enumerate(t.steps):
            if not isinstance(st, dict) or not {"name", "min_ms", "median_ms"} <= set(st):
                raise ValueError(f"steps[{i}] lacks name, min_ms or median_ms")
            lo, med = st["min_ms"], st["median_ms"]
            if not all(_finite_nonneg(x) for x in (lo, med)) or lo > med:
                raise ValueError(f"steps[{i}] ({st['name']}): timings min {lo}, median {med} are "
                                 f"not 0 <= min <= median, finite")
        for k in ("forward_ms", "marked_forward_ms"):
            if not _finite_nonneg(getattr(t, k)):
                raise ValueError(f"{k}={getattr(t, k)!r} is not a finite number >= 0")
        return t


def _finite_nonneg(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) and x >= 0


def time_steps(model, B: int = 1, T: int = 128, repeats: int = 3, warmup: int = 1,
               seed: int = 0, kernels: bool = True) -> StepTiming:
    """Time each step of `model`'s forward on random token ids (B, T), on the model's device.

    Runs under torch.no_grad(). kernels: on a GPU, also one torch.profiler pass for the CUDA
    kernel names (ignored on a CPU, where the aten ops are the finest names there are).
    Stopped part-way (an error, Ctrl-C, SIGTERM) after at least one timed pass, it raises that
    error with `.partial`: the StepTiming of the passes it completed (repeats = their number,
    ops and kernels as far as recorded), as a dict labelled {"incomplete": reason}; the CLI saves
    it apart (incomplete_pipeline_<device>.json), never as a file the loader reads.
    """
    from andrea_edu.bench.timing import provenance

    for name, v in (("B", B), ("T", T), ("repeats", repeats)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"{name} must be a positive int, got {v!r}")
    if isinstance(warmup, bool) or not isinstance(warmup, int) or warmup < 0:
        raise ValueError(f"warmup must be an int >= 0, got {warmup!r}")
    dev = model.wte.device.type
    if dev not in ("cpu", "cuda"):
        raise ValueError(f"the model's device {model.wte.device} is not supported; use cpu or cuda")
    g = torch.Generator().manual_seed(seed)
    idx = torch.randint(0, model.wte.shape[0], (B, T), generator=g).to(model.wte.device)  # (B, T)
    clock = _Clock(dev)
    per_step: dict[tuple[int, str], list[float]] = {}
    host_step: dict[tuple[int, str], list[float]] = {}   # GPU: the host's ms, apart
    bound = [0, 0]   # GPU: passes whose head start the host outran (marked, whole forward)
    whole: list[float] = []
    marked: list[float] = []
    ops: dict = {}
    kern: dict = {}

    def result() -> StepTiming:  # what the completed passes measured
        steps: list[dict[str, Any]] = []
        for (layer, name), v in per_step.items():
            st: dict[str, Any] = {"layer": layer, "name": name,
                                  "median_ms": statistics.median(v), "min_ms": min(v)}
            h = host_step.get((layer, name))
            if h:   # GPU: the host's time of the step, its own number
                st["host_median_ms"] = statistics.median(h)
            steps.append(st)
        prov = provenance("cuda" if dev == "cuda" else "cpu",
                          command="pipeline_timing.time_steps",
                          what="the forward pass's five steps per layer, timed")
        prov["timer"] = (
            "cuda-events-queued: bench.timing.QueuedEvents, a torch.cuda._sleep head start "
            "then one CUDA event per step (device time); the host's time per step apart "
            "(host_median_ms)" if dev == "cuda" else "perf_counter per step (wall time)")
        if dev == "cuda":
            prov["host_bound_passes"] = {"marked": bound[0], "forward": bound[1],
                                         "of": len(whole)}
        decision = clock.info.get("attention", {}).get("decision")
        return StepTiming(
            config=getattr(model.cfg, "name", "custom"), B=B, T=T,
            dtype=str(model.wte.dtype).replace("torch.", ""),
            backend=model.blocks[0].attn.backend, device=prov["device"],
            device_kind=prov["device_kind"], repeats=len(whole), steps=steps,
            forward_ms=statistics.median(whole), marked_forward_ms=statistics.median(marked),
            decision=dataclasses.asdict(decision) if decision is not None else {},
            ops=ops, kernels=kern, provenance=prov)
    try:
        with torch.no_grad():
            for i in range(warmup + repeats):
                clock.start()
                model_in_steps(model, idx, clock)
                durations = clock.durations_ms()
                if i >= warmup:
                    fwd = _time_forward(model, idx, dev)
                    fwd_bound = _FORWARD["host_bound"]
                    hosts: list[float | None] = list(clock.host_ms) or [None] * len(durations)
                    for (layer, name, ms), h in zip(durations, hosts):
                        per_step.setdefault((layer, name), []).append(ms)  # a whole pass counts
                        if h is not None:
                            host_step.setdefault((layer, name), []).append(h)
                    marked.append(sum(ms for *_, ms in durations))
                    whole.append(fwd)
                    bound[0] += clock.host_bound
                    bound[1] += fwd_bound
            with OpRecorder() as rec:
                model_in_steps(model, idx, rec.mark)
            ops = rec.ops
            kern = profile_steps(model, idx)[1] if (kernels and dev == "cuda") else {}
    except (Exception, KeyboardInterrupt) as e:  # keep what was measured: raised with it
        if not whole:
            raise
        stopped = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}".strip()
        with contextlib.suppress(Exception):  # (nothing to keep if even that fails)
            setattr(e, "partial", dict(result().to_dict(), incomplete=stopped))
        raise
    return result()


def time_block(block, x, layer: int = 0, repeats: int = 5, warmup: int = 1) -> dict:
    """{step name: {"min_ms", "median_ms", "runs_ms"}} of one block's 14 steps on input x
    (B, T, C), marked as in `time_steps`: each step's fastest and median of `repeats` runs, and
    the runs themselves (chapter "Reading the pipeline"; `step_noise` reads them)."""
    from andrea_edu.pipeline.steps import block_in_steps

    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
        raise ValueError(f"repeats must be a positive int, got {repeats!r}")
    clock = _Clock(x.device.type)
    per_step: dict[str, list[float]] = {}
    with torch.no_grad():
        for i in range(warmup + repeats):
            clock.start()
            block_in_steps(block, x, clock, layer)
            for _, name, ms in clock.durations_ms():
                if i >= warmup:
                    per_step.setdefault(name, []).append(ms)
    return {name: {"min_ms": min(v), "median_ms": statistics.median(v), "runs_ms": v}
            for name, v in per_step.items()}


# When one step's CPU time is a scheduler spike, not its cost (`step_noise`). A thread that loses
# its core for a quantum (QUANTUM_MS, ~4-8 ms on a loaded machine) comes back that much later, so
# a hit step is late by about a quantum: half a quantum is the least lateness counted, whatever
# the ratio, and a small step's microseconds of jitter never count.
NOISE_FLOOR_MS = QUANTUM_MS / 2
NOISE_SPREAD = 0.5   # median above the fastest run by this fraction (and the floor): runs disagree
NOISE_FACTOR = 4.0   # fastest run above this many times what its FLOPs and bytes predict (and the floor)


def matmul_rate(timing: dict, steps) -> float:
    """FLOP/s of this run's matmuls: the median over the matmul steps of FLOPs / fastest run.
    A median, so one spiked matmul of four barely moves it."""
    rates = [s.flops / (timing[s.name]["min_ms"] / 1e3) for s in steps
             if s.kind == "matmul" and s.name in timing and timing[s.name]["min_ms"] > 0]
    if not rates:
        raise ValueError("timing has no matmul step with a positive time: no FLOP rate to predict from")
    return statistics.median(rates)


def step_noise(timing: dict, steps, bytes_per_s: float, flops_per_s: float | None = None) -> dict:
    """{step name: {"predicted_ms", "noise"}} for a `time_block` result (or any {name: {"min_ms",
    "median_ms"}}); `steps` are the same steps costed (`pipeline.layer_steps`).

    predicted_ms: the step's FLOPs at `flops_per_s` (default: `matmul_rate` of this timing) or
    its bytes at `bytes_per_s` (`memory_bandwidth()`), whichever is longer. noise: "" for a clean
    step, else one phrase saying why its time is noise:
      spread  median - fastest >= NOISE_FLOOR_MS and >= NOISE_SPREAD x fastest;
      spike   fastest - predicted >= NOISE_FLOOR_MS and fastest >= NOISE_FACTOR x predicted.
    What it cannot see: a spike that hit every run of every matmul (the rate drops with them)."""
    if not (isinstance(bytes_per_s, (int, float)) and math.isfinite(bytes_per_s) and bytes_per_s > 0):
        raise ValueError(f"bytes_per_s must be a positive number, got {bytes_per_s!r}")
    rate = matmul_rate(timing, steps) if flops_per_s is None else flops_per_s
    if not (isinstance(rate, (int, float)) and math.isfinite(rate) and rate > 0):
        raise ValueError(f"flops_per_s must be a positive number, got {rate!r}")
    costs = {s.name: s for s in steps}
    missing = sorted(set(timing) - set(costs))
    if missing:
        raise ValueError(f"steps lacks the timed steps {missing}")
    out = {}
    for name, t in timing.items():
        lo, med = t["min_ms"], t["median_ms"]
        pred = 1e3 * max(costs[name].flops / rate, costs[name].bytes / bytes_per_s)
        why = []
        if med - lo >= NOISE_FLOOR_MS and med >= (1 + NOISE_SPREAD) * lo:
            why.append(f"runs disagree: fastest {lo:.3g} ms, median {med:.3g} ms")
        if lo - pred >= NOISE_FLOOR_MS and lo >= NOISE_FACTOR * pred:
            why.append(f"{lo / pred:.0f}x the {pred:.3g} ms its cost predicts" if pred > 0 else
                       f"{lo:.3g} ms for a step that moves no data")
        out[name] = {"predicted_ms": pred, "noise": "; ".join(why)}
    return out


def memory_bandwidth(megabytes: int = 64, repeats: int = 3) -> float:
    """This CPU's memory bandwidth in bytes/s, measured now: the fastest of `repeats` copies of
    a float32 buffer of `megabytes` MB into another (each copy reads and writes it: 2x its
    bytes). A buffer far larger than the caches measures DRAM; a small one, the caches."""
    for name, v in (("megabytes", megabytes), ("repeats", repeats)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"{name} must be a positive int, got {v!r}")
    src = torch.ones(megabytes * 2**20 // 4)  # float32
    dst = torch.empty_like(src)
    seconds = []
    for _ in range(repeats + 1):
        t0 = time.perf_counter()
        dst.copy_(src)
        seconds.append(time.perf_counter() - t0)
    best = min(seconds[1:])  # the first copy also faults the pages in: not counted
    return 2 * src.numel() * src.element_size() / best


def group_at_bandwidth(timing: StepTiming, steps, group: str, bytes_per_s: float) -> dict:
    """A step group's least bytes (`steps`, from the formulas, at the timing's B and T) over a
    memory bandwidth, against the group's measured time (chapter "The final picture",
    exercise 5). Returns {"group", "bytes", "flops", "bandwidth_ms", "measured_ms", "share"}."""
    ms = timing.ms()
    if group not in ms:
        raise ValueError(f"group={group!r} is not one of {list(ms)}")
    if not (isinstance(bytes_per_s, (int, float)) and math.isfinite(bytes_per_s) and bytes_per_s > 0):
        raise ValueError(f"bytes_per_s must be a positive number, got {bytes_per_s!r}")
    mine = [s for s in steps if s.group == group]
    moved = sum(s.bytes for s in mine)
    return {"group": group, "bytes": moved, "flops": sum(s.flops for s in mine),
            "bandwidth_ms": 1e3 * moved / bytes_per_s, "measured_ms": ms[group],
            "share": timing.shares()[group]}


# _time_forward's head start (sized from its last call's host time) and whether the host
# outran it in its last call (GPU)
_FORWARD: dict[str, Any] = {"ahead_ms": PASS_SLEEP_CAP_MS, "host_bound": False}


def _time_forward(model, idx, dev) -> float:
    """Milliseconds of one plain forward (no marks). GPU: bench.timing's one timer (a head start,
    then the device's time between two events; _FORWARD["host_bound"] when the host outran
    it); CPU: perf_counter."""
    if dev == "cuda":
        from andrea_edu.bench.timing import QueuedEvents
        q = QueuedEvents(cap_ms=PASS_SLEEP_CAP_MS)
        q.start(_FORWARD["ahead_ms"])
        model(idx)
        q.mark()
        (ms,), (host,) = q.stop()
        _FORWARD.update(ahead_ms=1.5 * host + 0.05, host_bound=q.host_bound)
        return ms
    t0 = time.perf_counter()
    model(idx)
    _FORWARD["host_bound"] = False
    return (time.perf_counter() - t0) * 1e3


def pipeline_file_name(slug: str) -> str:
    """pipeline_<device slug>.json: the file a timing on that device is written to."""
    return f"pipeline_{slug}.json"


def _timing_files(data_dir_, errors: str) -> tuple[list[Path], list[Path]]:
    """(GPU files, CPU files) of the committed pipeline timings, by name ([] and [] when there
    is no folder); a file the manifest lists but that is gone raises or warns (errors=)."""
    import warnings

    from andrea_edu.data import data_folder, listed_but_missing

    if errors not in ("raise", "warn"):
        raise ValueError(f"errors={errors!r} is not one of 'raise', 'warn'")
    if data_dir_ is not None:
        folder = Path(data_dir_)
    else:  # $ANDREA_DATA_DIR; beside the installed package's repository; beside the notebook
        found = data_folder("pipeline_*.json")
        if found is None:
            return [], []
        folder = found
    gone = listed_but_missing(folder, "pipeline_*.json")  # committed, then deleted: damage
    if gone:
        if errors == "raise":
            raise DataFileError(gone)
        warnings.warn(f"{gone} (skipped, not shown)", RuntimeWarning)
    files = sorted(folder.glob("pipeline_*.json"))
    return ([f for f in files if f.name != "pipeline_cpu.json"],
            [f for f in files if f.name == "pipeline_cpu.json"])


def _read_timing_file(f: Path, want: str) -> StepTiming:
    """One committed timing file, checked (JSON, manifest, fields, device kind), or
    DataFileError in one line naming the file and the reason."""
    from andrea_edu.data import manifest_problem

    def bad(why):
        raise DataFileError(f"{f}: {why}")
    try:
        d = json.loads(f.read_text(), parse_constant=lambda c: bad(f"{c} is not a number"))
    except json.JSONDecodeError as e:
        bad(f"not valid JSON (truncated or damaged?): {e}")
    except (OSError, UnicodeDecodeError) as e:
        bad(f"cannot be read: {e}")
    problem = manifest_problem(f)  # listed in SHA256SUMS, and matching it
    if problem:
        bad(problem)
    if not isinstance(d, dict):
        bad(f"top level is {type(d).__name__}, not an object")
    try:
        t = StepTiming.from_dict(d)
    except (ValueError, TypeError, KeyError) as e:
        bad(str(e))
    if t.device_kind != want:
        bad(f"holds {t.device_kind.upper()} data ({t.device}) in a file named for "
            f"{want.upper()} data")
    return t


def load_pipeline_timing(device: str = "gpu", data_dir_=None,
                         errors: str = "raise") -> StepTiming | None:
    """A committed measurement: device "gpu" (any GPU file), "cpu", or "any" (GPU first).
    None when there is no file. A file that is there but invalid (damaged, NaN/Infinity or
    negative timings, a field missing, the wrong device for its name) is never shown:
    errors="raise" raises DataFileError, one line naming the file and the reason;
    errors="warn" warns that line and goes on."""
    import warnings

    if device not in ("gpu", "cpu", "any"):
        raise ValueError(f"device={device!r} is not one of 'gpu', 'cpu', 'any'")
    gpu, cpu = _timing_files(data_dir_, errors)
    for f in {"gpu": gpu, "cpu": cpu, "any": gpu + cpu}[device]:
        try:
            return _read_timing_file(f, "cpu" if f in cpu else "gpu")
        except DataFileError as e:
            if errors == "raise":
                raise
            warnings.warn(f"{e} (skipped, not shown)", RuntimeWarning)
    return None


def load_all_pipeline_timings(data_dir_=None, errors: str = "raise") -> list[StepTiming]:
    """Every committed GPU pipeline timing (an H100's and an H200's both, by file name), each
    checked as load_pipeline_timing checks one: neither shadows the other. [] when none."""
    import warnings

    out = []
    for f in _timing_files(data_dir_, errors)[0]:
        try:
            out.append(_read_timing_file(f, "gpu"))
        except DataFileError as e:
            if errors == "raise":
                raise
            warnings.warn(f"{e} (skipped, not shown)", RuntimeWarning)
    return out
