"""The forward pass as steps (Part "The whole picture": "The final picture", "Reading the
pipeline").

    steps    the five attention steps per layer and the rest of the model, read off the model
             object, with FLOP and byte formulas; a step-by-step forward equal to model(idx)
    timing   time per step and per group (written by python -m andrea_lab.pipeline_timing)
    ops      which aten ops and GPU kernels each step really ran
    tracer   one token through one layer: shapes, strides, view or copy, first values

`from andrea_edu import pipeline` gives the steps' API (pipeline.five_steps, ...).
"""
from andrea_edu.pipeline.steps import (ATTENTION_GROUPS, CAUSAL, CHAPTER_TITLES, GROUPS,
                                       LAYER_STEP_INFO, MODEL_STEP_INFO, SOURCE_STEP_INFO,
                                       STEP_INFO, Step,
                                       attention_bytes, block_in_steps, chapter_link, five_steps,
                                       itemsize, kernel_vs_projections, layer_steps,
                                       matmul_bytes, model_in_steps, model_steps, no_mark,
                                       qkv_intensity, qkv_is_fused, totals)

__all__ = ["ATTENTION_GROUPS", "CAUSAL", "CHAPTER_TITLES", "GROUPS", "LAYER_STEP_INFO",
           "MODEL_STEP_INFO", "SOURCE_STEP_INFO", "STEP_INFO", "Step", "attention_bytes", "block_in_steps",
           "chapter_link", "five_steps", "itemsize", "kernel_vs_projections", "layer_steps",
           "matmul_bytes", "model_in_steps", "model_steps", "no_mark", "qkv_intensity",
           "qkv_is_fused", "totals"]
