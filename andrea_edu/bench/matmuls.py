"""Matmul-shaped benchmarks: Q/K/V projections three ways, and strided vs contiguous heads.

Introduced for the chapters "Three matrices per head, or one big matrix" (`projections`: per-head
36 matmuls vs fused 3 vs GPT-2's single c_attn, and how many BLAS calls each really makes) and
"How CUDA stores the heads" (`layout`: q @ k^T on the transposed view vs on a contiguous copy,
what .contiguous() costs, SDPA on both). Run through andrea_edu.bench.cases.run_suite; the
runner validates before it times. The same chapter's live sweep (`projection_sweep` over
`valid_head_pairs`, the three `projection_ways`) runs on the reader's machine: it counts the BLAS
calls each way really dispatches, checks the result against the fused fp32 one, and only then
times it. `projection_roofline` is a calculation, not a measurement: one projection against a
GPU's published peak and bandwidth (kernels.gpus), and the B*T from which it is compute-bound.
Names: B batch, T seq_len, C d_model, nh n_head, hs head_dim.
"""
from __future__ import annotations

import math

import torch

from andrea_edu import projections as P
from andrea_edu.attention import reference_attention
from andrea_edu.bench import timing as bench
from andrea_edu.bench.aten import BLAS_OPS, blas_calls, count_aten_ops
from andrea_edu.bench.runner import DTYPE, N_HEAD, _params, _progress, _Runner, _shape_table
from andrea_edu.config import divisors
from andrea_edu.kernels import gpus


def projections_suite(r: _Runner, fast: bool, progress: bool):
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
            refs = P.project_fused(X.float(), Ws[0].float(), Ws[1].float(), Ws[2].float(),
                                   n_head=nh)  # fp32
            variants = {
                "per-head": lambda: P.project_per_head(X, *heads),
                "per-head-matmuls": lambda: tuple([X @ Wh[h] for h in range(nh)] for Wh in heads),
                "fused": lambda: P.project_fused(X, Ws[0], Ws[1], Ws[2], n_head=nh),
                "c-attn": lambda: P.project_c_attn(X, c_attn, n_head=nh),
            }
            params = _params(shape=shape, B=B, T=T, d_model=C, n_head=nh, head_dim=C // nh,
                             dtype_t=DTYPE)
            recs = {}
            for name, fn in variants.items():
                ops = count_aten_ops(fn)
                ref = torch.cat([x.flatten() for x in refs]) if name != "per-head-matmuls" else \
                    torch.cat([x.transpose(0, 1).flatten() for x in refs])
                recs[name] = r.check(
                    f"{shape}/n_head={nh}", name, params,
                    lambda fn=fn: (_flat(fn()), {}), ref, bench.matmul_flops(B * T, 3 * C, C),
                    extra={"blas_calls": sum(ops.get(o, 0) for o in BLAS_OPS), "aten_ops": ops})
                bar.update(1)
            r.time_queued()
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
    # B >= 2: with B = 1 the (B, nh) axes of the transposed view fold into one batch stride and
    # torch's batched matmul needs no copy; ANDREA trains with B = 8.
    B, T, C, nh = max(2, s["B"]), s["T"], s["d_model"], N_HEAD
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
            r.check(f"{shape}/n_head={nh}", name, params, lambda fn=fn: (fn(), {}), ref, flops,
                    extra={"aten_ops": count_aten_ops(fn)})
            bar.update(1)
        r.time_queued()
    by = {x["backend"]: x for x in r.records}
    if by["copy-contiguous"]["status"] == "ok":
        rec = by["copy-contiguous"]
        rec["bytes_moved"] = 2 * q_view.numel() * elem
        rec["gb_per_s"] = rec["bytes_moved"] / (rec["median_ms"] * 1e-3) / 1e9
    base = by["scores-contiguous"].get("median_ms")
    for rec in r.records:
        if rec["status"] == "ok" and base and rec["backend"].startswith("scores"):
            rec["time_ratio_to_contiguous"] = rec["median_ms"] / base


