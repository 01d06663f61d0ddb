"""Run-time switches shared by the library, the notebooks and the tests.

ANDREA_FAST=1        shrink sizes so every notebook runs in seconds (the tests set it).
ANDREA_BOOK_BUILD=1  the book is being built (scripts/build_book.sh): sliders render static frames.
ANDREA_CPU_ISA       "avx2" (the default) pins the CPU instruction sets of torch's numeric
                     libraries, so that CPU results are the same bits on x86-64 CPUs of one vendor
                     (see `pin_cpu_isa`); "native" leaves every library free to pick its own
                     (and drops pins inherited from a parent). Timings want "native": the bench
                     and pipeline-timing commands re-run themselves so
                     (andrea_lab.process.native_isa_env), and a
                     chapter that times on the CPU sets it and calls `pin_cpu_isa` before torch loads.
                     "asis" leaves the three knobs exactly as the environment has them (neither
                     filled in nor dropped): for a child whose parent chose each knob (the
                     real-text run's re-check, andrea_lab.make_realtext_run.pinned_env).
ANDREA_DATA_DIR      the folder of committed measurements (else found: see `data_search_dirs`).

Why pin: on one machine two seeded CPU trainings are bit-identical, but ATen, MKL and oneDNN each
pick kernels by the CPU's instruction set (AVX2 vs AVX-512), and the low bits grow through
training: 3e-4 to 1.4e-3 after 100 steps between two x86 machines, enough to move a head score
across the chapter's threshold. Every x86-64 machine this book targets has AVX2 (Haswell, 2013;
every AMD Zen), so AVX2 is the level pinned. The three knobs are read by the libraries when torch
is first imported: set them before that (`setup_kernel`, which every chapter's first cell calls;
importing `andrea_edu` changes no environment variable).
"""
from __future__ import annotations

import os
import platform
import sys
import warnings
from pathlib import Path

__version__ = "0.1.0"  # the library's version, recorded in every provenance block

# The pinned level, knob by knob (each one alone moved a 100-step training by 3e-4 to 8e-4).
#   ATEN_CPU_CAPABILITY: ATen's own vectorised kernels (softmax, GELU, layer norm, reductions).
#   MKL_CBWR: MKL's conditional bitwise reproducibility: the AVX2 code path, STRICT so that
#             alignment and run-time dispatch cannot change the bits (the sgemm of every Linear).
#   ONEDNN_MAX_CPU_ISA: the highest ISA oneDNN (mkldnn) may use.
PINNED_ISA = {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "AVX2,STRICT",
              "ONEDNN_MAX_CPU_ISA": "AVX2"}
ISA_KNOBS = tuple(PINNED_ISA)
_X86 = ("x86_64", "amd64", "i686", "x86")


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


# ---------------------------------------------------------------- CPU instruction-set pinning
def is_x86() -> bool:
    return platform.machine().lower() in _X86


def _isa_mode() -> str:
    return os.environ.get("ANDREA_CPU_ISA", "avx2").strip().lower()


def pinning_wanted() -> bool:
    """False when ANDREA_CPU_ISA is "native" or "asis", or on a CPU that is not x86 (ARM has
    none of the knobs)."""
    return is_x86() and _isa_mode() not in ("native", "asis")


def pin_cpu_isa(warn: bool = True) -> dict[str, str]:
    """Set ATEN_CPU_CAPABILITY, MKL_CBWR and ONEDNN_MAX_CPU_ISA to the AVX2 level, each only where
    it is not already set (a value set by hand wins). Returns the knobs' values now in effect.

    Must run before torch is imported: the libraries read the knobs once, at load. If torch is
    already imported and a knob was not yet set, the pin comes too late; with `warn` it says so
    (the provenance records what ATen really uses, `torch.backends.cpu.get_cpu_capability()`).
    """
    if not pinning_wanted():
        # "native" drops pins inherited from a pinning parent (tests, scripts/); "asis" keeps
        # whatever the parent set
        if is_x86() and _isa_mode() == "native" and "torch" not in sys.modules:
            for k, v in PINNED_ISA.items():
                if os.environ.get(k) == v:
                    del os.environ[k]
        return isa_settings()
    late = [k for k in ISA_KNOBS if k not in os.environ] if "torch" in sys.modules else []
    for k, v in PINNED_ISA.items():
        os.environ.setdefault(k, v)
    if late and warn:
        warnings.warn(f"torch was imported before andrea_edu pinned the CPU instruction sets "
                      f"({', '.join(late)} set too late): CPU results may differ in the low bits "
                      f"from the committed ones. Call andrea_edu.env.pin_cpu_isa before importing "
                      f"torch, or run through "
                      f"scripts/ (they export the settings).", RuntimeWarning, stacklevel=2)
    return isa_settings()


THREAD_CAP = 4  # a notebook kernel's thread pools: enough for the book's sizes, kind to a busy laptop
THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")


