"""The kernel the dispatcher runs at one head_dim, measured beside torch SDPA: live on a reader's
GPU, or read from a committed GPU file. Chapter "The configuration mirrors the hardware" (the
head_dim slider draws these points over the MODEL band of kernels.head_dim_evidence).

    measure(head_dim, B=8, n_head=12, T=1024, causal=True, dtype=bf16, device="cuda",
            repeats=10, warmup=3) -> {head_dim, device, device_kind, B, n_head, T,
            kernel: {backend, version, us, check}, sdpa: {backend, us, check}, source}
        Runs attention(backend="auto") and SDPA once each, checks both against the fp32
        reference, and only then times those that passed (bench.timing.time_fns: warm-up,
        turns). A check that fails is reported and not timed.
    from_results(results, head_dims, B, n_head, T, shape="ANDREA-120M") -> {head_dim: point}
        The same points from a head_dim results file of a GPU (the dispatcher's backend at that
        head_dim, as the benchmark recorded it, and SDPA), only at this B, n_head, T; {} for a
        CPU file or None (a CPU has no tensor cores: its times say nothing about tiles).
    kernel_facts(head_dim, dtype=bf16, arch="sm_90", B=8, n_head=12, T=1024, gpu="H200") -> dict
        No GPU needed: the dispatcher's decision on a CUDA device and the compiled kernel behind
        it (kernels.head_dim_evidence.compiled); cached.
A GPU's head_dim results file, read (chapter "From one block per head to FlashAttention"):
    HEAD_DIMS, SLIDER_HEAD_DIMS; check_head_dim(hs)   the head_dims all three kernels compile
                                                      for, the slider's, a one-line refusal
    measured_rows(results, nh) -> [{version, head_dim, ms, sdpa_ms, speed, kernel, B, T, ...}]
    model_gpu(results, model_gpus), measured_seconds(rows, results, B, T)
    model_beside_measured(results, nh, dtype)   measured time beside the time MODEL's bracket
"""
from __future__ import annotations

import functools
from typing import Any

import torch

from andrea_edu.dispatch import attention, choose_backend, compare_to_reference
from andrea_edu.bench import timing
from andrea_edu.kernels import head_dim_evidence as evidence
from andrea_edu.kernels import registry, time_model

HEAD_DIMS = (32, 64, 96, 128)  # the head_dims every version compiles for (v3's set)
# The slider's head_dims: v3's set plus misaligned ones where the dispatcher falls back
# (72: to v1; 80 and 112: to v2), so the v3 -> v2 -> v1 ladder shows there too.
SLIDER_HEAD_DIMS = (32, 64, 72, 80, 96, 112, 128)


def _device_name(device: str) -> str:
    if device == "cuda":
        return torch.cuda.get_device_name(0)
    import platform
    return f"{platform.processor() or platform.machine()} (CPU)"


def measure(head_dim: int, B: int = 8, n_head: int = 12, T: int = 1024, causal: bool = True,
            dtype=torch.bfloat16, device: str = "cuda", repeats: int = 10,
            warmup: int = 3, pad: bool = False) -> dict[str, Any]:
    """Validate, then time, the dispatched kernel and SDPA at one head_dim (module doc); pad:
    the dispatcher's choice with attention(..., pad=pad) (True: cuda-flash-padded, #39)."""
    if isinstance(head_dim, bool) or not isinstance(head_dim, int) or not 1 <= head_dim <= 256:
        raise ValueError(f"head_dim={head_dim!r}: allowed values are ints 1..256")
    if device not in ("cuda", "cpu"):
        raise ValueError(f"device={device!r} is not one of 'cuda', 'cpu'")
    if device == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("device='cuda' but torch sees no CUDA GPU")
    g = torch.Generator(device="cpu").manual_seed(0)
    q, k, v = (torch.randn(B, n_head, T, head_dim, generator=g).to(device=device, dtype=dtype)
               for _ in range(3))                                   # (B, nh, T, hs)
    out, decision = attention(q, k, v, causal=causal, return_decision=True, pad=pad)
    ref_sdpa = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
    checks = {"kernel": compare_to_reference(out, q, k, v, causal),
              "sdpa": compare_to_reference(ref_sdpa, q, k, v, causal)}
    fns = {}
    if checks["kernel"]["passed"]:
        fns["kernel"] = lambda: attention(q, k, v, causal=causal, backend=decision.backend)
    if checks["sdpa"]["passed"]:
        fns["sdpa"] = lambda: torch.nn.functional.scaled_dot_product_attention(
            q, k, v, is_causal=causal)
    times = timing.time_fns(fns, device, repeats=repeats, warmup=warmup) if fns else {}
    from andrea_edu.bench.cases import sdpa_choice
    return dict(
        head_dim=head_dim, device=_device_name(device), device_kind="gpu" if device == "cuda"
        else "cpu", B=B, n_head=n_head, T=T, causal=causal, source="measured live",
        kernel=dict(backend=decision.backend, version=decision.kernel, check=checks["kernel"],
                    us=times["kernel"]["median_ms"] * 1e3 if "kernel" in times else None),
        sdpa=dict(backend=sdpa_choice(q, k, v, causal) or "sdpa", check=checks["sdpa"],
                  us=times["sdpa"]["median_ms"] * 1e3 if "sdpa" in times else None))