# ------------------------------------------- the live sweep of "Three matrices per head"
def projection_ways(X: torch.Tensor, proj: P.Projections) -> dict:
    """{way: fn() -> (q, k, v) as [B, nh, T, hs]} for the three ways, weights prepared up front."""
    heads = proj.per_head()  # 3 x (nh, C, hs)
    c_attn = proj.c_attn  # (C, 3C)
    nh = proj.n_head
    return {
        "per-head": lambda: P.project_per_head(X, *heads),
        "fused": lambda: P.project_fused(X, proj.W_Q, proj.W_K, proj.W_V, nh),
        "c_attn": lambda: P.project_c_attn(X, c_attn, nh),
    }


def check_rows(B: int, T: int) -> int:
    """B * T, the rows a projection multiplies; ValueError naming B or T unless both are ints >= 1."""
    for name, v in (("B", B), ("T", T)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"{name} must be an int >= 1 (B*T rows are projected), got {v!r}")
    return B * T


def projection_sweep(n_heads, d_model: int = 768, B: int = 1, T: int = 256, device: str = "cpu",
                     dtype=None, repeats: int = 5, seed: int = 0,
                     threads: int | None = None) -> dict:
    """Per n_head: {way: {"blas_calls", "min_ms", "median_ms", "max_rel_err"}}.

    Each way is validated against the fused fp32 result (relative error <= 1e-5 in fp32,
    1e-2 in half precision) before it is timed; a wrong result raises RuntimeError. The three
    ways are then timed taking turns (``bench.time_fns``: one call each per round, `repeats`
    rounds after a warm-up round), so that load from other processes hits all three alike; the
    fastest call is the robust figure on a shared machine.
    dtype: float32 on a CPU, bfloat16 on a GPU by default.
    threads: CPU threads torch may use while timing (restored afterwards); None leaves torch's
    setting. One thread is steadier on a busy machine, where idle-waiting BLAS threads of one
    program and the work of another compete for the same cores.
    """
    if device not in ("cpu", "cuda"):
        raise ValueError(f"device must be 'cpu' or 'cuda', got {device!r}")
    check_rows(B, T)
    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
        raise ValueError(f"repeats must be an int >= 1, got {repeats!r}")
    if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int)
                                or threads < 1):
        raise ValueError(f"threads must be None or an int >= 1, got {threads!r}")
    dtype = dtype or (torch.float32 if device == "cpu" else torch.bfloat16)
    tol = 1e-5 if dtype == torch.float32 else 1e-2
    g = torch.Generator().manual_seed(seed)
    X32 = torch.randn(B, T, d_model, generator=g)  # (B, T, C)
    saved_threads = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    try:
        return _sweep(n_heads, d_model, X32, X32.to(device, dtype), device, dtype, tol, repeats,
                      seed)
    finally:
        torch.set_num_threads(saved_threads)


def _sweep(n_heads, d_model, X32, X, device, dtype, tol, repeats, seed) -> dict:
    out = {}
    with torch.no_grad():
        for nh in n_heads:
            proj32 = P.Projections.random(d_model, nh, seed=seed)
            ref = P.project_fused(X32, proj32.W_Q, proj32.W_K, proj32.W_V, nh)  # fp32, CPU
            W_Q, W_K, W_V, W_O = (W.to(device, dtype) for W in (
                proj32.W_Q, proj32.W_K, proj32.W_V, proj32.W_O))
            proj = P.Projections(W_Q, W_K, W_V, W_O, n_head=nh)
            ways = projection_ways(X, proj)
            res = {}
            for way, fn in ways.items():
                got = fn()
                err = max(((a.float().cpu() - b).norm() / b.norm()).item()
                          for a, b in zip(got, ref))
                if not err <= tol:
                    raise RuntimeError(f"{way} at n_head={nh}: relative error {err:.2e} > {tol:g}; "
                                       f"not timed")
                res[way] = {"blas_calls": blas_calls(fn), "max_rel_err": err}
            for way, t in bench.time_fns(ways, device, repeats=repeats, warmup=1,
                                         threads=None).items():   # the threads set above
                res[way].update({k: t[k] for k in (
                    "min_ms", "median_ms", "p25_ms", "p75_ms", "iqr_over_median", "repeats",
                    "quality_ok", "quality_reason")})
            out[nh] = res
    return out


