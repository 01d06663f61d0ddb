"""The %%cuda cell magic: a reader's CUDA kernel typed in a notebook cell, compiled and graded.

Chapter "One kernel, many heads" (the naive kernel and the kernel puzzles). Load it with
`%load_ext andrea_edu.notebook.cuda_magic` (or `load_ipython_extension(get_ipython())`); then

    %%cuda NAME                  the cell's text becomes the string NAME in the notebook, and
                                 NVRTC's evidence for it is printed (registers, shared memory,
                                 spills, PTX lines, SASS mix; or why NVRTC was not used)
    %%cuda NAME --grade PUZZLE   also grades it as kernel puzzle PUZZLE (kernel_puzzles) on the
                                 CPU simulator and prints the verdict in one sentence

Running the kernel is a Python call: kernel_cell.run_kernel(NAME, grid, block, *tensors, ...).
"""
from __future__ import annotations

from andrea_edu.kernels.toolkit import CompileError
from andrea_edu.notebook.kernel_cell import compile_cell, evidence_line, parameters
from andrea_edu.notebook.kernel_puzzles import PUZZLES, grade


def cuda(line: str, cell: str, namespace: dict) -> str:
    """What a `%%cuda` cell does: store the cell's text as namespace[NAME], compile it with
    NVRTC, grade it when --grade names a puzzle; returns the lines to print."""
    words = line.split()
    if len(words) not in (1, 3) or not words[0].isidentifier() or \
            (len(words) == 3 and words[1] != "--grade"):
        raise ValueError(f"%%cuda {line.strip()}: expected `%%cuda NAME` or `%%cuda NAME --grade "
                         f"PUZZLE` (NAME a Python identifier)")
    if len(words) == 3 and words[2] not in PUZZLES:
        raise ValueError(f"%%cuda --grade {words[2]}: PUZZLE must be one of {sorted(PUZZLES)}")
    parameters(cell)                                   # one __global__ function, passable types
    namespace[words[0]] = cell
    try:
        out = [f"{words[0]}: {evidence_line(compile_cell(cell))}"]
    except CompileError as e:
        return f"{words[0]}: {e}"
    if len(words) == 3:
        out.append(f"puzzle {words[2]!r}: {grade(words[2], cell)}")
    return "\n".join(out)


def load_ipython_extension(ipython) -> None:
    """%load_ext andrea_edu.notebook.cuda_magic: registers the %%cuda cell magic."""
    def magic(line: str, cell: str) -> None:
        print(cuda(line, cell, ipython.user_ns))
    ipython.register_magic_function(magic, magic_kind="cell", magic_name="cuda")