def cap_threads(cap: int = THREAD_CAP) -> int | None:
    """Cap torch's and OpenMP's thread pools at min(CPU count, cap), unless the user chose a
    count (OMP_NUM_THREADS or MKL_NUM_THREADS set): returns the cap, or None when the user's
    setting stands. A notebook kernel on a loaded machine otherwise starts one OpenMP thread per
    core per pool, and libgomp that cannot create them aborts the kernel ("Thread creation
    failed: Resource temporarily unavailable"). The variables reach torch when set before it is
    imported, and child processes (the kernels an executor starts) inherit them; a torch already
    imported is capped with torch.set_num_threads."""
    if any(os.environ.get(k, "").strip() for k in THREAD_VARS):
        return None
    n = max(1, min(os.cpu_count() or 1, int(cap)))
    for k in THREAD_VARS:
        os.environ[k] = str(n)
    torch = sys.modules.get("torch")
    if torch is not None and hasattr(torch, "set_num_threads"):
        torch.set_num_threads(min(torch.get_num_threads(), n))
    return n


CPU_ISA_MODES = ("avx2", "native", "asis")


def setup_kernel(cpu_isa: str | None = None) -> None:
    """What a chapter needs before torch loads, set once by its first cell (the setup cell):
    the CPU instruction-set pins (`pin_cpu_isa`, as ANDREA_CPU_ISA says) and, inside a notebook
    kernel, the thread cap (`cap_threads`). Importing andrea_edu sets neither: a program that
    wants them calls this (or `pin_cpu_isa`) itself. Returns nothing, so the cell prints nothing
    (`isa_settings()` tells the knobs' values).

    cpu_isa: the chapter's default for ANDREA_CPU_ISA when the reader has not set it: "native"
    for a chapter that times things at the CPU's own speed (the AVX2 pins turn bf16 matmuls into
    a slow reference loop), None (the "avx2" pins) for one that reproduces committed CPU runs."""
    if cpu_isa is not None:
        if cpu_isa not in CPU_ISA_MODES:
            raise ValueError(f"cpu_isa={cpu_isa!r}: allowed values are None, "
                             f"{', '.join(map(repr, CPU_ISA_MODES))}")
        os.environ.setdefault("ANDREA_CPU_ISA", cpu_isa)
    pin_cpu_isa(warn=False)  # a reader who imported torch first loses only low bits
    if "ipykernel" in sys.modules:
        cap_threads()


DEVICES = ("cpu", "cuda")


def runs_on(device: str) -> bool:
    """True when a cell can run on `device` ("cpu" or "cuda"). For "cuda" with no GPU visible to
    torch it prints one line saying so and what to do, and returns False: an exercise cell edited
    to `device = "cuda"` then ends cleanly on a laptop instead of raising from deep inside torch.
    Any other value raises ValueError naming the allowed ones."""
    if device not in DEVICES:
        raise ValueError(f"device={device!r}: allowed values are {', '.join(map(repr, DEVICES))}")
    if device == "cpu":
        return True
    import torch

    if torch.cuda.is_available():
        return True
    print("device='cuda': no CUDA GPU visible to torch here (torch.cuda.is_available() is False); "
          "run this cell on a machine with an NVIDIA GPU, or on Colab with a GPU runtime")
    return False


def isa_settings() -> dict[str, str]:
    """The three knobs as this process sees them ("" = not set: the library picks)."""
    return {k: os.environ.get(k, "") for k in ISA_KNOBS}


def cpu_name() -> str:
    """The CPU's model name (from /proc/cpuinfo on Linux)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def cpu_provenance() -> dict:
    """What decides CPU results' low bits: the CPU, the knobs, and the level ATen really uses.
    Goes into every provenance block; `same_cpu_numerics` compares two of them."""
    cap = "unknown"
    torch = sys.modules.get("torch")
    if torch is not None:
        try:
            cap = str(torch.backends.cpu.get_cpu_capability())
        except Exception:  # an old or unusual torch build
            pass
    return {"cpu": cpu_name(), "machine": platform.machine(), "cpu_count": os.cpu_count(),
            "isa_settings": isa_settings(), "aten_cpu_capability": cap}


def cpu_vendor(cpu: str) -> str:
    """'intel', 'amd', or the model name itself when it names neither."""
    low = cpu.lower()
    return next((v for v in ("intel", "amd") if v in low), low)


def same_cpu_numerics(a: dict | None, b: dict | None) -> bool:
    """True when two cpu_provenance blocks promise the same bits: both x86 from the same vendor,
    with the three knobs set alike and the same ATen capability (the CPU model within a vendor
    may differ: that is the point of the pins). Across vendors the pins do not give the same
    bits: measured, the chapter's sweep run (n_head 4, seed 2, 100 steps, same torch, same
    pins) differs by 7.1e-4 between an Intel Xeon and an AMD EPYC, so such a pair is compared
    within the measured tolerance instead."""
    if not a or not b:
        return False
    keys = ("isa_settings", "aten_cpu_capability")
    x86 = all(str(p.get("machine", "")).lower() in _X86 for p in (a, b))
    vendor = cpu_vendor(str(a.get("cpu", ""))) == cpu_vendor(str(b.get("cpu", "")))
    return x86 and vendor and all(a.get(k) == b.get(k) for k in keys) and all(
        (a.get("isa_settings") or {}).get(k) for k in ISA_KNOBS)
