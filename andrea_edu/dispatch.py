"""The dispatcher: one entry point for every attention backend, and which one ran and why.

Introduced in the chapter "One kernel, many heads"; the dispatcher's decisions are drawn in
"The configuration mirrors the hardware" (tile alignment, head_dim=72).

    out = attention(q, k, v, causal=False, backend="auto")            # (B, nh, T, hs)
    out, decision = attention(q, k, v, return_decision=True)
    decision = choose_backend(head_dim=72, dtype=torch.float16, device_type="cuda")
        choose_backend(head_dim, dtype, device_type, backend="auto", sm=None, requires_grad=False,
                       pad=False) -> Decision(backend, reason, fallbacks_considered, kernel,
                                              requested, notes)
    attention(..., pad=True): a head_dim that is not one of cuda-flash's widths runs in the
        padded tensor-core kernel (cuda-flash-padded: 72 inside 80, zeros in the pad) instead of
        falling back to cuda-wmma / cuda-naive. Default False: the kernel set the source text
        describes (tensor-core kernels only at their own widths, anything else falls back, and
        the Decision says so), so that padding, which spends (padded - real) / padded of the
        tensor-core work on zeros, is never chosen silently; PyTorch's flash kernel pads
        without asking. With pad=False, a fallback's notes say what pad=True would run.
    compare_to_reference(out, q, k, v, causal) -> dict(max_abs_err, atol, rtol, passed)
        against `attention.reference_attention`, the fp32 reference every backend is checked on
    TOLERANCE[dtype] -> (atol, rtol)
    Backend("auto", pad=False): attention() with one backend fixed, a callable (q, k, v, causal)
        that tells its name; what a model runs: `AndreaModel(cfg, attn=Backend("auto"))`
        (the model's default is the plain `reference_attention`, which needs no dispatcher)

q, k, v: tensors of shape [B, nh, T, hs] (batch, n_head, seq_len, head_dim), same shape,
dtype and device. Allowed dtypes: float32, float16, bfloat16. Output: same shape and dtype as q.
Every backend computes in fp32 (the CUDA kernels accumulate in fp32) and rounds once at the end.

Backends (BACKENDS):
  reference   andrea_edu.attention.reference_attention: plain torch, q @ k^T / sqrt(hs), causal
              mask, softmax, @ v, in fp32.
  sdpa        torch.nn.functional.scaled_dot_product_attention.
  emulator    andrea_edu.kernels.emulator: the CUDA kernels' grid, blocks, tiles and online softmax,
              run block by block on the CPU (the decomposition of the kernel the GPU dispatcher
              would choose on an sm_80+ GPU: v3, else v2, else v1).
  cpu-sim     andrea_edu.kernels.cpu_sim: that same kernel's .cu compiled by g++ and run on the
              CPU by the host simulator (one fiber per CUDA thread, the launcher's grid, threads
              and shared memory); needs a C++ compiler, and takes seconds, not microseconds.
  cuda-naive  kernels/attention_v1.cu: one block per (batch, head), any head_dim <= V1_MAX_HEAD_DIM.
  cuda-wmma   kernels/attention_v2_wmma.cu: tensor cores (WMMA 16x16x16), fp16/bf16 only,
              head_dim in V2_HEAD_DIMS; anything else falls back to cuda-naive and says so.
  cuda-flash  kernels/attention_v3_flash.cu: FlashAttention-2 style (mma.sync m16n8k16, S/P/O
              in registers, cp.async double buffer), fp16/bf16, head_dim in V3_HEAD_DIMS,
              sm_80+; anything else falls back to cuda-wmma, then cuda-naive, and says so.
  auto        CPU tensors -> reference; CUDA tensors -> cuda-flash when eligible, else
              cuda-wmma, else cuda-naive, else sdpa (head_dim above V1_MAX_HEAD_DIM). The kernels and the emulator are
              forward-only: when autograd needs the result, auto runs sdpa (GPU) or reference
              (CPU), and asking for a kernel or the emulator raises.

Layout: the CUDA kernels read contiguous [B, nh, T, hs] memory. A non-contiguous input (e.g.
the view `q.view(B, T, nh, hs).transpose(1, 2)`) is copied with `.contiguous()` before a CUDA or
emulator backend runs, and the decision's `notes` say so (the copy costs one read and one write
of the tensor; the layout chapter measures it). reference and sdpa accept any strides.
The low-level launcher `andrea_edu.kernels.launch.launch_attention` does not copy: it raises instead.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import torch

from andrea_edu.attention import reference_attention
from andrea_edu.kernels import registry
from andrea_edu.kernels.limits import DTYPES, _dtype_name, validate_qkv

_TORCH_BACKENDS = ("auto", "reference", "sdpa", "emulator", "cpu-sim")


def backends() -> tuple[str, ...]:
    """Every backend name: torch's and the emulator, then one per registered kernel."""
    return _TORCH_BACKENDS + tuple(s.backend for s in registry.specs())


