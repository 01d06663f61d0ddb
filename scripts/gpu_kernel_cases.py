"""Run each CUDA kernel once, through andrea_edu.dispatch.attention(), for a tool that watches
the process: compute-sanitizer (memcheck, racecheck, synccheck, initcheck) or Nsight Compute (ncu).

    python scripts/gpu_kernel_cases.py small      v1, v2, v3 at small shapes: tails (T not a
                                                  multiple of 16 or 64), B=1, one head, causal
                                                  and not, fp16 and bf16 (and fp32 on v1)
    python scripts/gpu_kernel_cases.py headline   v2 then v3 at B=8, T=1024, nh=12, hs=64,
                                                  causal, bf16 (the book's headline case)
    ... small --version v2                        only one kernel version's cases (the suite
                                                  runs one process per version and tool: a
                                                  sticky error in one cannot poison another)
    python scripts/gpu_kernel_cases.py kernels    two lines: the registered kernels' backends,
                                                  then their versions (no GPU needed)

The inputs are drawn on the host and copied to the GPU (a cudaMemcpy): compute-sanitizer's
initcheck, which sees only the kernels its --kernel-name filter lets through, then knows q, k
and v are initialised (drawn by torch kernels on the GPU, outside the filter, they would read as
uninitialised).

Each case's output is compared with the fp32 reference (so a tool that perturbs the run shows
up as a wrong answer too), one line per case. Exit status 0 all cases ran and matched, 1 one
did not, 2 no GPU (nothing ran). Kernel names: attention_v1, attention_v2_wmma,
attention_v3_flash (ncu's -k regex:attention_v[23] picks the headline's two launches).
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from andrea_edu.dispatch import attention, compare_to_reference  # noqa: E402
from andrea_edu.kernels import registry  # noqa: E402

SMALL = [  # backend, dtype, B, nh, T, hs, causal
    ("cuda-naive", torch.float32, 1, 1, 17, 72, True),
    ("cuda-naive", torch.bfloat16, 1, 2, 65, 64, False),
    ("cuda-wmma", torch.float16, 1, 1, 77, 64, True),
    ("cuda-wmma", torch.bfloat16, 2, 1, 17, 48, False),
    ("cuda-flash", torch.bfloat16, 1, 1, 77, 64, True),
    ("cuda-flash", torch.float16, 1, 2, 33, 128, False),
    ("cuda-flash", torch.float16, 1, 1, 1, 32, True),
]
HEADLINE = [("cuda-wmma", torch.bfloat16, 8, 12, 1024, 64, True),
            ("cuda-flash", torch.bfloat16, 8, 12, 1024, 64, True)]


VERSION_OF = {s.backend: s.version for s in registry.specs()}  # {"cuda-naive": "v1", ...}


def small_cases() -> list:
    """SMALL, plus two tail cases for a registered kernel SMALL does not list (a new rung):
    its widest compiled dtype and a compiled head_dim (64 when it has one), causal and not."""
    out = list(SMALL)
    for s in registry.specs():
        if not any(c[0] == s.backend for c in SMALL):
            hd = 64 if 64 in s.head_dims else s.head_dims[0]
            out += [(s.backend, s.dtypes[-1], 1, 1, 77, hd, True),
                    (s.backend, s.dtypes[0], 1, 2, 33, hd, False)]
    return out


def main(argv: list[str]) -> int:
    if argv == ["kernels"]:   # for scripts/gpu_suite.sh: what to run one process each for
        print(" ".join(VERSION_OF))             # the registered kernels' backends
        print(" ".join(VERSION_OF.values()))    # and their versions
        return 0
    version = None
    if len(argv) == 3 and argv[1] == "--version" and argv[2] in VERSION_OF.values():
        argv, version = argv[:1], argv[2]
    if argv not in (["small"], ["headline"]):
        print(f"usage: gpu_kernel_cases.py small|headline [--version "
              f"{'|'.join(VERSION_OF.values())}]", file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("gpu_kernel_cases: skipped: no GPU", file=sys.stderr)
        return 2
    bad = ran = 0
    gen = torch.Generator().manual_seed(0)
    for backend, dt, B, nh, T, hs, causal in small_cases() if argv == ["small"] else HEADLINE:
        if version is not None and VERSION_OF.get(backend) != version:
            continue
        ran += 1
        q, k, v = (torch.randn(B, nh, T, hs, generator=gen).to(dt).to("cuda")
                   for _ in range(3))  # drawn on the host, copied: initcheck sees them written
        try:
            with torch.no_grad():
                out, d = attention(q, k, v, causal=causal, backend=backend,
                                   return_decision=True)
            torch.cuda.synchronize()
            r = compare_to_reference(out, q, k, v, causal)
            ok = r["passed"] and d.backend == backend
            msg = f"ran {d.backend}, max_abs_err={r['max_abs_err']:.3g}"
        except Exception as e:  # noqa: BLE001  (one case's failure is reported, the rest run)
            ok, msg = False, f"{type(e).__name__}: {e}"
        bad += not ok
        print(f"{'ok  ' if ok else 'FAIL'} {backend} {str(dt)[6:]} B={B} nh={nh} T={T} hs={hs} "
              f"causal={causal}: {msg}", flush=True)
    if not ran:   # a tool that watched nothing must not read as a pass
        print(f"gpu_kernel_cases: no case ran for {argv[0]} --version {version}", file=sys.stderr)
        return 1
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
