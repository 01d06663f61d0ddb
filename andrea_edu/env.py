"""Run-time switches shared by the library, the notebooks and the tests.

ANDREA_FAST=1        shrink sizes so every notebook runs in seconds (the tests set it).
ANDREA_BOOK_BUILD=1  the book is being built (scripts/build_book.sh): sliders render static frames.
"""
from __future__ import annotations

import os

__version__ = "0.1.0"  # the library's version, recorded in every provenance block


def _flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() not in ("", "0", "false", "no")


def fast_mode() -> bool:
    """True when ANDREA_FAST is set: notebooks and benchmarks shrink their sizes."""
    return _flag("ANDREA_FAST")


def book_build() -> bool:
    """True when ANDREA_BOOK_BUILD is set: the rendered book is being built."""
    return _flag("ANDREA_BOOK_BUILD")


def pick(full, fast):
    """`fast` in fast mode, `full` otherwise: one place for every size a notebook shrinks."""
    return fast if fast_mode() else full