BACKENDS = backends()  # at import: auto, reference, sdpa, emulator, cpu-sim, then one per kernel


# Agreement with the fp32 reference, by input dtype: |out - ref| <= atol + rtol * |ref|.
# fp32: the kernels' dot products and exp() round differently from torch's matmul (~1e-6 seen;
#   1e-4 leaves room for long rows). fp16: the output is rounded to 11 significant bits
#   (unit roundoff 4.9e-4) and v2 also rounds P to fp16: 2e-3 is about 4 roundoffs.
# bf16: 8 significant bits (unit roundoff 3.9e-3) for the output and for v2's P: 2e-2 is about
#   5 roundoffs. The reference gets the same (already rounded) inputs, so input rounding cancels.
TOLERANCE = {torch.float32: (1e-4, 1e-4), torch.float16: (2e-3, 2e-3),
             torch.bfloat16: (2e-2, 2e-2)}  # dtype -> (atol, rtol)


def compare_to_reference(out, q, k, v, causal: bool) -> dict:
    """max abs error of `out` against the fp32 reference, and whether it is within TOLERANCE."""
    ref = reference_attention(q.float(), k.float(), v.float(), causal)  # fp32, not rounded
    atol, rtol = TOLERANCE[q.dtype]
    diff = (out.float() - ref).abs()
    ok = bool(torch.isfinite(out.float()).all() and (diff <= atol + rtol * ref.abs()).all())
    return dict(max_abs_err=float(diff.max()), atol=atol, rtol=rtol, passed=ok)


@dataclass(frozen=True)
class Decision:
    """Which backend ran and why: data the book displays (chapter "The configuration mirrors
    the hardware").

    backend: the backend that runs ("reference", "sdpa", "emulator", "cuda-naive", "cuda-wmma",
        "cuda-flash").
    reason: one sentence saying why.
    fallbacks_considered: ("cuda-wmma: head_dim=72 is not a multiple of 16", ...), the backends
        that were preferred but could not run, each with its reason.
    kernel: "v1", "v2" or "v3" for the CUDA and emulator backends (the kernel run or emulated),
        else None.
    requested: the backend asked for.
    notes: side remarks, e.g. a non-contiguous input that was copied.
    """
    backend: str
    reason: str
    fallbacks_considered: tuple = ()
    kernel: str | None = None
    requested: str = "auto"
    notes: tuple = field(default=())


