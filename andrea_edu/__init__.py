"""andrea_edu: multi-head attention as ANDREA-120M computes it, on a CPU and on a real GPU.

The library behind the ANDREA Attention book. Its folders follow the book's parts; imports point
one way only: figures -> (heads, pipeline) -> bench -> core (this folder) -> kernels; the
notebook tooling uses only the kernels and the core (the kernels for the notebook's kernel
cells and puzzles, run by the CPU simulator). The kernels import nothing of
the rest; this folder holds the core and nothing else (tests/test_architecture.py keeps it so).

    core (this folder)  config       AndreaConfig, the presets, exact parameter counts
                        projections  per-head vs fused Q/K/V vs c_attn, split/merge heads, W_O
                        layout       how the heads sit in memory: views, strides, contiguity
                        attention    reference_attention: attention in plain torch, the lesson
                        dispatch     the one entry point to every backend: which ran, and why
                        model        a small GPT-style ANDREA (nn.Module); its forward runs the
                                     attention it was given (reference_attention by default)
                        env          run-time switches (fast mode, book build, CPU ISA pins)
                        data         committed data, read: finder, manifest, DataFileError, load
                        data_pins    the committed data's SHA-256 pins, checked wherever it is read
    kernels/   the .cu sources, their limits, NVRTC, launch, occupancy, grid, tiles, emulator
    heads/     the toy laboratory: corpus, training, head measures, gradient pressure, sweeps
    pipeline/  the forward pass as steps, its timing, op attribution, the token tracer
    bench/     timing, FLOP formulas, provenance, suites, results schema, the op counter
    notebook/  tooling: the slider, its live renderer, kernels written in a cell, the puzzles
    figures/   one module per chapter, shared drawing helpers, the "Checking the source" box

The names below are what a reader calls first; everything else is one import away, e.g.
`from andrea_edu.kernels import compile_attention`. What makes and writes book/data/ is the
laboratory package andrea_lab (its commands: python -m andrea_lab.bench, ...), which no module
here imports.
"""
# Importing the package changes nothing in os.environ and loads no torch: the names below are
# imported on first use (PEP 562), so `import andrea_edu.env` stays light and a chapter's first
# cell can pin the CPU instruction sets (andrea_edu.env.setup_kernel) before torch loads.
from typing import TYPE_CHECKING

from andrea_edu.env import __version__

if TYPE_CHECKING:  # what the lazy names are, for type checkers (never run)
    from andrea_edu.attention import reference_attention
    from andrea_edu.dispatch import Decision, choose_backend
    from andrea_edu.config import ANDREA_12M, ANDREA_120M, AndreaConfig, param_counts
    from andrea_edu.model import AndreaModel
    from andrea_edu.projections import merge_heads, split_heads

_LAZY = {"Decision": "dispatch", "choose_backend": "dispatch",
         "reference_attention": "attention", "ANDREA_12M": "config", "ANDREA_120M": "config",
         "AndreaConfig": "config", "param_counts": "config", "AndreaModel": "model",
         "merge_heads": "projections", "split_heads": "projections"}

__all__ = ["ANDREA_120M", "ANDREA_12M", "AndreaConfig", "AndreaModel", "Decision",
           "choose_backend", "merge_heads", "param_counts", "reference_attention",
           "split_heads", "__version__"]


def __getattr__(name: str):
    if name not in _LAZY:
        raise AttributeError(f"module 'andrea_edu' has no attribute {name!r}")
    import importlib
    value = getattr(importlib.import_module(f"andrea_edu.{_LAZY[name]}"), name)
    globals()[name] = value  # once: later lookups find it directly
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
