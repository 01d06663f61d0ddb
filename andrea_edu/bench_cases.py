"""The benchmark runner, the backends, the head_dim sweep, and run_suite for every suite.

Introduced in the chapter "The configuration mirrors the hardware" (the head_dim sweep). The
`projections` and `layout` suites live in andrea_edu.bench_matmuls; timing, FLOP formulas and
provenance in andrea_edu.bench; the JSON schema and loading in andrea_edu.bench_results.

Every case builds its inputs once, computes the fp32 reference, runs the backend once and checks
it (andrea_edu.bench.check_close) and only then times it. Names: B batch, T seq_len, C d_model,
nh n_head, hs head_dim.
"""
from __future__ import annotations

import sys
import time
import warnings

import torch

from . import bench
from .attention import attention, reference_attention

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
    "layout": "scores: 2*B*nh*T*T*hs (Q K^T); copy: bytes = 2 * numel * element size "
              "(read + write)",
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

    def check(self, case, backend, params, fn, ref, flops=None, extra=None, unavailable=(
            ValueError, ImportError, NotImplementedError)):
        """fn() -> (out, info). Runs it once, checks out against ref, queues it for timing.
        Appends and returns the record (status "ok" = validated; timings come later)."""
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
        self._queue[id(rec)] = (rec, fn)
        return rec

    def time_queued(self):
        """Time the queued (validated) backends together; fill in their timings and TFLOP/s."""
        queue, self._queue = self._queue, {}
        if not queue:
            return
        timings = bench.time_fns({k: fn for k, (_, fn) in queue.items()}, self.device,
                                 self.repeats, self.warmup, self.case_budget_s)
        for k, (rec, _) in queue.items():
            rec.update(timings[k])
            if rec["flops"]:
                rec["tflops"] = rec["flops"] / (rec["median_ms"] * 1e-3) / 1e12

    def run(self, *args, **kw):
        """check() then time_queued(): one backend on its own."""
        rec = self.check(*args, **kw)
        self.time_queued()
        return rec


def _shape_table(device, fast):
    return SHAPES["fast" if fast else device]


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


def _params(**kw):
    kw["dtype"] = str(kw["dtype_t"]).replace("torch.", "")
    return kw


def headdim_suite(r: _Runner, fast: bool, progress: bool, causal: bool = True, head_dims=None,
                  shapes=None, series=("n_head", "d_model"), backends=HEADDIM_BACKENDS):
    """head_dim sweep. Options (the chapter's live re-measurement uses them): head_dims, shapes
    (names in SHAPES), series ("n_head": n_head fixed at 12; "d_model": the preset's d_model
    fixed), backends (a subset of HEADDIM_BACKENDS; "sdpa" is always run, as the baseline)."""
    unknown = set(backends) - set(HEADDIM_BACKENDS)
    if unknown:
        raise ValueError(f"backends {sorted(unknown)} are not in {HEADDIM_BACKENDS}")
    backends = ("sdpa",) + tuple(b for b in backends if b != "sdpa")
    configs = list(_headdim_configs(r.device, fast, head_dims, shapes, series))
    gen = torch.Generator(device=r.device).manual_seed(0)
    with _progress(len(configs) * len(backends), progress, "head_dim") as bar:
        for shape, series, B, T, nh, hs, C in configs:
            case = f"{shape}/{series}/head_dim={hs}"
            params = _params(shape=shape, series=series, B=B, T=T, n_head=nh, head_dim=hs,
                             d_model=C, causal=causal, dtype_t=DTYPE)
            q, k, v = (torch.randn(B, nh, T, hs, generator=gen, device=r.device).to(DTYPE)
                       for _ in range(3))  # 3 x (B, nh, T, hs)
            ref = reference_attention(q, k, v, causal)  # (B, nh, T, hs), fp32 math
            flops = bench.attention_flops(B, nh, T, hs, causal)
            recs = {}
            for backend in backends:
                fn = BACKEND_FNS[backend]
                unavailable = (ValueError, ImportError, NotImplementedError) + (
                    (RuntimeError,) if backend.startswith("sdpa:") else ())
                recs[backend] = r.check(case, backend, params, lambda fn=fn: fn(q, k, v, causal),
                                        ref, flops, unavailable=unavailable)
                bar.update(1)
            r.time_queued()
            base = recs["sdpa"].get("median_ms")
            recs["sdpa"]["sdpa_choice"] = sdpa_choice(q, k, v, causal)  # what "sdpa" ran
            recs["sdpa"]["sdpa_eligible"] = {k: recs[f"sdpa:{k}"]["status"] == "ok"
                                             for k in SDPA_KINDS if f"sdpa:{k}" in recs}
            for rec in recs.values():
                if rec["status"] == "ok" and base:
                    rec["time_ratio_to_sdpa"] = rec["median_ms"] / base
            del q, k, v, ref


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


def _suites():
    from .bench_matmuls import layout_suite, projections_suite
    return {"headdim": headdim_suite, "projections": projections_suite, "layout": layout_suite}


def run_suite(suite: str, device: str = "cpu", fast: bool = False, repeats=None, warmup=None,
              deadline=None, progress: bool = True, strict: bool = True,
              command: str = "", case_budget_s=None, threads=None, **options) -> dict:
    """Run one suite ("headdim", "projections", "layout") and return the results object
    (valid against andrea_edu.bench.SCHEMA); write it with andrea_edu.bench.write_results.
    case_budget_s: seconds of timed rounds per case (fewer repeats for slow backends, at
    least 3; default 2 on a GPU, 10 on a CPU). threads: torch's CPU threads during the run
    (default on a CPU: 1, restored afterwards; on a shared or small machine several threads
    wait for each other and the timings scatter by 10x, one thread measures the arithmetic).
    options go to the suite (headdim_suite: head_dims, shapes, series, backends)."""
    suites = _suites()
    if suite not in suites:
        raise ValueError(f"suite={suite!r} is not one of {tuple(suites)}")
    if device not in ("cpu", "cuda"):
        raise ValueError(f"device={device!r} is not one of 'cpu', 'cuda'")
    repeats = repeats or (3 if fast else (20 if device == "cuda" else 7))
    warmup = 1 if fast and warmup is None else (warmup if warmup is not None else 3)
    if case_budget_s is None:
        case_budget_s = 2.0 if device == "cuda" else 10.0
    r = _Runner(device, repeats, warmup, deadline, strict, case_budget_s)
    before = torch.get_num_threads()
    if threads is None and device == "cpu":
        threads = 1
    try:
        if threads:
            torch.set_num_threads(threads)
        prov = bench.provenance(device, command)  # records the thread count in use
        with torch.no_grad():  # not inference_mode: under it aten.matmul is not decomposed,
            suites[suite](r, fast, progress, **options)  # and count_aten_ops would miss mm/bmm
    finally:
        torch.set_num_threads(before)
    for rec in r.records:
        rec["params"].pop("dtype_t", None)
    return {"schema_version": bench.SCHEMA_VERSION, "suite": suite,
            "provenance": prov,
            "settings": {"dtype": str(DTYPE).replace("torch.", ""), "repeats": repeats,
                         "warmup": warmup, "fast": fast, "case_budget_s": case_budget_s,
                         "timer": "cuda-events" if device == "cuda" else "perf_counter",
                         "shapes": _shape_table(device, fast)},
            "flop_formula": FLOP_FORMULA[suite], "options": {k: list(v) if isinstance(
                v, (tuple, list)) else v for k, v in options.items()}, "records": r.records}
