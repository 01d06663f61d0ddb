"""Launching the compiled attention kernels on torch tensors (chapter "One kernel, many heads").

    has_gpu() -> bool
    device_info(device=None) -> dict   (GPU name, sm, SM count, driver/NVRTC/torch versions)
    launch_attention(q, k, v, causal=False, version="v1") -> out   (all on one CUDA device)
    prepare_attention(q, k, v, causal, version) -> PreparedLaunch   everything but the launch:
        calling it is one cuLaunchKernel (what the benchmarks time, host work kept out)

The CUBIN is compiled for the tensor's own architecture by andrea_edu.kernels.nvrtc.compile_attention,
loaded once per (device, specialization) with cuModuleLoadData, and launched with cuLaunchKernel
on torch's current stream of that device, so it orders correctly with torch's own work.
This low-level entry point never copies: it raises when an input is not contiguous (the
dispatcher `andrea_edu.dispatch.attention` copies and says so instead).

Errors (each names what is wrong and the fix): GpuUnavailableError (suggests backend="emulator"),
DriverTooOldError (gives the driver's CUDA version and NVRTC's), ValueError/TypeError for CPU
tensors, unsupported dtype or head_dim, non-contiguous input; NvrtcUnavailableError and
CompileError come from andrea_edu.kernels.nvrtc.
"""
from __future__ import annotations

import ctypes
import math

import torch

from andrea_edu.kernels import registry
from andrea_edu.kernels import toolkit as _tk
from andrea_edu.kernels.limits import validate_qkv
from andrea_edu.kernels.nvrtc import compile_attention


class GpuUnavailableError(RuntimeError):
    """No CUDA GPU is visible to torch."""


class DriverTooOldError(RuntimeError):
    """The NVIDIA driver is older than the NVRTC that compiled the kernels."""


# CUDA errors after which the process's context is broken: every later call in the same process
# fails with the same error (CUDA C++ Programming Guide, "Error Checking": a sticky error;
# only a new process recovers). Names as the driver API and the runtime spell them.
STICKY_ERRORS = ("CUDA_ERROR_ILLEGAL_ADDRESS", "illegal memory access", "CUDA_ERROR_LAUNCH_FAILED",
                 "unspecified launch failure", "CUDA_ERROR_MISALIGNED_ADDRESS", "misaligned address",
                 "CUDA_ERROR_ILLEGAL_INSTRUCTION", "illegal instruction", "CUDA_ERROR_ASSERT",
                 "device-side assert", "CUDA_ERROR_HARDWARE_STACK_ERROR",
                 "CUDA_ERROR_INVALID_PC", "CUDA_ERROR_LAUNCH_TIMEOUT", "CUDA_ERROR_ECC_UNCORRECTABLE")


def is_sticky_error(message: str) -> bool:
    """True when an error message names a CUDA error that breaks the process's context."""
    low = str(message).lower()
    return any(s.lower() in low for s in STICKY_ERRORS)


def has_gpu() -> bool:
    """True when torch sees at least one CUDA device."""
    try:
        return bool(torch.cuda.is_available()) and torch.cuda.device_count() > 0
    except Exception:  # a broken driver install reads as "no GPU", with no traceback
        return False


def require_gpu() -> None:
    if not has_gpu():
        raise GpuUnavailableError(
            "no CUDA GPU is visible (torch.cuda.is_available() is False): the CUDA kernels "
            "cannot run here. Use backend='emulator' to run the same grid, blocks and tiles on "
            "the CPU, or backend='reference'; the kernels still compile to PTX/CUBIN "
            "(andrea_edu.kernels.nvrtc.compile_attention).")


def _driver():
    from cuda.bindings import driver
    return driver


def _driver_version() -> int:
    """The CUDA version the installed driver supports, as 1000*major + 10*minor."""
    drv = _driver()
    err, = drv.cuInit(0)
    _ok(drv, err, "cuInit")
    err, ver = drv.cuDriverGetVersion()
    _ok(drv, err, "cuDriverGetVersion")
    return int(ver)


def _fmt(ver: int) -> str:
    return f"{ver // 1000}.{(ver % 1000) // 10}"


def check_driver(driver_version: int | None = None, nvrtc: tuple | None = None) -> None:
    """Raise DriverTooOldError when the driver's CUDA major version is below NVRTC's.

    Within one major version, CUDA's minor-version compatibility lets a CUBIN built by a newer
    NVRTC load; across major versions it does not.
    """
    driver_version = _driver_version() if driver_version is None else driver_version
    major, minor = _tk.nvrtc_version() if nvrtc is None else nvrtc
    if driver_version // 1000 < major:
        have = driver_version // 1000
        fix = (f", or install the NVRTC and headers of CUDA {have} (pyproject.toml's cuda{have} "
               f"extra, which the notebooks' install cell picks from the driver): pip install -e "
               f"'<the book's clone>[cuda{have}]'") if have >= 12 else \
            " (the kernels need a driver for CUDA 12 or newer)"
        raise DriverTooOldError(
            f"the NVIDIA driver supports CUDA {_fmt(driver_version)} but NVRTC is {major}.{minor}: "
            f"kernels it compiles will not load. Update the driver to one for CUDA {major}{fix}")