def choose_backend(head_dim: int, dtype, device_type: str, backend: str = "auto",
                   sm: int | None = None, requires_grad: bool = False,
                   pad: bool = False) -> Decision:
    """The dispatcher's decision, without tensors (pure; probes no hardware).

    sm: the GPU's compute capability as 10*major + minor (e.g. 90), when known; it only
    matters below 80 (no cuda-flash, no bfloat16 tensor cores): sm=None decides for a current
    (sm_80+) GPU. attention() passes the tensors' GPU.
    requires_grad: autograd must flow through the result. The kernels and the emulator are
    forward-only: auto then picks sdpa (GPU) or reference (CPU), and asking for them raises.
    pad: run a head_dim no tensor-core kernel is compiled for in the next width one is
    (cuda-flash-padded; the reason names the padded width) instead of falling back. Asking for
    backend="cuda-flash-padded" pads whatever `pad` says. Default False (module docstring).

    Raises ValueError for an unknown backend, dtype, device_type, a head_dim that is not a
    positive int (True is not 1), an sm that is not an int like 90, a requires_grad that is not
    a bool, a CUDA backend asked for on the CPU (with the fix: backend="emulator"), and the
    emulator asked for a head_dim no kernel runs.
    """
    if backend not in backends():
        raise ValueError(f"backend={backend!r} is not one of {backends()}")
    if dtype not in DTYPES:
        raise ValueError(f"dtype={dtype} is not supported; allowed: "
                         f"{[_dtype_name(d) for d in DTYPES]}")
    if not isinstance(head_dim, int) or isinstance(head_dim, bool) or head_dim < 1:
        raise ValueError(f"head_dim={head_dim!r} must be a positive int")
    if device_type not in ("cpu", "cuda"):
        raise ValueError(f"device_type={device_type!r} is not supported; allowed: 'cpu', 'cuda'")
    if sm is not None and (not isinstance(sm, int) or isinstance(sm, bool) or not 10 <= sm < 1000):
        raise ValueError(f"sm={sm!r} must be None or the compute capability as an int "
                         f"10*major + minor, e.g. 90 for sm_90")
    if not isinstance(requires_grad, bool):
        raise ValueError(f"requires_grad={requires_grad!r} must be True or False")
    if not isinstance(pad, bool):
        raise ValueError(f"pad={pad!r} must be True or False")
    gpu_sm = sm if device_type == "cuda" else None
    kw: dict[str, Any] = dict(requested=backend)

    if backend in ("reference", "sdpa"):
        return Decision(backend, f"backend={backend!r} was requested", **kw)
    if requires_grad:
        if backend != "auto":
            raise ValueError(f"backend={backend!r} is forward-only (no autograd), but the inputs "
                             f"require grad: call it under torch.no_grad(), or use "
                             f"backend='reference' or 'sdpa' to train")
        if device_type == "cuda":
            return Decision("sdpa", "the inputs require grad and andrea_edu's kernels are "
                            "forward-only: ran torch's sdpa (differentiable)",
                            tuple(f"{s.backend}: forward-only" for s in registry.preferred()),
                            **kw)
    if backend == "cpu-sim":   # the .cu itself on the CPU: the kernel an sm_80+ GPU would run
        spec, passed = registry.walk(head_dim, dtype, pad=pad)
        if spec is None:
            raise ValueError(f"backend='cpu-sim' cannot run head_dim={head_dim}: no kernel "
                             f"does ({passed[-1][1]}); use backend='reference' or 'sdpa'")
        return Decision("cpu-sim", f"backend='cpu-sim' was requested: {spec.version}'s CUDA C++ "
                        f"({spec.source}) compiled by the host C++ compiler and run block by "
                        f"block on the CPU", tuple(f"{s.backend}: {why}" for s, why in passed),
                        kernel=spec.version, **kw)
    if backend == "emulator":
        spec, passed = registry.walk(head_dim, dtype, gpu_sm, pad=pad)
        previous = (passed[-1][0].backend, passed[-1][1]) if passed else None
        if spec is None:
            raise ValueError(f"backend='emulator' cannot run head_dim={head_dim}: no kernel "
                             f"does ({passed[-1][1]}); use backend='reference' or 'sdpa'")
        return Decision("emulator", f"backend='emulator' was requested; emulating "
                        f"{spec.version} ({spec.emulating(previous)})", kernel=spec.version, **kw)
    if backend.startswith("cuda") and device_type != "cuda":
        raise ValueError(f"backend={backend!r} needs CUDA tensors, got device_type="
                         f"{device_type!r}; move the tensors with .cuda(), or use "
                         f"backend='emulator' to run the kernels' grid on the CPU")
    if backend == "auto" and device_type == "cpu":
        return Decision("reference", "the tensors are on the CPU, where the CUDA kernels cannot "
                        "run: ran the plain-torch reference (backend='emulator' runs the kernels' "
                        "grid on the CPU instead)", **kw)

    # auto: every kernel, newest first; a kernel asked for by name: it, then the older ones.
    spec, passed = registry.walk(head_dim, dtype, sm, None if backend == "auto" else backend,
                                 pad=pad)
    considered = tuple(f"{s.backend}: {why}" for s, why in passed)
    if spec is not None:
        previous = (passed[-1][0].backend, passed[-1][1]) if passed else None
        padded, _ = (None, None) if pad or spec.pads else registry.walk(
            head_dim, dtype, sm, None if backend == "auto" else backend, pad=True)
        if padded is not None and padded.pads:          # what pad=True would have run instead
            kw["notes"] = (f"pad=True would run {padded.backend}: "
                           f"{padded.chosen(head_dim, dtype, sm, None).split(': ran ')[0]}",)
        return Decision(spec.backend, spec.chosen(head_dim, dtype, sm, previous), considered,
                        kernel=spec.version, **kw)
    if backend != "auto":
        raise ValueError(f"backend={backend!r} cannot run head_dim={head_dim}: "
                         f"{'; '.join(considered)}; use backend='sdpa' or 'auto'")
    return Decision("sdpa", "; ".join(why for _, why in passed) +
                    ": no andrea_edu kernel fits, ran torch's sdpa", considered, **kw)


