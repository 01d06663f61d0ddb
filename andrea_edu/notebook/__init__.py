"""Notebook tooling: what runs and shows the chapters, not what they compute or draw.

    slider    one plotting function, two front ends: live ipywidgets sliders in a running
              kernel, a self-contained static HTML slider in the book build (each says what a
              frame costs: the live one per frame drawn, the static one its median, data-frame-ms)
    live      the slider's live renderer: frames kept per position, drawn on one background
              thread that serves a queue of sliders (the last move wins), then the positions
              one step away, ahead of the reader
    kernel_cell  kernels written in a cell (%%cuda, run_kernel): NVRTC's evidence, a run on the
              CPU simulator, and what went wrong said in words (race, out of bounds, ...)
    kernel_puzzles  the CUDA puzzles of "One kernel, many heads": statement, hints, starter,
              hidden solution, graded by run_kernel
    cuda_magic  the %%cuda cell magic: a kernel typed in a cell, its NVRTC evidence, graded
              as a puzzle with --grade

Used by every chapter (the slider, the kernel cells and puzzles). It imports the core
(andrea_edu.env, the dispatcher's tolerances) and, for the kernel cells, the kernels (NVRTC,
the CPU simulator); nothing that a chapter computes; the figures draw what the slider shows.
Running chapters headless and checking their exercises is the laboratory's tooling
(andrea_lab.execute_chapters, andrea_lab.chapter_exercises), which no chapter imports.
"""