def _ok(drv, err, what: str) -> None:
    if err != drv.CUresult.CUDA_SUCCESS:
        name = drv.cuGetErrorName(err)[1]
        raise RuntimeError(f"CUDA driver call {what} failed: "
                           f"{name.decode() if isinstance(name, bytes) else name}")


def device_info(device=None) -> dict:
    """What the book prints about the machine: GPU, architecture, versions (works with no GPU)."""
    info = dict(gpu=has_gpu(), torch=torch.__version__, torch_cuda=torch.version.cuda)
    try:
        info["nvrtc"] = "%d.%d" % _tk.nvrtc_version()
    except _tk.NvrtcUnavailableError as e:
        info["nvrtc"] = None
        info["nvrtc_error"] = str(e)
    if not info["gpu"]:
        info["reason"] = "torch.cuda.is_available() is False"
        return info
    dev = torch.device("cuda", torch.cuda.current_device() if device is None else
                       torch.device(device).index or 0)
    props = torch.cuda.get_device_properties(dev)
    info.update(name=props.name, device=str(dev), capability=f"{props.major}.{props.minor}",
                arch=f"sm_{props.major}{props.minor}", sms=props.multi_processor_count,
                memory_gib=round(props.total_memory / 2**30, 1))
    try:
        info["driver_cuda"] = _fmt(_driver_version())
    except Exception as e:  # report, do not fail: device_info is for display
        info["driver_cuda"] = f"unknown ({e})"
    return info


_CONTEXTS: dict[int, tuple] = {}   # device index -> (CUdevice, its primary CUcontext)
_FUNCS: dict[tuple, tuple] = {}    # (device index, version, tile, dtype, arch) -> (module, func)
_DRIVER_CHECKED: list = []         # non-empty once check_driver() passed in this process


def _make_current(index: int):
    """Make device `index`'s primary context (the one torch's runtime uses) current here."""
    drv = _driver()
    if index not in _CONTEXTS:
        err, dev = drv.cuDeviceGet(index)
        _ok(drv, err, "cuDeviceGet")
        err, ctx = drv.cuDevicePrimaryCtxRetain(dev)
        _ok(drv, err, "cuDevicePrimaryCtxRetain")
        _CONTEXTS[index] = (dev, ctx)
    dev, ctx = _CONTEXTS[index]
    _ok(drv, drv.cuCtxSetCurrent(ctx)[0], "cuCtxSetCurrent")
    return dev


def _function(ck, index: int):
    """Load ck's CUBIN into device `index` once; return its CUfunction (context made current)."""
    dev = _make_current(index)
    key = (index, ck.version, ck.tile, ck.dtype, ck.arch)
    if key in _FUNCS:
        return _FUNCS[key][1]
    drv = _driver()
    dyn = ck.resources.dynamic_shared_bytes
    err, optin = drv.cuDeviceGetAttribute(
        drv.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, dev)
    _ok(drv, err, "cuDeviceGetAttribute")
    if dyn > optin:
        raise ValueError(f"{ck.name_expression} needs {dyn} bytes of shared memory per block; "
                         f"this GPU allows {optin}: use backend='sdpa' for this head_dim")
    err, module = drv.cuModuleLoadData(ck.cubin)
    _ok(drv, err, f"cuModuleLoadData({ck.name_expression}, {ck.arch})")
    err, func = drv.cuModuleGetFunction(module, ck.lowered_name.encode())
    _ok(drv, err, "cuModuleGetFunction")
    if dyn > 48 * 1024:  # above 48 KB a kernel must opt in to dynamic shared memory
        err, = drv.cuFuncSetAttribute(
            func, drv.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, dyn)
        _ok(drv, err, "cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)")
    _FUNCS[key] = (module, func)
    return func


def check_launch_inputs(q, k, v, version: str) -> tuple[int, int, int, int]:
    """Everything launch_attention checks before touching the GPU; returns (B, nh, T, hs)."""
    spec = registry.get(version)
    B, nh, T, hs = validate_qkv(q, k, v)
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not t.is_contiguous():
            raise ValueError(f"{name} is not contiguous (strides {t.stride()}); the kernels "
                             f"read [B, nh, T, hs] memory in order: pass {name}.contiguous()")
    why = spec.launch_refusal(q, k, v, hs)
    if why is not None and spec.ineligibility(hs, q.dtype, None) is not None:
        runs, _ = registry.walk(hs, q.dtype)   # what the dispatcher runs instead
        why += (f": use version={runs.version!r} (backend={runs.backend!r})" if runs else
                ": use backend='sdpa'")
    if why is not None:
        raise ValueError(why)
    if q.device.type != "cuda":
        raise ValueError(f"q is on device {q.device}, but the CUDA kernel {version} needs CUDA "
                         f"tensors: move them with .cuda(), or use backend='emulator' (CPU)")
    if B * nh > 2**31 - 1 or spec.grid(B, nh, T, hs)[1] > 65535:
        raise ValueError(f"grid too large for B*nh={B * nh}, T={T}")
    return B, nh, T, hs