def _sdpa(q, k, v, causal):
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)


def attention(q, k, v, causal: bool = False, backend: str = "auto",
              return_decision: bool = False, pad: bool = False):
    """Scaled dot-product attention over [B, nh, T, hs]; see the module docstring (pad: run a
    misaligned head_dim in the padded tensor-core kernel instead of falling back).

    Returns out (B, nh, T, hs), or (out, Decision) when return_decision=True.
    """
    if not isinstance(causal, bool):
        raise TypeError(f"causal={causal!r} must be True or False")
    if not isinstance(return_decision, bool):  # 'no' is a true value: never read it as True
        raise TypeError(f"return_decision={return_decision!r} must be True or False")
    if backend not in backends():
        raise ValueError(f"backend={backend!r} is not one of {backends()}")
    B, nh, T, hs = validate_qkv(q, k, v)
    dev = q.device.type
    if dev not in ("cpu", "cuda"):
        raise ValueError(f"q.device={q.device} is not supported; allowed: cpu, cuda")
    sm = None
    if dev == "cuda":
        major, minor = torch.cuda.get_device_capability(q.device)
        sm = 10 * major + minor
    grad = torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v))
    decision = choose_backend(hs, q.dtype, dev, backend, sm, grad, pad)

    if decision.kernel is not None:                   # the emulator or a CUDA kernel
        copied = [n for n, t in (("q", q), ("k", k), ("v", v)) if not t.is_contiguous()]
        if copied:
            q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
            decision = replace(decision, notes=decision.notes + (
                f"{', '.join(copied)} not contiguous: copied with .contiguous() before the "
                f"kernel (one extra read and write of each)",))
    align = registry.get(decision.kernel).row_alignment if decision.kernel else 0
    if align and decision.backend not in ("emulator", "cpu-sim"):
        moved = [n for n, t in (("q", q), ("k", k), ("v", v)) if t.data_ptr() % align]
        if moved:                                  # v3's cp.async copies 16 bytes from row starts
            q, k, v = (t.clone() if t.data_ptr() % align else t for t in (q, k, v))
            decision = replace(decision, notes=decision.notes + (
                f"{', '.join(moved)} not {align}-byte aligned: cloned before {decision.backend} "
                f"(cp.async moves {align}-byte chunks)",))

    if decision.backend == "reference":
        out = reference_attention(q, k, v, causal)
    elif decision.backend == "sdpa":
        out = _sdpa(q, k, v, causal)
    elif decision.backend == "cpu-sim":
        from andrea_edu.kernels import cpu_sim
        assert decision.kernel is not None
        out = cpu_sim.run_attention(q.cpu(), k.cpu(), v.cpu(), causal, decision.kernel).to(q.device)
    elif decision.backend == "emulator":
        from andrea_edu.kernels import emulator
        out, _ = emulator.emulate(q, k, v, causal=causal, kernel=decision.kernel, trace=False)
    else:
        from andrea_edu.kernels import launch
        assert decision.kernel is not None  # choose_backend names every cuda-* decision's kernel
        out = launch.launch_attention(q, k, v, causal=causal, version=decision.kernel)
    return (out, decision) if return_decision else out


@dataclass(frozen=True)
class Backend:
    """attention() with one backend fixed: a callable (q, k, v, causal=False) -> out that a model
    runs in every layer (`AndreaModel(cfg, attn=Backend("auto"))`) and whose `name` labels it.

    backend: a name of `backends()`; pad: as attention()'s. An unknown name, or a pad that is
    not a bool, is refused here, with one line naming the allowed values, before any model is
    built. `with_decision(q, k, v, causal)` -> (out, Decision): the same call, saying which
    backend ran and why (the pipeline's steps show it).
    """
    backend: str = "auto"
    pad: bool = False

    def __post_init__(self) -> None:
        if self.backend not in backends():
            raise ValueError(f"backend={self.backend!r} is not one of {backends()}")
        if not isinstance(self.pad, bool):
            raise ValueError(f"pad={self.pad!r} must be True or False")

    @property
    def name(self) -> str:
        """The backend's name, "+pad" when it pads ("auto", "cuda-flash+pad")."""
        return self.backend + ("+pad" if self.pad else "")

    def __call__(self, q, k, v, causal: bool = False):
        return attention(q, k, v, causal=causal, backend=self.backend, pad=self.pad)

    def with_decision(self, q, k, v, causal: bool = False):
        return attention(q, k, v, causal=causal, backend=self.backend, pad=self.pad,
                         return_decision=True)
