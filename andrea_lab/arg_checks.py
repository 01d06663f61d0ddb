"""Argument checks shared by every command line of the laboratory, run before any work.

Each check returns None when the value is fine, else one line that names the flag and what is
allowed; `fail` prints that line as argparse does ("prog: error: ...") and returns exit status 2.
Used by python -m andrea_lab.bench (gpu-check included), andrea_lab.make_sweep,
andrea_lab.pipeline_timing, the real-text commands, andrea_lab.execute_chapters and
scripts/readme_figure.py, so that a bad --repeats or an unwritable --out is refused in a second, not
after the whole suite.
"""
from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path


def fail(prog: str, problem: str) -> int:
    """Print `prog: error: problem` on stderr (one line) and return 2, argparse's exit status."""
    print(f"{prog}: error: {problem}", file=sys.stderr)
    return 2


def check_int(flag: str, value, lo: int, hi: int | None = None) -> str | None:
    """None when value is None (the default applies) or an int in lo..hi."""
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < lo or (
            hi is not None and value > hi):
        allowed = f"an integer >= {lo}" if hi is None else f"an integer in {lo}..{hi}"
        return f"{flag}: {value!r} is not allowed; {allowed}"
    return None


def check_threads(flag: str, value) -> str | None:
    """None when value is None or an int in 1..os.cpu_count() (more threads than CPUs only
    oversubscribes them; far more makes OpenMP fail to create them and crash)."""
    return check_int(flag, value, 1, os.cpu_count() or 1)


def check_number(flag: str, value, lo: float, inclusive: bool = False) -> str | None:
    """None when value is None or a finite number > lo (>= lo when inclusive)."""
    if value is None:
        return None
    ok = value == value and value not in (float("inf"), float("-inf")) and (
        value >= lo if inclusive else value > lo)
    return None if ok else (f"{flag}: {value!r} is not allowed; a finite number "
                            f"{'>=' if inclusive else '>'} {lo:g}")


def check_device(flag: str, device: str) -> str | None:
    """'cuda' is refused (before any work) when torch sees no CUDA GPU."""
    if device not in ("auto", "cpu", "cuda"):
        return f"{flag}: {device!r} is not allowed; one of auto, cpu, cuda"
    if device == "cuda":
        import torch
        if not torch.cuda.is_available():
            return (f"{flag}: cuda was asked for but torch sees no CUDA GPU here; allowed: "
                    f"auto or cpu")
    return None


def _writable_dir(d: Path) -> str | None:
    try:
        with tempfile.NamedTemporaryFile(dir=d, prefix=".andrea-write-test-"):
            pass
    except OSError as e:
        return e.strerror or str(e)
    return None


def _existing_parent(p: Path) -> Path:
    while not p.exists() and p != p.parent:
        p = p.parent
    return p


def check_out_dir(flag: str, out) -> str | None:
    """None when `out` is (or can be made as) a folder this process can write in (tried)."""
    if out is None:
        return None
    if not str(out).strip():
        return f"{flag}: an empty path is not allowed; give a folder such as book/data"
    p = Path(out)
    if p.exists() and not p.is_dir():
        return f"{flag}: {out} is a file; give a folder"
    base = _existing_parent(p)
    if not base.is_dir():
        return f"{flag}: {base} (above {out}) is a file, not a folder"
    why = _writable_dir(base)
    return None if why is None else f"{flag}: {out} is not writable ({why})"


def check_out_file(flag: str, out, example: str = "out.json") -> str | None:
    """None when this process can write the file `out` (a folder above it is tried)."""
    if out is None:
        return None
    if not str(out).strip():
        return f"{flag}: an empty path is not allowed; give a file path such as {example}"
    p = Path(out)
    if p.is_dir():
        return f"{flag}: {out} is a folder; give a file path such as {example}"
    from andrea_edu.data import name_problem
    why = name_problem(p.name)  # it becomes a line of its folder's SHA256SUMS
    if why:
        return f"{flag}: the file name {p.name[:60]!r} {why}; give a plain name such as {example}"
    base = _existing_parent(p.parent)
    if not base.is_dir():
        return f"{flag}: {base} (above {out}) is a file, not a folder"
    why = _writable_dir(base)
    if why is None and p.exists() and not os.access(p, os.W_OK):
        why = "permission denied"
    return None if why is None else f"{flag}: {out} is not writable ({why})"


def check_not_committed(flag: str, paths, replace: bool) -> str | None:
    """None when no path of `paths` is committed (andrea_lab.store.committed_reason) or replace
    is set: a command writes a committed file only when asked by name (--replace)."""
    if replace:
        return None
    from andrea_lab.store import BOOK, committed_reason
    for p in paths:
        why = committed_reason(p)
        if why:
            return (f"{flag}: {p} {why}; a command does not overwrite the book unless asked "
                    f"(add --replace, or give a folder outside {BOOK})")
    return None


def first_problem(*problems) -> str | None:
    """The first non-None of several checks."""
    return next((p for p in problems if p), None)
