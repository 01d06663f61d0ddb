"""Finding NVIDIA's compiler pieces: NVRTC, the CUDA headers, cuobjdump, and the kernel sources.

Part of the compilation path of the chapter "One kernel, many heads" (andrea_edu.kernels.nvrtc uses it).
Everything comes from pip wheels (cuda-bindings, cuda-toolkit[nvrtc,cudart,crt], and for SASS
nvidia-cuda-cuobjdump + nvidia-cuda-nvdisasm), with $CUDA_HOME as a fallback; no nvcc needed.

    nvrtc_version() -> (major, minor)      supported_archs() -> [int]
    include_dirs() -> [str]      header_version() -> str
    kernel_source(version) -> str           kernel_constants(version) -> {name: int}
    block_rows(version, head_dim) -> int    query rows one block (v1: one query tile) covers
    find_binary(name) -> path or None
Errors: NvrtcUnavailableError (names the pip packages), CompileError (carries NVRTC's log).
"""
from __future__ import annotations

import importlib
import os
import re
import shutil
from pathlib import Path

from andrea_edu.kernels import registry
from andrea_edu.kernels.registry import KERNEL_FILES  # noqa: F401  (a live view of the registry)

PIP_HINT = "pip install cuda-bindings 'cuda-toolkit[nvrtc,cudart,crt]'"


class NvrtcUnavailableError(RuntimeError):
    """NVRTC (cuda-bindings) or the CUDA headers (cuda-toolkit wheels) are not installed."""


class CompileError(RuntimeError):
    """NVRTC rejected a kernel; `.log` holds NVRTC's log."""

    def __init__(self, msg: str, log: str = ""):
        super().__init__(msg)
        self.log = log


def _import_nvrtc():
    try:  # import_module consults sys.modules, so a test can hide the package
        nvrtc = importlib.import_module("cuda.bindings.nvrtc")
    except ImportError as e:
        raise NvrtcUnavailableError(
            f"NVRTC is not available ({e}); the CUDA kernels compile at run time with NVIDIA's "
            f"cuda-bindings. Install it with: {PIP_HINT}") from e
    return nvrtc


def _call(nvrtc, what: str, result):
    """Unpack a cuda.bindings (err, *values) tuple; raise CompileError when err is not success."""
    err, *rest = result if isinstance(result, tuple) else (result,)
    if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        raise CompileError(f"NVRTC {what} failed: {nvrtc.nvrtcGetErrorString(err)[1].decode()}")
    return rest[0] if len(rest) == 1 else (tuple(rest) if rest else None)


def _program_log(nvrtc, prog) -> str:
    _, n = nvrtc.nvrtcGetProgramLogSize(prog)
    buf = b" " * n
    nvrtc.nvrtcGetProgramLog(prog, buf)
    return buf.rstrip(b"\x00 ").decode(errors="replace")


def compile_program(nvrtc, source: str, filename: str, name_expr: str, opts: list[str],
                    failed) -> tuple[str, str, bytes, str]:
    """One NVRTC compile of `source`, shared by the book's kernels (kernels.nvrtc) and a reader's
    cell (notebook.kernel_cell): (lowered name of `name_expr`, PTX text, CUBIN bytes, log).
    On a failed compile, CompileError(failed(log), log): the caller words the message."""
    prog = _call(nvrtc, "nvrtcCreateProgram", nvrtc.nvrtcCreateProgram(
        source.encode(), filename.encode(), 0, [], []))
    try:
        _call(nvrtc, "nvrtcAddNameExpression",
              nvrtc.nvrtcAddNameExpression(prog, name_expr.encode()))
        err, = nvrtc.nvrtcCompileProgram(prog, len(opts), [o.encode() for o in opts])
        log = _program_log(nvrtc, prog)
        if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            raise CompileError(failed(log), log)
        lowered = _call(nvrtc, "nvrtcGetLoweredName",
                        nvrtc.nvrtcGetLoweredName(prog, name_expr.encode())).decode()
        ptx = b" " * _call(nvrtc, "nvrtcGetPTXSize", nvrtc.nvrtcGetPTXSize(prog))
        _call(nvrtc, "nvrtcGetPTX", nvrtc.nvrtcGetPTX(prog, ptx))
        cubin = b" " * _call(nvrtc, "nvrtcGetCUBINSize", nvrtc.nvrtcGetCUBINSize(prog))
        _call(nvrtc, "nvrtcGetCUBIN", nvrtc.nvrtcGetCUBIN(prog, cubin))
    finally:
        nvrtc.nvrtcDestroyProgram(prog)
    return lowered, ptx.rstrip(b"\x00").decode(), cubin, log