def from_results(results, head_dims, B: int = 8, n_head: int = 12, T: int = 1024,
                 shape: str = "ANDREA-120M", dtype=torch.bfloat16) -> dict[int, dict[str, Any]]:
    """{head_dim: point} from a GPU head_dim results file (module doc)."""
    if not results or results["provenance"].get("device_kind") != "gpu":
        return {}
    device = results["provenance"]["device"]
    want = {h: choose_backend(h, dtype, "cuda").backend for h in head_dims}
    got: dict[int, dict[str, dict]] = {}
    for r in results["records"]:
        p = r.get("params", {})
        hd = p.get("head_dim")
        if (hd in want and r.get("status") == "ok" and p.get("shape") == shape
                and p.get("series") == f"n_head={n_head}" and p.get("B") == B
                and p.get("T") == T and p.get("n_head", n_head) == n_head):
            got.setdefault(hd, {})[r["backend"]] = r
    out = {}
    for hd, recs in got.items():
        kr, sr = recs.get(want[hd]), recs.get("sdpa")
        if kr is None and sr is None:
            continue
        out[hd] = dict(
            head_dim=hd, device=device, device_kind="gpu", B=B, n_head=n_head, T=T,
            source=str(results.get("_path", "")).split("/")[-1] or "results file",
            kernel=dict(backend=want[hd], version=(kr or {}).get("kernel"),
                        us=kr["median_ms"] * 1e3 if kr else None),
            sdpa=dict(backend=(sr or {}).get("sdpa_choice") or "sdpa",
                      us=sr["median_ms"] * 1e3 if sr else None))
    return out


def every_gpu(results_list, head_dims, B: int = 8, n_head: int = 12, T: int = 1024,
              shape: str = "ANDREA-120M", dtype=torch.bfloat16) -> list[dict[str, Any]]:
    """One row per (GPU file, head_dim) of `from_results` over every committed GPU file (an
    H100's and an H200's both, as data.load("bench_headdim_gpus") gives them): device, head_dim,
    the dispatched kernel, its time and SDPA's (µs), and their ratio. A file never shadows
    another; [] when there is none."""
    rows = []
    for res in results_list or []:
        pts = from_results(res, head_dims, B=B, n_head=n_head, T=T, shape=shape, dtype=dtype)
        for hd in sorted(pts):
            k, s = pts[hd]["kernel"], pts[hd]["sdpa"]
            rows.append({"device": pts[hd]["device"], "head_dim": hd,
                         "kernel": k["version"] or k["backend"], "kernel µs": k["us"],
                         "SDPA µs": s["us"],
                         "kernel / SDPA": (k["us"] / s["us"]) if k["us"] and s["us"] else None})
    return rows


@functools.lru_cache(maxsize=None)
def kernel_facts(head_dim: int, dtype=torch.bfloat16, arch: str = "sm_90", B: int = 8,
                 n_head: int = 12, T: int = 1024, gpu: str = "H200") -> dict:
    """The dispatcher's decision for head_dim on a CUDA device, and the compiled kernel behind it
    (andrea_edu.kernels.head_dim_evidence.compiled: tensor-core instructions in its PTX,
    registers, shared memory, occupancy on `gpu`, a preset of andrea_edu.kernels.occupancy, and
    how its grid for (B, n_head, T) fills that GPU); cached. On failure `error` says why. A `gpu`
    that is not a preset is a one-line ValueError naming the presets, before any compile."""
    evidence.check_gpu_preset(gpu)
    d = choose_backend(head_dim, dtype, "cuda")
    facts = dict(head_dim=head_dim, arch=arch, backend=d.backend, kernel=d.kernel,
                 reason=d.reason, fallbacks=list(d.fallbacks_considered), error=None)
    if d.kernel is not None:
        facts.update(evidence.compiled(d.kernel, head_dim, dtype, arch=arch, B=B, n_head=n_head,
                                       T=T, gpu=gpu))
    return facts


