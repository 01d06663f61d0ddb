"""Measurements with provenance (chapters "Three matrices", "How CUDA stores the heads",
"One kernel, many heads", "The configuration mirrors the hardware"), and every live timing a
chapter shows: figures draw, bench measures.

    timing       FLOP formulas, time_fns (validate, warm up, take turns), provenance
    results      the JSON schema of book/data/bench_*.json, validation, loading
    runner       the validate-then-time runner every suite shares, shapes per device
    cases        the head_dim sweep over every backend
    aten         the one ATen op counter: which aten ops code really dispatches (BLAS calls, copies)
    matmuls      projections three ways (the suite, and the chapter's live sweep); strided vs
                 contiguous heads
    sdpa         torch's SDPA live: on a strided view vs a contiguous copy; n heads vs one wide head
    suites       run_suite: one entry point for every suite
    layout_cost  the cost of .contiguous() and of a strided matmul (live, in the chapter)
    launches     one launch for all heads vs one launch per (batch, head)
    dispatched   the kernel the dispatcher runs at one head_dim beside SDPA: validated, then timed
                 live on a GPU, or read from a GPU results file (the head_dim slider's points)

The command that writes them, python -m andrea_lab.bench, the GPU correctness check
(gpu-check) and the commands' argument checks (andrea_lab.arg_checks) live in the laboratory
package andrea_lab, which no chapter imports.

Results go to `book/data/bench_<suite>_<device>.json` (device: "cpu" or e.g. "nvidia-h200").
"""
from andrea_edu.bench.results import (SCHEMA, SCHEMA_VERSION, SUITES, data_dir, load_results,
                                      validate_result)
from andrea_edu.bench.timing import (ValidationError, attention_flops, check_close, device_slug,
                                     matmul_flops, pick_device, provenance, time_fn, time_fns,
                                     tolerance)

__all__ = ["SCHEMA", "SCHEMA_VERSION", "SUITES", "ValidationError", "attention_flops",
           "check_close", "data_dir", "device_slug", "load_results", "matmul_flops",
           "pick_device", "provenance", "time_fn", "time_fns", "tolerance", "validate_result"]
