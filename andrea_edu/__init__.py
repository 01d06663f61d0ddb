"""andrea_edu: multi-head attention as ANDREA-120M computes it, on a CPU and on a real GPU.

The library behind the ANDREA Attention book. One concept per module:
config (sizes, presets, parameter counts), projections (per-head vs fused Q/K/V, W_O),
layout (how the heads are stored), attention (one entry point, several backends),
cuda (NVRTC compilation and launch), emulator (the kernels' grid on a CPU), model,
specialization, bench, viz.
"""
__version__ = "0.1.0"
