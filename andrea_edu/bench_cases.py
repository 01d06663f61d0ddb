"""The benchmark suites: head_dim sweep, Q/K/V projections three ways, strided vs contiguous.

Introduced in the chapter "The configuration mirrors the hardware" (headdim); "Three matrices per
head, or one big matrix" reads `projections`, "How CUDA stores the heads" reads `layout`.
Timing, FLOP formulas, provenance and the JSON schema are in `andrea_edu.bench`.

Every case builds its inputs once, computes the fp32 reference, runs the backend once and checks
it (andrea_edu.bench.check_close) and only then times it. Names: B batch, T seq_len, C d_model,
nh n_head, hs head_dim.
"""
from __future__ import annotations

import math
import sys
import time
import warnings
from collections import Counter

import torch

from . import bench
from .attention import attention, reference_attention

# Shapes. GPU: the real ones (ANDREA-120M trains with B=8, T=1024; ANDREA-12M's context is 512).
# CPU: reduced so a 2-core machine finishes in about a minute; fast mode: seconds. The JSON
# records the shapes actually used.
SHAPES = {
    "cuda": {"ANDREA-120M": dict(B=8, T=1024, d_model=768), "ANDREA-12M": dict(B=8, T=512, d_model=384)},
    "cpu": {"ANDREA-120M": dict(B=1, T=512, d_model=768), "ANDREA-12M": dict(B=1, T=256, d_model=384)},
    "fast": {"ANDREA-120M": dict(B=1, T=64, d_model=768), "ANDREA-12M": dict(B=1, T=32, d_model=384)},
}
HEAD_DIMS = tuple(sorted(set(range(8, 129, 8)) | {70, 72}))  # 8..128 step 8, plus 70 (not /8)
HEAD_DIMS_FAST = (16, 32, 64, 70, 72)
N_HEAD = 12  # series 1: n_head fixed at 12, d_model = 12 * head_dim
# series 2: d_model fixed at the preset's (768 / 384), n_head = d_model / head_dim where it divides
DTYPE = torch.bfloat16
SDPA_KINDS = ("flash", "efficient", "cudnn", "math")
HEADDIM_BACKENDS = ("sdpa", *(f"sdpa:{k}" for k in SDPA_KINDS), "reference", "cuda-naive",
                    "cuda-wmma")
FLOP_FORMULA = {
    "headdim": "attention_flops = 4*B*nh*T*T*hs (QK^T and PV, 2 FLOPs per multiply-add), "
               "halved when causal; softmax not counted",
    "projections": "matmul_flops = 2*B*T*C*(3*C): X[B*T, C] @ [C, 3C], however it is split",
    "layout": "scores: 2*B*nh*T*T*hs (Q K^T); copy: bytes = 2 * numel * element size (read + write)",
}


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
    def run(q, k, v, causal):
        out, d = attention(q, k, v, causal=causal, backend=backend, return_decision=True)
        return out, {"ran": d.backend, "kernel": d.kernel, "decision": d.reason,
                     "fallbacks": list(d.fallbacks_considered)}
    return run


def _run_sdpa(q, k, v, causal):
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal), {}


# backend name -> fn(q, k, v, causal) -> (out, info). Tests monkeypatch entries.
BACKEND_FNS = {"sdpa": _run_sdpa, "reference": _run_attention("reference"),
               "cuda-naive": _run_attention("cuda-naive"), "cuda-wmma": _run_attention("cuda-wmma"),
               **{f"sdpa:{k}": _run_sdpa_kind(k) for k in SDPA_KINDS}}