def sweep_at(sweep: dict, n_head: int) -> dict:
    """`projection_sweep`'s measurements at n_head, {way: {...}}; ValueError naming the n_head
    values the sweep measured when it did not measure this one."""
    if isinstance(n_head, bool) or n_head not in sweep:
        raise ValueError(f"n_head={n_head!r} was not measured by this sweep; it measured n_head in "
                         f"{', '.join(map(str, sorted(sweep)))}")
    return sweep[n_head]


def valid_head_pairs(d_model: int = 768, max_n_head: int = 96) -> list[tuple[int, int]]:
    """(n_head, head_dim) with n_head * head_dim == d_model, n_head <= max_n_head."""
    return [(nh, d_model // nh) for nh in divisors(d_model) if nh <= max_n_head]


# ---------------------------------------------------------------- the roofline rule (a calculation)
FALLBACK_ROOFLINE_GPU = "NVIDIA H200"


def roofline_gpu(gpu: str | None = None) -> tuple[str, str]:
    """(torch's device name, why that GPU) for projection_roofline: `gpu` as given (a
    kernels.gpus key such as "H100", or a PUBLISHED_PEAK name such as "NVIDIA H100 80GB HBM3");
    None: the GPU of the committed GPU projections measurement when the book cites its peak
    (matched by its device record, kernels.gpus.by_device), else FALLBACK_ROOFLINE_GPU, said
    so. Another value: a one-line ValueError naming the allowed ones."""
    if gpu is not None:
        if gpu in gpus.GPUS and gpus.GPUS[gpu]["name"] in gpus.PUBLISHED_PEAK:
            return gpus.GPUS[gpu]["name"], "asked for"
        if gpu in gpus.PUBLISHED_PEAK:
            return gpu, "asked for"
        keys = [k for k, g in gpus.GPUS.items() if g["name"] in gpus.PUBLISHED_PEAK]
        raise ValueError(f"gpu={gpu!r} has no published peak in the book; allowed: "
                         f"{', '.join(map(repr, keys + list(gpus.PUBLISHED_PEAK)))} or None")
    try:
        from andrea_edu.bench.results import load_results
        measured = load_results("projections", device="gpu", errors="warn")
    except Exception:  # an unreadable file is reported where the chapter loads it
        measured = None
    key = gpus.by_device(measured) if measured else None
    if key and gpus.GPUS[key]["name"] in gpus.PUBLISHED_PEAK:
        return gpus.GPUS[key]["name"], "the GPU of the committed measurement"
    return FALLBACK_ROOFLINE_GPU, ("no committed GPU measurement with a cited peak: the "
                                   "H200's data sheet, for illustration")


def projection_roofline(rows: int, d_model: int = 768, gpu: str | None = None,
                        bytes_per_element: int = 2) -> dict:
    """A calculation (no measurement): one [rows, d_model] x [d_model, d_model] projection in
    bf16 against `gpu`'s published peak and bandwidth (None: roofline_gpu's choice, the
    committed GPU measurement's device when the book cites its peak; "gpu_why" says which).
    Returns its FLOPs, the time at peak compute, the time to move its bytes once at full
    bandwidth, and the smallest `rows` (= B*T) at which the compute time exceeds the memory
    time, i.e. the matmul becomes compute-bound."""
    gpu, why = roofline_gpu(gpu)
    spec = gpus.PUBLISHED_PEAK[gpu]
    peak, bw = spec["bf16_tflops"] * 1e12, spec["hbm_tb_per_s"] * 1e12
    flops = 2.0 * rows * d_model * d_model
    moved = bytes_per_element * (2 * rows * d_model + d_model * d_model)  # X, Y and W once
    # compute-bound when 2 M C^2 / peak >= b (2 M C + C^2) / bw, i.e. M >= b C bw' / (2 C - 2 b bw')
    ridge = peak / bw  # FLOPs per byte at which compute and memory take equally long
    denom = 2 * d_model - 2 * bytes_per_element * ridge
    min_rows = None if denom <= 0 else int(-(-bytes_per_element * d_model * ridge // denom))
    return {"gpu": gpu, "gpu_why": why, "source": spec["source"], "rows": rows, "flops": flops,
            "compute_s": flops / peak, "memory_s": moved / bw, "ridge_flops_per_byte": ridge,
            "compute_bound_from_rows": min_rows}
