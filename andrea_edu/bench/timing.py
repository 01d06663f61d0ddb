"""Timing, FLOP formulas and provenance: what every benchmark of the book stands on.

    attention_flops(B, nh, T, hs, causal), matmul_flops(M, N, K)     the formulas, in one place
    time_fns({name: fn}, device, repeats, warmup)   the backends of one case take turns: CUDA
                                                    events on a GPU, perf_counter on a CPU
    check_close(out, ref, dtype, what)              validation before timing (ValidationError)
    provenance(device, command)                     device, driver, CUDA, torch, commit, date...

Rules every suite follows (as llm.c's dev/cuda and Triton's tutorials do):
  1. validate each backend's output against the fp32 reference BEFORE timing it; a wrong
     result is never timed (strict: raise ValidationError; otherwise status "invalid");
  2. warm up, then time `repeats` calls, the backends of one case taking turns: CUDA events
     on a GPU, time.perf_counter on a CPU; report min / median / max in milliseconds;
  3. TFLOP/s from a FLOP formula written below, and the time ratio to torch's SDPA;
  4. every file carries its provenance; CPU figures are labelled CPU, never passed off as GPU.
"""
from __future__ import annotations

import datetime as _dt
import os
import platform
import re
import statistics
import subprocess
import time
from pathlib import Path
from typing import Any

import torch

from andrea_edu.env import cpu_name, git_commit

__all__ = ["attention_flops", "matmul_flops", "time_fn", "time_fns", "check_close", "tolerance",
           "provenance", "pick_device", "device_slug", "ValidationError"]


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


def provenance(device: str, command: str = "") -> dict:
    """Where a measurement came from: device, versions, commit, date (goes into every file)."""
    from andrea_edu.env import __version__, cpu_provenance

    p: dict[str, Any] = {"device_kind": "gpu" if device == "cuda" else "cpu",
         "torch": torch.__version__, "cuda": torch.version.cuda,
         "andrea_edu": __version__, "python": platform.python_version(),
         "git_commit": git_commit(), "command": command,
         "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")}
    if device == "cuda":
        props = torch.cuda.get_device_properties(0)
        p.update(device=torch.cuda.get_device_name(0), device_slug=device_slug(props.name),
                 compute_capability=f"{props.major}.{props.minor}",
                 sm_count=props.multi_processor_count, driver=_driver_version())
    else:
        p.update(device=f"CPU: {cpu_name()}", device_slug="cpu", driver=None,
                 cpu_threads=torch.get_num_threads(), cpu_count=os.cpu_count())
    # the CPU, its instruction-set pins and the level ATen really used (decides CPU low bits)
    p["cpu_numerics"] = cpu_provenance()
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
    times: dict[str, list[float]] = {name: [] for name in fns}
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
    from andrea_edu.attention import TOLERANCE
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