def count_aten_ops(fn) -> dict:
    """{aten op name: calls} that fn() dispatches (e.g. {'mm': 36, ...}): BLAS calls, copies."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class _Count(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.ops = Counter()

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.ops[func.overloadpacket.__name__] += 1
            return func(*args, **(kwargs or {}))

    with _Count() as c:
        fn()
    return dict(sorted(c.ops.items()))


BLAS_OPS = ("mm", "addmm", "bmm", "baddbmm")


def _why(e, caught) -> str:
    """The exception plus the warnings torch emitted just before it (SDPA lists its reasons)."""
    notes = " | ".join(dict.fromkeys(str(w.message).strip() for w in caught))
    return (f"{type(e).__name__}: {e}" + (f" [torch said: {notes}]" if notes else ""))[:2000]


class _Runner:
    """Validate-then-time one case after another, honouring a deadline; collects records."""

    def __init__(self, device, repeats, warmup, deadline, strict):
        self.device, self.repeats, self.warmup = device, repeats, warmup
        self.deadline, self.strict, self.records = deadline, strict, []

    def run(self, case, backend, params, fn, ref, flops=None, extra=None, unavailable=(
            ValueError, ImportError, NotImplementedError)):
        """fn() -> (out, info). Appends and returns the record."""
        rec = {"case": case, "backend": backend, "params": params, "status": "ok", "reason": None,
               "flops": flops, **(extra or {})}
        self.records.append(rec)
        if self.deadline is not None and time.monotonic() > self.deadline:
            rec.update(status="skipped", reason="time budget used up before this case")
            return rec
        try:
            with warnings.catch_warnings(record=True) as caught:  # torch says why, as warnings
                warnings.simplefilter("always")
                out, info = fn()
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
            return rec
        del out
        rec.update(bench.time_fn(fn, self.device, self.repeats, self.warmup))
        if flops:
            rec["tflops"] = flops / (rec["median_ms"] * 1e-3) / 1e12
        return rec


def _shape_table(device, fast):
    return SHAPES["fast" if fast else device]


def _headdim_configs(device, fast):
    """(shape name, series, B, T, nh, hs, d_model) for every point of the sweep."""
    hds = HEAD_DIMS_FAST if fast else HEAD_DIMS
    for shape, s in _shape_table(device, fast).items():
        for hs in hds:
            yield shape, f"n_head={N_HEAD}", s["B"], s["T"], N_HEAD, hs, N_HEAD * hs
        for hs in hds:
            if s["d_model"] % hs == 0:
                yield shape, f"d_model={s['d_model']}", s["B"], s["T"], s["d_model"] // hs, hs, \
                    s["d_model"]


def _params(**kw):
    kw["dtype"] = str(kw["dtype_t"]).replace("torch.", "")
    return kw


def headdim_suite(r: _Runner, fast: bool, progress: bool, causal: bool = True):
    configs = list(_headdim_configs(r.device, fast))
    gen = torch.Generator(device="cpu").manual_seed(0)
    with _progress(len(configs) * len(HEADDIM_BACKENDS), progress, "head_dim") as bar:
        for shape, series, B, T, nh, hs, C in configs:
            case = f"{shape}/{series}/head_dim={hs}"
            params = _params(shape=shape, series=series, B=B, T=T, n_head=nh, head_dim=hs,
                             d_model=C, causal=causal, dtype_t=DTYPE)
            q, k, v = (torch.randn(B, nh, T, hs, generator=gen).to(r.device, DTYPE)
                       for _ in range(3))  # 3 x (B, nh, T, hs)
            ref = reference_attention(q, k, v, causal)  # (B, nh, T, hs), fp32 math
            flops = bench.attention_flops(B, nh, T, hs, causal)
            recs = {}
            for backend in HEADDIM_BACKENDS:
                fn = BACKEND_FNS[backend]
                unavailable = (ValueError, ImportError, NotImplementedError) + (
                    (RuntimeError,) if backend.startswith("sdpa:") else ())
                recs[backend] = r.run(case, backend, params, lambda: fn(q, k, v, causal), ref,
                                      flops, unavailable=unavailable)
                bar.update(1)
            base = recs["sdpa"].get("median_ms")
            recs["sdpa"]["sdpa_choice"] = sdpa_choice(q, k, v, causal)  # what "sdpa" ran
            recs["sdpa"]["sdpa_eligible"] = {k: recs[f"sdpa:{k}"]["status"] == "ok"
                                             for k in SDPA_KINDS}
            for rec in recs.values():
                if rec["status"] == "ok" and base:
                    rec["time_ratio_to_sdpa"] = rec["median_ms"] / base
            del q, k, v, ref


def projections_suite(r: _Runner, fast: bool, progress: bool):
    from . import projections as P

    shape = "ANDREA-120M"
    s = _shape_table(r.device, fast)[shape]
    B, T, C = s["B"], s["T"], s["d_model"]
    n_heads = (12,) if fast else (1, 4, 12, 48)
    gen = torch.Generator(device="cpu").manual_seed(1)
    with _progress(4 * len(n_heads), progress, "projections") as bar:
        for nh in n_heads:
            X = torch.randn(B, T, C, generator=gen).to(r.device, DTYPE)  # (B, T, C)
            Ws = [(torch.randn(C, C, generator=gen) / math.sqrt(C)).to(r.device, DTYPE)
                  for _ in range(3)]  # W_Q, W_K, W_V: 3 x (C, C)
            heads = [P.fused_to_per_head(W, nh) for W in Ws]  # 3 x (nh, C, hs)
            c_attn = P.fused_to_c_attn(*Ws)  # (C, 3C)
            refs = P.project_fused(X.float(), *(W.float() for W in Ws), n_head=nh)  # fp32
            variants = {
                "per-head": lambda: P.project_per_head(X, *heads),
                "per-head-matmuls": lambda: tuple([X @ Wh[h] for h in range(nh)] for Wh in heads),
                "fused": lambda: P.project_fused(X, *Ws, n_head=nh),
                "c-attn": lambda: P.project_c_attn(X, c_attn, n_head=nh),
            }
            params = _params(shape=shape, B=B, T=T, d_model=C, n_head=nh, head_dim=C // nh,
                             dtype_t=DTYPE)
            recs = {}
            for name, fn in variants.items():
                ops = count_aten_ops(fn)
                ref = torch.cat([x.flatten() for x in refs]) if name != "per-head-matmuls" else \
                    torch.cat([x.transpose(0, 1).flatten() for x in refs])
                recs[name] = r.run(
                    f"{shape}/n_head={nh}", name, params,
                    lambda fn=fn: (_flat(fn()), {}), ref, bench.matmul_flops(B * T, 3 * C, C),
                    extra={"blas_calls": sum(ops.get(o, 0) for o in BLAS_OPS), "aten_ops": ops})
                bar.update(1)
            base = recs["fused"].get("median_ms")
            for rec in recs.values():
                if rec["status"] == "ok" and base:
                    rec["time_ratio_to_fused"] = rec["median_ms"] / base


def _flat(out):
    """Projection outputs of any structure -> one flat tensor, in (q, k, v) x head order."""
    parts = []
    for x in out:
        if isinstance(x, (list, tuple)):  # per-head matmuls: nh x (B, T, hs)
            parts.append(torch.stack(list(x), dim=0).flatten())  # (nh*B*T*hs,)
        else:
            parts.append(x.flatten())  # (B, nh, T, hs) -> (B*nh*T*hs,)
    return torch.cat(parts)


def layout_suite(r: _Runner, fast: bool, progress: bool):
    shape = "ANDREA-120M"
    s = _shape_table(r.device, fast)[shape]
    B, T, C, nh = s["B"], s["T"], s["d_model"], N_HEAD
    hs = C // nh
    gen = torch.Generator(device="cpu").manual_seed(2)
    X = torch.randn(B, T, C, generator=gen).to(r.device, DTYPE)  # (B, T, C)
    W_Q, W_K = ((torch.randn(C, C, generator=gen) / math.sqrt(C)).to(r.device, DTYPE)
                for _ in range(2))
    q_view = (X @ W_Q).view(B, T, nh, hs).transpose(1, 2)  # (B, nh, T, hs), strided view
    k_view = (X @ W_K).view(B, T, nh, hs).transpose(1, 2)  # (B, nh, T, hs), strided view
    q_c, k_c = q_view.contiguous(), k_view.contiguous()  # (B, nh, T, hs), contiguous copies
    scores_ref = q_c.float() @ k_c.float().transpose(-2, -1)  # (B, nh, T, T)
    attn_ref = reference_attention(q_c, k_c, k_c, True)  # (B, nh, T, hs)
    elem = q_view.element_size()
    params = _params(shape=shape, B=B, T=T, d_model=C, n_head=nh, head_dim=hs, dtype_t=DTYPE,
                     q_strides=list(q_view.stride()), contiguous_strides=list(q_c.stride()))
    score_flops = 2.0 * B * nh * T * T * hs
    cases = [
        ("scores-contiguous", lambda: q_c @ k_c.transpose(-2, -1), scores_ref, score_flops),
        ("scores-strided", lambda: q_view @ k_view.transpose(-2, -1), scores_ref, score_flops),
        ("copy-contiguous", lambda: q_view.contiguous(), q_c, None),
        ("sdpa-contiguous", lambda: torch.nn.functional.scaled_dot_product_attention(
            q_c, k_c, k_c, is_causal=True), attn_ref, bench.attention_flops(B, nh, T, hs, True)),
        ("sdpa-strided", lambda: torch.nn.functional.scaled_dot_product_attention(
            q_view, k_view, k_view, is_causal=True), attn_ref,
         bench.attention_flops(B, nh, T, hs, True)),
    ]
    with _progress(len(cases), progress, "layout") as bar:
        for name, fn, ref, flops in cases:
            rec = r.run(f"{shape}/n_head={nh}", name, params, lambda fn=fn: (fn(), {}), ref,
                        flops, extra={"aten_ops": count_aten_ops(fn)})
            if name == "copy-contiguous" and rec["status"] == "ok":
                rec["bytes_moved"] = 2 * q_view.numel() * elem
                rec["gb_per_s"] = rec["bytes_moved"] / (rec["median_ms"] * 1e-3) / 1e9
            bar.update(1)
    by = {x["backend"]: x for x in r.records}
    base = by["scores-contiguous"].get("median_ms")
    for rec in r.records:
        if rec["status"] == "ok" and base and rec["backend"].startswith("scores"):
            rec["time_ratio_to_contiguous"] = rec["median_ms"] / base


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


_SUITES = {"headdim": headdim_suite, "projections": projections_suite, "layout": layout_suite}


def run_suite(suite: str, device: str = "cpu", fast: bool = False, repeats=None, warmup=None,
              deadline=None, progress: bool = True, strict: bool = True,
              command: str = "") -> dict:
    """Run one suite ("headdim", "projections", "layout") and return the results object
    (valid against andrea_edu.bench.SCHEMA); write it with andrea_edu.bench.write_results."""
    if suite not in _SUITES:
        raise ValueError(f"suite={suite!r} is not one of {tuple(_SUITES)}")
    if device not in ("cpu", "cuda"):
        raise ValueError(f"device={device!r} is not one of 'cpu', 'cuda'")
    repeats = repeats or (3 if fast else (20 if device == "cuda" else 5))
    warmup = 1 if fast and warmup is None else (warmup if warmup is not None else 3)
    r = _Runner(device, repeats, warmup, deadline, strict)
    with torch.no_grad():  # not inference_mode: under it aten.matmul is not decomposed, and
        _SUITES[suite](r, fast, progress)  # count_aten_ops would not see the mm/bmm calls
    for rec in r.records:
        rec["params"].pop("dtype_t", None)
    return {"schema_version": bench.SCHEMA_VERSION, "suite": suite,
            "provenance": bench.provenance(device, command),
            "settings": {"dtype": str(DTYPE).replace("torch.", ""), "repeats": repeats,
                         "warmup": warmup, "fast": fast,
                         "timer": "cuda-events" if device == "cuda" else "perf_counter",
                         "shapes": _shape_table(device, fast)},
            "flop_formula": FLOP_FORMULA[suite], "records": r.records}
