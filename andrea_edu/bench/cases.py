"""The benchmark runner, the backends, the head_dim sweep, and run_suite for every suite.

Introduced in the chapter "The configuration mirrors the hardware" (the head_dim sweep). The
`projections` and `layout` suites live in andrea_edu.bench.matmuls; timing, FLOP formulas and
provenance in andrea_edu.bench; the JSON schema and loading in andrea_edu.bench.results.

Every case builds its inputs once, computes the fp32 reference, runs the backend once and checks
it (andrea_edu.bench.check_close) and only then times it. Names: B batch, T seq_len, C d_model,
nh n_head, hs head_dim.
"""
from __future__ import annotations

import torch

from andrea_edu.bench import timing as bench
from andrea_edu.attention import reference_attention
from andrea_edu.dispatch import attention
from andrea_edu.kernels import registry
from andrea_edu.bench.runner import (DTYPE, HOST_PATH, N_HEAD, PREPARE, TIMED, _params,
                                     _progress, _Runner, _shape_table)

HEAD_DIMS = tuple(sorted(set(range(8, 129, 8)) | {70, 72}))  # 8..128 step 8, plus 70 (not /8)
HEAD_DIMS_FAST = (16, 32, 64, 70, 72)
SDPA_KINDS = ("flash", "efficient", "cudnn", "math")


def headdim_backends() -> tuple[str, ...]:
    """Every backend the head_dim sweep can time: torch's, the reference and each registered
    kernel's (kernels.registry, baseline first)."""
    return ("sdpa", *(f"sdpa:{k}" for k in SDPA_KINDS), "reference",
            *(s.backend for s in registry.specs()))


def dispatched_backends() -> tuple[str, ...]:
    """attention()'s own choice, timed as a backend of the sweep (never in its default list):
    "auto", and "auto:pad" (attention(..., pad=True): a misaligned head_dim in the padded
    tensor-core kernel) where attention() takes `pad`."""
    import inspect
    pad = "pad" in inspect.signature(attention).parameters
    return ("auto",) + (("auto:pad",) if pad else ())


def _sdpa_backend(kind: str):
    from torch.nn.attention import SDPBackend
    return {"flash": SDPBackend.FLASH_ATTENTION, "efficient": SDPBackend.EFFICIENT_ATTENTION,
            "cudnn": SDPBackend.CUDNN_ATTENTION, "math": SDPBackend.MATH}[kind]


def sdpa_choice(q, k, v, causal: bool) -> str | None:
    """The SDPA backend torch picks for these tensors (torch._fused_sdp_choice), or None."""
    try:
        from torch.nn.attention import SDPBackend
        idx = int(torch._fused_sdp_choice(q, k, v, is_causal=causal))
        return {int(b.value): n.lower() for n, b in SDPBackend.__members__.items()}.get(idx)
    except (AttributeError, RuntimeError, TypeError):
        return None


def _run_sdpa_kind(kind):
    def run(q, k, v, causal):
        from torch.nn.attention import sdpa_kernel
        with sdpa_kernel([_sdpa_backend(kind)]):
            return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal), {}
    return run


def _run_attention(backend):
    name, _, opt = backend.partition(":")   # "auto:pad": attention(..., pad=True)
    kw = {"pad": True} if opt == "pad" else {}

    def run(q, k, v, causal):
        out, d = attention(q, k, v, causal=causal, backend=name, return_decision=True, **kw)
        info = {"ran": d.backend, "kernel": d.kernel, "decision": d.reason,
                "fallbacks": list(d.fallbacks_considered)}
        if q.device.type == "cuda" and d.kernel in registry.versions():
            # what is timed: the kernel the dispatcher chose, prepared once (one cuLaunchKernel
            # per call); the dispatcher's own Python path is reported apart as host time
            from andrea_edu.kernels.launch import prepare_attention
            qc, kc, vc = (t.contiguous() for t in (q, k, v))
            info[TIMED] = prepare_attention(qc, kc, vc, causal, d.kernel)
            info[HOST_PATH] = lambda: attention(q, k, v, causal=causal, backend=name, **kw)
            info[PREPARE] = lambda q2, k2, v2: prepare_attention(
                q2.contiguous(), k2.contiguous(), v2.contiguous(), causal, d.kernel)
        return out, info
    return run


def _run_sdpa(q, k, v, causal):
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal), {}


# backend name -> fn(q, k, v, causal) -> (out, info); a kernel's backend not listed runs
# through attention() (backend_fn). Tests monkeypatch entries.
BACKEND_FNS = {"sdpa": _run_sdpa, "reference": _run_attention("reference"),
               **{f"sdpa:{k}": _run_sdpa_kind(k) for k in SDPA_KINDS}}


def backend_fn(backend: str):
    """The function that runs `backend` in the sweep: BACKEND_FNS's, else attention()'s."""
    return BACKEND_FNS.get(backend) or _run_attention(backend)