def nvrtc_version() -> tuple[int, int]:
    """NVRTC's (major, minor), e.g. (13, 0). Raises NvrtcUnavailableError when missing."""
    nvrtc = _import_nvrtc()
    major, minor = _call(nvrtc, "nvrtcVersion", nvrtc.nvrtcVersion())
    return int(major), int(minor)


def supported_archs() -> list[int]:
    """The sm_XY numbers this NVRTC compiles for, e.g. [75, 80, 86, 87, 89, 90, 100, 120]."""
    nvrtc = _import_nvrtc()
    return [int(a) for a in _call(nvrtc, "nvrtcGetSupportedArchs", nvrtc.nvrtcGetSupportedArchs())]


def _has_headers(d: Path) -> bool:
    return (d / "cuda_fp16.h").is_file() and (d / "mma.h").is_file() and \
        (d / "crt" / "mma.h").is_file()


def _header_candidates() -> list[Path]:
    """Where the CUDA headers may be, in order of preference."""
    cands: list[Path] = []
    try:
        import nvidia
        for root in map(Path, getattr(nvidia, "__path__", [])):
            cands += [root / "cu13" / "include", root / "cu12" / "include"]
            cands += [root / "cuda_runtime" / "include", root / "cuda_crt" / "include"]
            cands.append(root / "cuda_nvcc" / "include")  # CUDA 12 wheels: crt/mma.h is here
    except ImportError:
        pass
    try:
        from cuda import pathfinder
        cands.append(Path(pathfinder.find_nvidia_header_directory("cudart")))
    except Exception:  # pathfinder missing, or it found nothing: other places remain
        pass
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(var):
            cands.append(Path(os.environ[var]) / "include")
    cands.append(Path("/usr/local/cuda/include"))
    nvcc = shutil.which("nvcc")   # an nvcc install keeps crt/mma.h in its include folder
    if nvcc:
        cands.append(Path(nvcc).resolve().parent.parent / "include")
    return cands


def include_dirs() -> list[str]:
    """Folders holding cuda_fp16.h, cuda_bf16.h, mma.h and crt/mma.h, first found first.

    Looks in: the pip `nvidia` namespace package (nvidia/cu13/include, nvidia/cu12/include,
    nvidia/cuda_runtime/include + nvidia/cuda_crt/include, or + nvidia/cuda_nvcc/include for
    CUDA 12's wheels), cuda.pathfinder's answer,
    then $CUDA_HOME/include, $CUDA_PATH/include, /usr/local/cuda/include, and the include
    folder beside the nvcc on PATH.
    """
    cands = _header_candidates()
    for d in cands:
        if _has_headers(d):
            return [str(d)]
    # Split layouts (one wheel per component): combine the folders that hold each header.
    found = [d for d in cands if d.is_dir()]
    have = lambda rel: any((d / rel).is_file() for d in found)  # noqa: E731
    if all(have(h) for h in ("cuda_fp16.h", "cuda_bf16.h", "mma.h", "crt/mma.h")):
        return list(dict.fromkeys(str(d) for d in found))
    raise NvrtcUnavailableError(
        "CUDA headers (cuda_fp16.h, cuda_bf16.h, mma.h, crt/mma.h) were not found in the pip "
        f"nvidia packages, $CUDA_HOME/include or /usr/local/cuda/include. Install: {PIP_HINT}")


def header_version(inc: list[str]) -> str:
    for d in inc:
        p = Path(d) / "cuda_runtime_api.h"
        if p.is_file():
            m = re.search(r"#define\s+CUDART_VERSION\s+(\d+)", p.read_text(errors="replace"))
            if m:
                return m.group(1)
    return "unknown"


def kernel_source(version: str) -> str:
    """The .cu text of a kernel version (its spec's source file)."""
    return registry.get(version).source_text()


def kernel_constants(version: str) -> dict:
    """The file-level `constexpr int NAME = ...;` tile sizes of a kernel, read from its source,
    e.g. kernel_constants("v2")["V2_BQ"] == 64. The emulator and the launcher use these, so the
    CPU mirror cannot drift from the .cu file."""
    return registry.get(version).constants()


def block_rows(version: str, head_dim: int = 64) -> int:
    """Query rows per block (v2, v3) or per query tile (v1), from the .cu constants. v3 gives a
    warp 32 rows (two m16 tiles) up to head_dim V3_NARROW_HD and 16 above it."""
    return registry.get(version).rows(head_dim)


def find_binary(name: str) -> str | None:
    try:
        import nvidia
        for root in map(Path, nvidia.__path__):
            for sub in ("cu13", "cu12"):
                p = root / sub / "bin" / name
                if p.is_file():
                    return str(p)
    except ImportError:
        pass
    return shutil.which(name)