class PreparedLaunch:
    """One kernel launch with everything decided beforehand: inputs checked, kernel compiled and
    loaded, context current, output allocated, kernel parameters packed. Calling it does one
    cuLaunchKernel (and checks its result) and returns the output tensor: no validation, no
    dispatch, no file read, no allocation. For timing (andrea_edu.bench.timing.time_fns) and
    for loops that launch the same shapes many times; the tensors it was prepared on must stay
    alive and unchanged in shape (it holds references to them)."""

    __slots__ = ("_launch", "_args", "_success", "_what", "out", "_keep", "_ptrs", "_params",
                 "name_expression", "grid", "threads", "shared_bytes")

    def __init__(self, drv, func, grid, threads, shared_bytes, stream, q, k, v, out, T, hs,
                 causal, name_expression):
        self._keep = (q, k, v, out)
        self._ptrs: list[ctypes.c_void_p | ctypes.c_int | ctypes.c_float]
        self._ptrs = [ctypes.c_void_p(t.data_ptr()) for t in (q, k, v, out)]
        self._ptrs += [ctypes.c_int(T), ctypes.c_int(hs), ctypes.c_float(1.0 / math.sqrt(hs)),
                       ctypes.c_int(int(causal))]
        self._params = (ctypes.c_void_p * len(self._ptrs))(
            *[ctypes.addressof(a) for a in self._ptrs])
        self.out, self.grid, self.threads = out, tuple(grid), threads
        self.shared_bytes, self.name_expression = shared_bytes, name_expression
        gx, gy, gz = self.grid
        self._launch = drv.cuLaunchKernel
        self._args = (func, gx, gy, gz, threads, 1, 1, shared_bytes, drv.CUstream(stream),
                      ctypes.addressof(self._params), 0)
        self._success = drv.CUresult.CUDA_SUCCESS
        self._what = f"cuLaunchKernel({name_expression}, grid=({gx}, {gy}, {gz}))"

    def __call__(self):
        err, = self._launch(*self._args)
        if err != self._success:
            _ok(_driver(), err, self._what)
        return self.out


def prepare_attention(q, k, v, causal: bool = False, version: str = "v1",
                      out=None) -> PreparedLaunch:
    """Everything launch_attention does except the launch: returns a PreparedLaunch whose call
    launches kernel `version` on q, k, v into `out` (a new tensor when None)."""
    if not isinstance(causal, bool):
        raise TypeError(f"causal={causal!r} must be True or False")
    B, nh, T, hs = check_launch_inputs(q, k, v, version)
    require_gpu()
    if not _DRIVER_CHECKED:
        check_driver()
        _DRIVER_CHECKED.append(True)
    index = q.device.index if q.device.index is not None else torch.cuda.current_device()
    major, minor = torch.cuda.get_device_capability(index)
    arch = f"sm_{major}{minor}"
    if major * 10 + minor < 75:
        raise RuntimeError(f"this GPU is {arch}; andrea_edu's kernels need sm_75 or newer: "
                           f"use backend='sdpa'")
    if major * 10 + minor not in _tk.supported_archs():
        raise RuntimeError(f"NVRTC {'%d.%d' % _tk.nvrtc_version()} cannot compile for this GPU "
                           f"({arch}; it knows sm_{_tk.supported_archs()}): install a newer "
                           f"NVRTC (pip install -U cuda-bindings 'cuda-toolkit[nvrtc,cudart,crt]')"
                           f", or use backend='sdpa'")
    why = registry.get(version).gpu_refusal(hs, q.dtype, major * 10 + minor, arch)
    if why is not None:
        runs, _ = registry.walk(hs, q.dtype, major * 10 + minor)
        raise RuntimeError(f"{why}: use backend="
                           f"{runs.backend if runs is not None else 'sdpa'!r}")
    ck = compile_attention(version, hs, q.dtype, arch)
    if out is None:
        out = torch.empty_like(q)                                   # (B, nh, T, hs)
    elif tuple(out.shape) != tuple(q.shape) or out.dtype != q.dtype or not out.is_contiguous():
        raise ValueError(f"out must be a contiguous {q.dtype} tensor of shape {tuple(q.shape)}")
    with torch.cuda.device(index):
        func = _function(ck, index)
        stream = torch.cuda.current_stream(index).cuda_stream
        return PreparedLaunch(_driver(), func, ck.grid(B, nh, T), ck.threads_per_block,
                              ck.resources.dynamic_shared_bytes, stream, q, k, v, out, T, hs,
                              causal, ck.name_expression)


def launch_attention(q, k, v, causal: bool = False, version: str = "v1"):
    """Run kernel `version` on contiguous CUDA tensors [B, nh, T, hs]; returns a new tensor."""
    return prepare_attention(q, k, v, causal, version)()
