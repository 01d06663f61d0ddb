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
"""
from __future__ import annotations

import functools
from typing import Any

import torch

from andrea_edu.attention import attention, choose_backend, compare_to_reference
from andrea_edu.bench import timing
from andrea_edu.kernels import head_dim_evidence as evidence


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