def _headdim_configs(device, fast, head_dims=None, shapes=None, series=("n_head", "d_model")):
    """(shape name, series, B, T, nh, hs, d_model) for every point of the sweep."""
    hds = head_dims or (HEAD_DIMS_FAST if fast else HEAD_DIMS)
    for shape, s in _shape_table(device, fast).items():
        if shapes is not None and shape not in shapes:
            continue
        for hs in hds if "n_head" in series else ():
            yield shape, f"n_head={N_HEAD}", s["B"], s["T"], N_HEAD, hs, N_HEAD * hs
        for hs in hds if "d_model" in series else ():
            if s["d_model"] % hs == 0:
                yield shape, f"d_model={s['d_model']}", s["B"], s["T"], s["d_model"] // hs, hs, \
                    s["d_model"]


def headdim_suite(r: _Runner, fast: bool, progress: bool, causal: bool = True, head_dims=None,
                  shapes=None, series=("n_head", "d_model"), backends=None,
                  cold_head_dims=()):
    """head_dim sweep. Options (the chapter's live re-measurement uses them): head_dims, shapes
    (names in SHAPES), series ("n_head": n_head fixed at 12; "d_model": the preset's d_model
    fixed), backends (a subset of headdim_backends() + dispatched_backends(), None: all of
    headdim_backends(); "sdpa" is always run, as the baseline), cold_head_dims: the head_dims
    at which each backend is timed cold too (bench.runner.time_cold: inputs rotated through
    copies that together exceed the last-level cache; the record's "cold" field). Every timing
    without "cold" is warm: the same inputs every call ("cache": "warm")."""
    if head_dims is not None and (
            not isinstance(head_dims, (tuple, list)) or not head_dims or
            any(isinstance(h, bool) or not isinstance(h, int) or h < 1 for h in head_dims)):
        raise ValueError(f"head_dims={head_dims!r}: allowed values are a tuple of positive ints, "
                         f"e.g. (64, 70)")
    allowed = headdim_backends() + dispatched_backends()
    backends = headdim_backends() if backends is None else backends
    unknown = set(backends) - set(allowed)
    if unknown:
        raise ValueError(f"backends {sorted(unknown)} are not in {allowed}")
    backends = ("sdpa",) + tuple(b for b in backends if b != "sdpa")
    configs = list(_headdim_configs(r.device, fast, head_dims, shapes, series))
    gen = torch.Generator(device=r.device).manual_seed(0)
    with _progress(len(configs) * len(backends), progress, "head_dim") as bar:
        for shape, series, B, T, nh, hs, C in configs:
            case = f"{shape}/{series}/head_dim={hs}"
            params = _params(shape=shape, series=series, B=B, T=T, n_head=nh, head_dim=hs,
                             d_model=C, causal=causal, dtype_t=DTYPE)
            r._params_of_case = params
            try:   # the case's own set-up is inside the guard too (a broken context fails here)
                q, k, v = (torch.randn(B, nh, T, hs, generator=gen, device=r.device).to(DTYPE)
                           for _ in range(3))  # 3 x (B, nh, T, hs)
                ref = reference_attention(q, k, v, causal)  # (B, nh, T, hs), fp32 math
            except RuntimeError as e:
                r.fail_case(case, backends, f"inputs or reference failed: {type(e).__name__}: {e}")
                bar.update(len(backends))
                continue
            flops = bench.attention_flops(B, nh, T, hs, causal)
            recs = {}
            for backend in backends:
                fn = backend_fn(backend)
                unavailable = (ValueError, ImportError, NotImplementedError) + (
                    (RuntimeError,) if backend.startswith("sdpa:") else ())
                recs[backend] = r.check(case, backend, params, lambda fn=fn: fn(q, k, v, causal),
                                        ref, flops, unavailable=unavailable)
                bar.update(1)
            cold_fns = {b: (backend_fn(b), recs[b].get(PREPARE)) for b in backends
                        if hs in cold_head_dims and recs[b]["status"] == "ok"}
            for rec in recs.values():
                rec.pop(PREPARE, None)
            r.time_queued()
            for b, (fn, prep) in cold_fns.items():
                if recs[b]["status"] == "ok" and r.broken is None:
                    r.time_cold(recs[b], q, k, v, fn, prep, causal)
            base = recs["sdpa"].get("median_ms")
            recs["sdpa"]["sdpa_choice"] = sdpa_choice(q, k, v, causal) if r.broken is None \
                else None  # what "sdpa" ran
            recs["sdpa"]["sdpa_eligible"] = {k: recs[f"sdpa:{k}"]["status"] == "ok"
                                             for k in SDPA_KINDS if f"sdpa:{k}" in recs}
            for rec in recs.values():
                if rec["status"] == "ok" and base:
                    rec["time_ratio_to_sdpa"] = rec["median_ms"] / base
            del q, k, v, ref


