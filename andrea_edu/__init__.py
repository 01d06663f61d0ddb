"""andrea_edu: multi-head attention as ANDREA-120M computes it, on a CPU and on a real GPU.

The library behind the ANDREA Attention book. Its folders follow the book's parts; imports point
one way only: figures -> (heads, pipeline) -> bench -> core (this folder) -> kernels; the
notebook tooling uses only the core and bench's argument checks. The kernels import nothing of
the rest; this folder holds the core and nothing else (tests/test_architecture.py keeps it so).

    core (this folder)  config       AndreaConfig, the presets, exact parameter counts
                        projections  per-head vs fused Q/K/V vs c_attn, split/merge heads, W_O
                        layout       how the heads sit in memory: views, strides, contiguity
                        attention    the one entry point: which backend ran, and why
                        model        a small GPT-style ANDREA (nn.Module); its forward calls attention
                        env          run-time switches (fast mode, book build, CPU ISA pins)
                        data         committed data, read: finder, manifest, DataFileError, load
    kernels/   the .cu sources, their limits, NVRTC, launch, occupancy, grid, tiles, emulator
    heads/     the toy laboratory: corpus, training, head measures, gradient pressure, sweeps
    pipeline/  the forward pass as steps, its timing, op attribution, the token tracer
    bench/     timing, FLOP formulas, provenance, suites, results schema, the op counter
    notebook/  tooling: the slider, its live renderer, the headless chapter runner
    figures/   one module per chapter, shared drawing helpers, the "Checking the source" box

The names below are what a reader calls first; everything else is one import away, e.g.
`from andrea_edu.kernels import compile_attention`. What makes and writes book/data/ is the
laboratory package andrea_lab (its commands: python -m andrea_lab.bench, ...), which no module
here imports.
"""
# Before anything imports torch: pin the CPU instruction sets of torch's numeric libraries (AVX2
# on x86; ANDREA_CPU_ISA=native opts out), so CPU results are the same bits on every machine.
from andrea_edu.env import pin_cpu_isa as _pin_cpu_isa

_pin_cpu_isa(warn=False)  # silent here: a reader who imported torch first loses only the low bits

import sys as _sys  # noqa: E402

if "ipykernel" in _sys.modules:  # a notebook kernel: thread pools capped unless the user set them
    from andrea_edu.env import cap_threads as _cap_threads
    _cap_threads()

from andrea_edu.attention import Decision, attention, choose_backend, reference_attention
from andrea_edu.config import ANDREA_12M, ANDREA_120M, AndreaConfig, param_counts
from andrea_edu.env import __version__
from andrea_edu.model import AndreaModel
from andrea_edu.projections import merge_heads, split_heads

__all__ = ["ANDREA_120M", "ANDREA_12M", "AndreaConfig", "AndreaModel", "Decision", "attention",
           "choose_backend", "merge_heads", "param_counts", "reference_attention",
           "split_heads", "__version__"]