# ------------------------------------------------------------------ a GPU's head_dim file, read
def check_head_dim(hs: int) -> int:
    """hs when this chapter precomputed it (HEAD_DIMS: the head_dims all three kernels compile
    for), else a one-line ValueError naming the allowed values, before any long work."""
    if hs not in HEAD_DIMS:
        raise ValueError(f"hs={hs!r}: this chapter compiles and models head_dim "
                         f"{', '.join(map(str, HEAD_DIMS))} only; set hs to one of them")
    return hs


def measured_rows(results, nh: int, head_dims=HEAD_DIMS, shape: str = "ANDREA-120M") -> list:
    """One dict per (version, head_dim) measured in a head_dim results file (None -> []):
    version, head_dim, ms (median), sdpa_ms, speed (SDPA time / this time: 1 = as fast),
    kernel (the kernel that really ran), B, T, causal, dtype."""
    if not results:
        return []
    by_case: dict[int, dict[str, dict]] = {}
    for r in results["records"]:
        p = r.get("params", {})
        if p.get("shape") == shape and p.get("series") == f"n_head={nh}" and \
                p.get("head_dim") in head_dims:
            by_case.setdefault(p["head_dim"], {})[r["backend"]] = r
    rows = []
    for hd in sorted(by_case):
        recs = by_case[hd]
        sdpa = recs.get("sdpa", {})
        for v in registry.ladder():
            r = recs.get(registry.BACKENDS[v])
            if not r or r.get("status") != "ok" or not sdpa.get("median_ms"):
                continue
            p = r["params"]
            rows.append(dict(version=v, head_dim=hd, ms=r["median_ms"], sdpa_ms=sdpa["median_ms"],
                             speed=sdpa["median_ms"] / r["median_ms"], kernel=r.get("kernel"),
                             B=p.get("B"), T=p.get("T"), causal=p.get("causal"),
                             dtype=p.get("dtype")))
    return rows


def model_gpu(results, model_gpus: dict) -> str | None:
    """The time model's key ("H200", "H100", "RTX 4090") for the GPU a results file came from,
    or None: matched by its device record (kernels.gpus.by_device: the whole device name and
    the SM count it records), never by a part of the name ("NVIDIA H100 PCIe" or "NVIDIA H200
    NVL" are other parts, with other peaks, and get none)."""
    from andrea_edu.kernels.gpus import by_device
    key = by_device(results) if results else None
    return key if key in model_gpus else None


def measured_seconds(rows: list, results, B: int, T: int) -> dict:
    """{(version, head_dim): {GPU name as the model knows it: seconds}} for the rows measured at
    this B and T (the design case), or {}."""
    gpu = model_gpu(results, time_model.GPUS)
    return {(r["version"], r["head_dim"]): {gpu: r["ms"] / 1e3} for r in rows
            if gpu and r["B"] == B and r["T"] == T}


def model_beside_measured(results, nh: int, dtype, head_dims=HEAD_DIMS) -> list:
    """For a GPU head_dim results file: per measured (version, head_dim in head_dims), a dict of
    the time measured beside the model's bracket for that GPU and case (measured / lower edge:
    how far above its bound the kernel landed). With no file, or one from a CPU or a GPU the
    model has no preset for: one line saying so."""
    from andrea_edu.data import where_looked

    if not results:
        return [where_looked("bench_headdim_<gpu>.json")]
    gpu = model_gpu(results, time_model.GPUS)
    device = results["provenance"]["device"]
    if results["provenance"].get("device_kind") == "cpu" or gpu is None:
        return [f"{device}: no time-model preset (presets: {', '.join(time_model.GPUS)})"]
    out: list = []
    for r in measured_rows(results, nh, head_dims=tuple(check_head_dim(h) for h in head_dims)):
        m = time_model.model_bound(r["version"], r["B"], nh, r["T"], r["head_dim"], r["causal"],
                                   dtype, gpu)
        out.append({"device": device, "version": r["version"], "ran": r["kernel"],
                    "head_dim": r["head_dim"], "measured, ms": round(r["ms"], 3),
                    "MODEL, ms": (round(m["lower"] * 1e3, 3), round(m["upper"] * 1e3, 3)),
                    "largest term": m["bound_by"],
                    "measured / lower edge": round(r["ms"] / (m["lower"] * 1e3), 1)})
    return out or [f"{device}: nothing measured at n_head={nh}"]
