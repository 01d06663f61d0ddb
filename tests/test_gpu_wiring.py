"""Wiring tests of the CUDA launch layer, run on a CPU up to the cuda-bindings boundary.

Wiring test: not evidence of GPU behaviour. Nothing here runs a kernel. Every function of the
installed `cuda.bindings.driver` module is replaced by a recording stand-in that checks each
call against the real binding: the arguments must bind to the real function's signature
(inspect.signature of the Cython function), and each must have the type its docstring's
"Parameters" section declares (an `unsigned int` is a non-negative int below 2**32, a
`CUfunction` an instance of driver.CUfunction, ...). The stand-in answers with the shape its
docstring's "Returns" section declares: (CUresult, *outputs), handles as the real handle
classes, and plausible numbers for an H200 with driver 580 (CUDA 13.0). torch.cuda's side
(is_available, device_count, get_device_capability, get_device_properties, current_stream,
device) is stubbed, and the tensors are CPU tensors that say they are on cuda:0, so that
`launch_attention` and `attention(backend="cuda-*")` run their real code, compile the real
kernels with NVRTC, and hand the driver what they would hand it on a GPU.

What this catches: a call of a driver function that does not exist or with the wrong arity or
argument types (e.g. a Python int where a CUstream is required), a launch whose grid, block,
dynamic shared memory or kernel parameters disagree with the compiled kernel (the parameter
block is decoded and compared with the PTX entry's .param list), error paths that would print
a traceback instead of a sentence. What it cannot catch: anything the GPU itself does.
"""
from __future__ import annotations

import contextlib
import ctypes
import inspect
import math
import re
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pytest
import torch

driver = pytest.importorskip("cuda.bindings.driver", reason="cuda-bindings is not installed")

from andrea_edu.dispatch import attention  # noqa: E402  (the readers' entry point to the kernels)
from andrea_edu.kernels import launch, nvrtc  # noqa: E402
from andrea_edu.kernels import toolkit  # noqa: E402

try:
    toolkit.include_dirs()
    toolkit.nvrtc_version()
    HAVE_NVRTC = True
except toolkit.NvrtcUnavailableError:
    HAVE_NVRTC = False
needs_nvrtc = pytest.mark.skipif(not HAVE_NVRTC, reason="NVRTC or the CUDA headers are missing")

# Plausible answers of an H200 under driver 580 (what the device image documents): CUDA 13.0;
# 227 KB of opt-in shared memory per block on compute capability 9.0 (CUDA C++ Programming
# Guide, "Technical Specifications per Compute Capability": 227 KB for 9.0).
DRIVER_CUDA = 13000
SMEM_OPTIN = 227 * 1024
STREAM = 0x5EED00


# ----------------------------------------------------------------------------- the stand-in
def _sections(doc: str) -> tuple[str, dict[str, str], list[tuple[str, str]]]:
    """(first line, {param: declared type}, [(return name, declared type)]) of a binding's
    numpydoc docstring."""
    lines = doc.splitlines()
    params: dict[str, str] = {}
    returns: list[tuple[str, str]] = []
    where = None
    for i, ln in enumerate(lines):
        nxt = lines[i + 1] if i + 1 < len(lines) else ""
        if ln in ("Parameters", "Returns", "See Also", "Notes") and set(nxt) == {"-"}:
            where = ln
            continue
        m = re.fullmatch(r"(\w+) : (.+)", ln)
        if m and where == "Parameters":
            params[m.group(1)] = m.group(2)
        elif where == "Returns" and re.fullmatch(r"(\w+ : .+|CUresult)", ln):
            name, _, typ = ln.partition(" : ")
            returns.append((name, typ or name))
    return lines[0], params, returns


def _classes(declared: str) -> list[type]:
    out = []
    for name in re.findall(r":py:obj:`~\.(\w+)`", declared):
        cls = getattr(driver, name, None)
        if isinstance(cls, type):
            out.append(cls)
    return out


def type_problem(func: str, param: str, declared: str, c_decl: str, value: Any) -> str | None:
    """Why `value` is not what the binding declares for `param`, or None."""
    is_int = isinstance(value, int) and not isinstance(value, bool)
    if re.search(rf"\bvoid_ptr {param}\b", c_decl):     # an address (or NULL) as a Python int
        return None if value is None or is_int else f"{param} must be an int address or None"
    if declared == "unsigned int":
        return None if is_int and 0 <= value < 2**32 else \
            f"{param}={value!r} must be an int in 0..2**32-1 (unsigned int)"
    if declared == "int":
        return None if is_int and -2**31 <= value < 2**31 else \
            f"{param}={value!r} must be a 32-bit int"
    if declared == "bytes":
        return None if isinstance(value, bytes) else f"{param} must be bytes, got {type(value)}"
    if declared == "Any":
        if func == "cuModuleLoadData":   # the CUBIN image, as bytes
            return None if isinstance(value, bytes) and value else f"{param} must be the image"
        if param == "kernelParams":      # the address of an array of pointers, as an int
            return None if is_int and value else f"{param} must be the parameter array address"
        return f"the stand-in does not know how to check {func}({param}: Any)"
    classes = _classes(declared)
    if classes:
        return None if isinstance(value, tuple(classes)) else \
            f"{param}={value!r} must be {' or '.join(c.__name__ for c in classes)}"
    return f"the stand-in does not know the type {declared!r} of {func}({param})"


@dataclass
class Call:
    name: str
    args: dict[str, Any]
    result: Any = None


@dataclass
class DriverStandIn:
    """Records every call into cuda.bindings.driver and checks it against the real binding."""
    calls: list[Call] = field(default_factory=list)
    answers: dict[str, Any] = field(default_factory=dict)   # name -> result or callable
    # sizes of the kernel's parameters (from its PTX): cuLaunchKernel's parameter block is
    # decoded while the call is made (the launcher's ctypes buffers die when it returns)
    param_sizes: list[int] | None = None
    params_seen: list[list[int]] = field(default_factory=list)
    _handles: int = 0x1000

    def names(self) -> list[str]:
        return [c.name for c in self.calls]

    def last(self, name: str) -> Call:
        return [c for c in self.calls if c.name == name][-1]

    def recorder(self, name: str, real):
        sig = inspect.signature(real)
        first, declared, returns = _sections(real.__doc__ or "")

        def call(*args, **kwargs):
            try:
                bound = sig.bind(*args, **kwargs)   # wrong arity or keyword: TypeError here
            except TypeError as e:
                raise TypeError(f"{name}{sig}: {e}") from None
            for p, value in bound.arguments.items():
                problem = type_problem(name, p, declared.get(p, "Any"), first, value)
                if problem:
                    raise TypeError(f"{name}: {problem}")
            call_ = Call(name, dict(bound.arguments))
            if name == "cuLaunchKernel" and self.param_sizes:
                self.params_seen.append(decode_params(bound.arguments["kernelParams"],
                                                      self.param_sizes))
            self.calls.append(call_)
            if name in self.answers:
                ans = self.answers[name]
                call_.result = ans(**bound.arguments) if callable(ans) else ans
            else:
                call_.result = self.plausible(name, returns, bound.arguments)
            return call_.result

        call.__name__ = name
        return call

    def plausible(self, name: str, returns, args) -> tuple:
        assert returns and returns[0][0] == "CUresult", f"{name}: no CUresult first in its docs"
        out: list[Any] = [driver.CUresult.CUDA_SUCCESS]
        for ret, typ in returns[1:]:
            classes = _classes(typ)
            if classes:
                self._handles += 0x10
                cls = classes[0]
                out.append(cls(args["ordinal"]) if cls is driver.CUdevice else cls(self._handles))
            elif name == "cuDriverGetVersion":
                out.append(DRIVER_CUDA)
            elif name == "cuDeviceGetAttribute" and args["attrib"] == driver.CUdevice_attribute\
                    .CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN:
                out.append(SMEM_OPTIN)
            elif name == "cuGetErrorName":
                out.append(driver.CUresult(args["error"]).name.encode())
            else:
                raise AssertionError(f"the stand-in has no plausible {ret}: {typ} for {name}; "
                                     f"add one when the launch layer starts calling it")
        return tuple(out)


@pytest.fixture
def standin(monkeypatch):
    """The driver module's cu* functions replaced; torch.cuda answering as one H200."""
    s = DriverStandIn()
    for name in dir(driver):
        real = getattr(driver, name)
        if name.startswith("cu") and callable(real) and not isinstance(real, type):
            monkeypatch.setattr(driver, name, s.recorder(name, real))
    for cache, empty in (("_CONTEXTS", {}), ("_FUNCS", {}), ("_DRIVER_CHECKED", [])):
        if hasattr(launch, cache):   # the launcher's per-process caches start empty
            monkeypatch.setattr(launch, cache, empty)
    props = SimpleNamespace(name="NVIDIA H200 (stand-in)", major=9, minor=0,
                            multi_processor_count=132, total_memory=141 * 2**30)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device=None: props)
    monkeypatch.setattr(torch.cuda, "current_stream",
                        lambda device=None: SimpleNamespace(cuda_stream=STREAM))
    monkeypatch.setattr(torch.cuda, "device", lambda index: contextlib.nullcontext())
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: None)
    return s


class OnCuda(torch.Tensor):
    """A CPU tensor that says it lives on cuda:0 (its data_ptr is a real CPU address)."""

    @property
    def device(self):  # type: ignore[override]
        return torch.device("cuda", 0)

    @property
    def is_cuda(self):  # type: ignore[override]
        return True


def qkv(B, nh, T, hs, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(B, nh, T, hs, generator=g).to(dtype).as_subclass(OnCuda)
            for _ in range(3)]


PTX_SIZE = {"u64": 8, "b64": 8, "s64": 8, "u32": 4, "b32": 4, "s32": 4, "f32": 4}


def ptx_params(ck) -> list[int]:
    """Sizes in bytes of the kernel entry's parameters, read from its PTX."""
    m = re.search(rf"\.entry {re.escape(ck.lowered_name)}\s*\((.*?)\)", ck.ptx, re.S)
    assert m, f"no .entry {ck.lowered_name} in the PTX"
    return [PTX_SIZE[t] for t in re.findall(r"\.param \.(\w+)", m.group(1))]


def decode_params(address: int, sizes: list[int]) -> list:
    """Read the kernelParams array the launcher built: pointers to each argument's bytes."""
    ptrs = (ctypes.c_void_p * len(sizes)).from_address(address)
    vals: list = []
    for p, size in zip(ptrs, sizes):
        raw = ctypes.string_at(p, size)
        vals.append(int.from_bytes(raw, "little"))
    return vals


# ----------------------------------------------------------------------------- the tests
CASES = [("v1", torch.float32, 2, 3, 17, 72), ("v1", torch.float32, 1, 1, 1, 256),
         ("v2", torch.float16, 1, 2, 77, 64), ("v2", torch.bfloat16, 1, 1, 65, 128),
         ("v3", torch.bfloat16, 2, 1, 130, 64), ("v3", torch.float16, 1, 1, 17, 128)]


@needs_nvrtc
@pytest.mark.parametrize("version,dtype,B,nh,T,hs", CASES)
@pytest.mark.parametrize("causal", [False, True])
def test_launch_hands_the_driver_what_the_kernel_expects(standin, version, dtype, B, nh, T, hs,
                                                         causal):
    """Wiring test: not evidence of GPU behaviour. The calls launch_attention makes, in order,
    each checked against the real cuda-bindings function, and the launch's grid, block, shared
    memory and parameter block checked against the compiled kernel."""
    q, k, v = qkv(B, nh, T, hs, dtype)
    ck = nvrtc.compile_attention(version, hs, dtype, "sm_90")
    sizes = ptx_params(ck)
    assert sizes == [8, 8, 8, 8, 4, 4, 4, 4], f"kernel ABI changed: {sizes}"
    standin.param_sizes = sizes
    out = launch.launch_attention(q, k, v, causal=causal, version=version)
    assert out.shape == q.shape and out.dtype == dtype
    dyn = ck.resources.dynamic_shared_bytes
    expected = ["cuInit", "cuDriverGetVersion", "cuDeviceGet", "cuDevicePrimaryCtxRetain",
                "cuCtxSetCurrent", "cuDeviceGetAttribute", "cuModuleLoadData",
                "cuModuleGetFunction"] + (["cuFuncSetAttribute"] if dyn > 48 * 1024 else []) + \
               ["cuLaunchKernel"]
    assert standin.names() == expected
    assert standin.last("cuModuleLoadData").args["image"] == ck.cubin
    assert standin.last("cuModuleGetFunction").args["name"] == ck.lowered_name.encode()
    if dyn > 48 * 1024:
        a = standin.last("cuFuncSetAttribute").args
        assert a["value"] == dyn and a["attrib"] == \
            driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
    a = standin.last("cuLaunchKernel").args
    assert (a["gridDimX"], a["gridDimY"], a["gridDimZ"]) == ck.grid(B, nh, T)
    assert a["gridDimX"] == B * nh
    if version != "v1":   # one block per 64 (or 32) query rows, the tail included
        assert a["gridDimY"] == math.ceil(T / toolkit.block_rows(version, hs))
    assert (a["blockDimX"], a["blockDimY"], a["blockDimZ"]) == (ck.threads_per_block, 1, 1)
    assert a["sharedMemBytes"] == dyn <= SMEM_OPTIN
    assert int(a["hStream"]) == STREAM
    # each handle is the one the driver gave back: context, module, function
    assert standin.last("cuCtxSetCurrent").args["ctx"] is \
        standin.last("cuDevicePrimaryCtxRetain").result[1]
    assert standin.last("cuModuleGetFunction").args["hmod"] is \
        standin.last("cuModuleLoadData").result[1]
    assert a["f"] is standin.last("cuModuleGetFunction").result[1]
    vals, = standin.params_seen
    assert vals[:4] == [t.data_ptr() for t in (q, k, v, out)]
    assert vals[4:6] == [T, hs]
    scale = ctypes.c_float.from_buffer_copy(vals[6].to_bytes(4, "little")).value
    assert scale == pytest.approx(1 / math.sqrt(hs), rel=1e-7)
    assert vals[7] == int(causal)


@needs_nvrtc
def test_a_second_launch_reuses_the_loaded_module(standin):
    """Wiring test: not evidence of GPU behaviour. The CUBIN is loaded once per
    (device, specialization): the second call only makes the context current and launches."""
    q, k, v = qkv(1, 2, 33, 64, torch.float16)
    launch.launch_attention(q, k, v, version="v2")
    n = len(standin.calls)
    launch.launch_attention(q, k, v, causal=True, version="v2")
    assert standin.names()[n:] == ["cuCtxSetCurrent", "cuLaunchKernel"]


@needs_nvrtc
@pytest.mark.parametrize("backend,dtype,hs,kernel", [
    ("cuda-naive", torch.float32, 40, "attention_v1"),
    ("cuda-wmma", torch.float16, 48, "attention_v2_wmma"),
    ("cuda-flash", torch.bfloat16, 64, "attention_v3_flash"),
    ("auto", torch.float16, 96, "attention_v3_flash"),
    ("cuda-flash", torch.float16, 48, "attention_v2_wmma"),   # falls back, and says so
])
def test_attention_routes_each_cuda_backend_to_the_launcher(standin, backend, dtype, hs, kernel):
    """Wiring test: not evidence of GPU behaviour. The readers' entry point attention() with a
    cuda-* backend reaches cuLaunchKernel with the kernel it names (the call that once raised
    AttributeError on every GPU)."""
    q, k, v = qkv(2, 3, 50, hs, dtype)
    with torch.no_grad():
        out, d = attention(q, k, v, causal=True, backend=backend,
                                         return_decision=True)
    assert out.shape == q.shape
    assert standin.names().count("cuLaunchKernel") == 1
    assert kernel in standin.last("cuModuleGetFunction").args["name"].decode()
    assert d.kernel == {"attention_v1": "v1", "attention_v2_wmma": "v2",
                        "attention_v3_flash": "v3"}[kernel]


@needs_nvrtc
def test_attention_copies_a_misaligned_input_before_cuda_flash(standin):
    """Wiring test: not evidence of GPU behaviour. A q that starts 2 bytes into its storage
    is cloned before v3 (cp.async moves 16-byte chunks); the kernel sees aligned pointers."""
    base = torch.randn(1 * 1 * 17 * 64 + 1).to(torch.float16)
    q = base[1:].view(1, 1, 17, 64).as_subclass(OnCuda)
    k, v = qkv(1, 1, 17, 64, torch.float16)[1:]
    standin.param_sizes = [8] * 4
    _, d = attention(q, k, v, backend="cuda-flash", return_decision=True)
    assert any("not 16-byte aligned" in n for n in d.notes)
    vals, = standin.params_seen
    assert all(p % 16 == 0 for p in vals)


@needs_nvrtc
def test_an_old_driver_is_refused_with_the_fix(standin):
    """Wiring test: not evidence of GPU behaviour. A driver for CUDA 12.8 under NVRTC 13."""
    standin.answers["cuDriverGetVersion"] = (driver.CUresult.CUDA_SUCCESS, 12080)
    q, k, v = qkv(1, 1, 8, 32, torch.float16)
    major, _ = toolkit.nvrtc_version()
    if major <= 12:
        pytest.skip("this NVRTC is not newer than the stand-in's driver")
    with pytest.raises(launch.DriverTooOldError, match=r"supports CUDA 12\.8 but NVRTC is"):
        launch.launch_attention(q, k, v, version="v2")
    assert "cuLaunchKernel" not in standin.names()


@needs_nvrtc
def test_a_failing_driver_call_is_one_sentence(standin):
    """Wiring test: not evidence of GPU behaviour. cuModuleLoadData answering
    CUDA_ERROR_NO_BINARY_FOR_GPU becomes a RuntimeError naming the call and the error."""
    standin.answers["cuModuleLoadData"] = (driver.CUresult.CUDA_ERROR_NO_BINARY_FOR_GPU, None)
    q, k, v = qkv(1, 1, 8, 32, torch.float32)
    with pytest.raises(RuntimeError, match=r"cuModuleLoadData\(.*sm_90\) failed: "
                                           r"CUDA_ERROR_NO_BINARY_FOR_GPU"):
        launch.launch_attention(q, k, v, version="v1")


def test_shared_memory_above_the_gpu_limit_is_refused(standin):
    """Wiring test: not evidence of GPU behaviour. A GPU that allows less opt-in shared memory
    than the kernel needs: a ValueError with the fix, and no module is loaded."""
    if not HAVE_NVRTC:
        pytest.skip("NVRTC or the CUDA headers are missing")
    standin.answers["cuDeviceGetAttribute"] = (driver.CUresult.CUDA_SUCCESS, 48 * 1024)
    q, k, v = qkv(1, 1, 8, 128, torch.float16)
    with pytest.raises(ValueError, match=r"needs 69632 bytes of shared memory per block; this "
                                         r"GPU allows 49152"):
        launch.launch_attention(q, k, v, version="v3")
    assert "cuModuleLoadData" not in standin.names()


def test_device_info_on_a_gpu_reads_the_driver(standin):
    """Wiring test: not evidence of GPU behaviour."""
    info = launch.device_info()
    assert info["gpu"] is True and info["arch"] == "sm_90" and info["sms"] == 132
    assert info["driver_cuda"] == "13.0"
    assert standin.names() == ["cuInit", "cuDriverGetVersion"]


def test_the_stand_in_refuses_what_the_real_binding_would(standin):
    """The stand-in is not a pass-through: a wrong arity, a negative grid size, a str where
    bytes are declared, an unknown function are refused as the real binding refuses them. A
    plain int where the docs declare a CUstream is refused too, which is stricter than the
    binding (it also takes int handles): the launcher is held to the declared types."""
    f = driver.CUfunction(0x10)
    good = dict(f=f, gridDimX=1, gridDimY=1, gridDimZ=1, blockDimX=32, blockDimY=1,
                blockDimZ=1, sharedMemBytes=0, hStream=driver.CUstream(STREAM),
                kernelParams=0x1000, extra=0)
    assert driver.cuLaunchKernel(**good) == (driver.CUresult.CUDA_SUCCESS,)
    with pytest.raises(TypeError, match="missing a required argument"):
        driver.cuLaunchKernel(*list(good.values())[:-1])
    with pytest.raises(TypeError, match=r"gridDimX=-1 must be an int in 0\.\.2\*\*32-1"):
        driver.cuLaunchKernel(**{**good, "gridDimX": -1})
    with pytest.raises(TypeError, match=r"hStream=\d+ must be CUstream"):
        driver.cuLaunchKernel(**{**good, "hStream": STREAM})
    with pytest.raises(TypeError, match="name must be bytes"):
        driver.cuModuleGetFunction(driver.CUmodule(1), "attention_v1")
    with pytest.raises(AttributeError):
        driver.cuLaunchAttention  # noqa: B018  (no such driver function)


@pytest.mark.parametrize("capability,version,dtype,match", [
    ((7, 0), "v1", torch.float32, r"this GPU is sm_70; andrea_edu's kernels need sm_75"),
    ((9, 9), "v1", torch.float32, r"cannot compile for this GPU \(sm_99"),
    ((7, 5), "v2", torch.bfloat16, r"bfloat16 tensor cores need sm_80 or newer; this GPU is "
                                   r"sm_75: use backend='[\w-]+'$"),
    ((7, 5), "v3", torch.float16, r"v3 \(backend='cuda-flash'\) cannot run on this GPU "
                                  r"\(sm_75\): cuda-flash needs sm_80 or newer.*: use "
                                  r"backend='[\w-]+'$"),
    ((7, 5), "v1", torch.float16, r"v1 \(backend='cuda-naive'\) cannot run on this GPU "
                                  r"\(sm_75\): head_dim=256 needs more than the 64 KB"),
])
def test_a_gpu_the_kernels_cannot_serve_is_refused_before_compiling(standin, monkeypatch,
                                                                     capability, version, dtype,
                                                                     match):
    """Wiring test: not evidence of GPU behaviour. The launcher reads the GPU's compute
    capability and refuses, with the backend to use instead, before NVRTC or a module load."""
    if not HAVE_NVRTC:
        pytest.skip("NVRTC or the CUDA headers are missing")
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability)
    q, k, v = qkv(1, 1, 8, 256 if "head_dim=256" in match else 64, dtype)
    with pytest.raises(RuntimeError, match=match):
        launch.launch_attention(q, k, v, version=version)
    assert "cuModuleLoadData" not in standin.names()


def test_a_broken_driver_reads_as_no_gpu_and_device_info_still_answers(standin, monkeypatch):
    """Wiring test: not evidence of GPU behaviour. torch.cuda.is_available raising (a broken
    driver install) is "no GPU", with no traceback; a failing cuDriverGetVersion leaves
    device_info's other fields and says why the driver version is unknown."""
    standin.answers["cuDriverGetVersion"] = (driver.CUresult.CUDA_ERROR_NO_DEVICE, 0)
    info = launch.device_info()
    assert info["driver_cuda"].startswith("unknown (CUDA driver call cuDriverGetVersion failed: "
                                          "CUDA_ERROR_NO_DEVICE")
    assert info["sms"] == 132

    def broken():
        raise RuntimeError("CUDA driver initialization failed")

    monkeypatch.setattr(torch.cuda, "is_available", broken)
    assert launch.has_gpu() is False


# ----------------------------------------------------------------------------- the timed region
class _Events:
    """Stand-ins for torch.cuda.Event and torch.cuda._sleep, logging into the driver stand-in's
    call list, over a device queue that behaves as a GPU's does: work runs in the order queued
    and never before the host queued it (an event lands at max(the device's clock, the host's));
    a sleep adds its cycles; each cuLaunchKernel LAUNCH_MS of device work (long beside the stand-
    in's host time per launch, so that a loaded machine does not drain the queue). `inside`:
    between a record that follows a sleep (a timed group's start) and the next record."""
    LAUNCH_MS = 5.0
    RATE = 1.0e6   # cycles per ms

    def __init__(self, standin):
        import time
        self.standin, self.inside, self.pending = standin, False, False
        self.perf, self.base, self.t, self.seen = time.perf_counter, time.perf_counter(), 0.0, 0

    def host(self) -> float:
        return (self.perf() - self.base) * 1e3

    def _advance(self) -> None:   # the launches queued since the device's last point
        n = sum(c.name == "cuLaunchKernel" for c in self.standin.calls[self.seen:])
        self.t += self.LAUNCH_MS * n

    def sync(self, *_):   # the host waits for the device: its clock moves on to the device's
        lag = self.t - self.host()
        if lag > 0:
            self.base -= lag / 1e3

    def event(self):
        outer = self

        class Ev:
            def record(self):
                outer._advance()
                outer.t = max(outer.t, outer.host())
                self.t = outer.t
                outer.inside, outer.pending = outer.pending, False
                outer.standin.calls.append(Call("event.record", {}))
                outer.seen = len(outer.standin.calls)

            def synchronize(self):
                outer.sync()

            def elapsed_time(self, end):
                return end.t - self.t
        return Ev()

    def sleep(self, cycles):
        self._advance()
        self.t = max(self.t, self.host()) + cycles / self.RATE
        self.pending = True
        self.standin.calls.append(Call("gpu.sleep", {"cycles": cycles}))
        self.seen = len(self.standin.calls)


@pytest.fixture
def timed_region(standin, monkeypatch):
    """The timing hooks stood in for, and every kind of per-call Python work a launch could do
    (reading the .cu, validating inputs, compiling, dispatching) counted when it happens between
    a start and an end record."""
    from pathlib import Path

    from andrea_edu.bench import timing
    from andrea_edu.kernels import spec as kspec
    ev = _Events(standin)
    monkeypatch.setattr(timing, "_event", ev.event)
    monkeypatch.setattr(timing, "_gpu_sleep", ev.sleep)
    monkeypatch.setattr(timing, "_CYCLES_PER_MS", [])
    inside: list[str] = []

    def guard(name, real):
        def wrapped(*a, **kw):
            if ev.inside:
                inside.append(name)
            return real(*a, **kw)
        return wrapped

    import builtins
    monkeypatch.setattr(builtins, "open", guard("open", builtins.open))
    monkeypatch.setattr(Path, "read_text", guard("Path.read_text", Path.read_text))
    monkeypatch.setattr(kspec.KernelSpec, "source_text",
                        guard("KernelSpec.source_text", kspec.KernelSpec.source_text))
    monkeypatch.setattr(launch, "check_launch_inputs",
                        guard("check_launch_inputs", launch.check_launch_inputs))
    monkeypatch.setattr(launch, "compile_attention",
                        guard("compile_attention", launch.compile_attention))
    monkeypatch.setattr(launch, "validate_qkv", guard("validate_qkv", launch.validate_qkv))
    return SimpleNamespace(standin=standin, inside=inside, timing=timing)


def _between_records(names: list[str]) -> list[list[str]]:
    """The calls between each two consecutive event records, empty stretches left out."""
    groups: list[list[str]] = []
    cur: list[str] | None = None
    for n in names:
        if n == "event.record":
            if cur:
                groups.append(cur)
            cur = []
        elif cur is not None:
            cur.append(n)
    return groups


@needs_nvrtc
def test_the_timed_region_holds_the_launches_and_nothing_else(timed_region):
    """Wiring test: not evidence of GPU behaviour. A prepared v3 launch timed by time_fns: each
    sample is one sleep, then between its two event records only cuLaunchKernel calls, as many
    as calls_per_sample; no .cu read, no validation, no compile, no dispatch in there. The
    host's time per call is reported as its own number."""
    s = timed_region.standin
    q, k, v = qkv(1, 2, 130, 64, torch.bfloat16)
    prepared = launch.prepare_attention(q, k, v, causal=True, version="v3")
    n0 = len(s.calls)
    t = timed_region.timing.time_fns({"v3": prepared}, "cuda", repeats=5, warmup=2)["v3"]
    groups = _between_records(s.names()[n0:])
    # the sleep-rate calibration, then per sample: a record, the head start, the start record,
    # the launches, the end record (the first record lets the device measure the sleep)
    assert len(groups) == 1 + 2 * 5, groups
    assert groups[0] == ["gpu.sleep"]
    for sl, g in zip(groups[1::2], groups[2::2]):
        assert sl == ["gpu.sleep"] and g == ["cuLaunchKernel"] * t["calls_per_sample"], g[:5]
    assert t["calls_per_sample"] > 1 and timed_region.inside == []
    assert s.names()[n0:].count("gpu.sleep") == 1 + 5   # the host runs ahead of every group
    assert t["median_ms"] == pytest.approx(_Events.LAUNCH_MS)
    assert t["timer"] == "cuda-events-queued" and not t["host_bound"]
    assert t["host_ms_per_call"] > 0 and t["quality_ok"], t


@needs_nvrtc
def test_a_drained_queue_reads_as_host_bound(timed_region, monkeypatch):
    """Wiring test: with no head start (sleep=False) and launches that take the device less
    time than the host takes to queue them, the queue drains and the events hold the host's
    pace: the timer says host-bound, from the device's own time, not from the sleep it meant."""
    monkeypatch.setattr(_Events, "LAUNCH_MS", 1e-6)
    q, k, v = qkv(1, 2, 130, 64, torch.bfloat16)
    prepared = launch.prepare_attention(q, k, v, causal=True, version="v3")
    t = timed_region.timing.time_fns({"v3": prepared}, "cuda", repeats=3, warmup=1,
                                     sleep=False)["v3"]
    assert t["host_bound"] and not t["quality_ok"], t


@needs_nvrtc
def test_the_guard_sees_python_work_when_the_whole_path_is_timed(timed_region):
    """Wiring test: the check above can fail: attention(backend="cuda-flash") timed whole
    re-validates and dispatches inside the timed region, and the guard says so."""
    q, k, v = qkv(1, 2, 130, 64, torch.bfloat16)
    timed_region.timing.time_fns(
        {"whole": lambda: attention(q, k, v, causal=True, backend="cuda-flash")}, "cuda",
        repeats=3, warmup=1)
    assert {"check_launch_inputs", "compile_attention"} <= set(timed_region.inside)


@needs_nvrtc
def test_a_prepared_launch_launches_what_launch_attention_launches(standin):
    """Wiring test: not evidence of GPU behaviour. The same grid, block, shared memory and
    parameters, one cuLaunchKernel per call, into the one output tensor."""
    q, k, v = qkv(2, 3, 77, 64, torch.float16)
    ck = nvrtc.compile_attention("v2", 64, torch.float16, "sm_90")
    standin.param_sizes = ptx_params(ck)
    out = launch.launch_attention(q, k, v, causal=True, version="v2")
    direct = standin.last("cuLaunchKernel").args
    p = launch.prepare_attention(q, k, v, causal=True, version="v2")
    n = len(standin.calls)
    assert p() is p() is p.out
    assert standin.names()[n:] == ["cuLaunchKernel"] * 2
    again = standin.last("cuLaunchKernel").args
    for key in ("gridDimX", "gridDimY", "gridDimZ", "blockDimX", "sharedMemBytes"):
        assert again[key] == direct[key]
    assert standin.params_seen[-1][:3] == standin.params_seen[0][:3]   # q, k, v
    assert standin.params_seen[-1][3] == p.out.data_ptr() != out.data_ptr()
    assert standin.params_seen[-1][4:] == standin.params_seen[0][4:]
    with pytest.raises(ValueError, match="out must be a contiguous"):
        launch.prepare_attention(q, k, v, version="v2", out=torch.empty(1))


@needs_nvrtc
def test_a_sticky_fault_at_launch_is_one_sentence_and_is_known_as_sticky(standin):
    """Wiring test: a launch answering CUDA_ERROR_ILLEGAL_ADDRESS raises the one-line
    RuntimeError, and launch.is_sticky_error recognises it (the bench then stops the case loop,
    gpucheck that process)."""
    q, k, v = qkv(1, 1, 17, 64, torch.bfloat16)
    p = launch.prepare_attention(q, k, v, version="v3")
    standin.answers["cuLaunchKernel"] = (driver.CUresult.CUDA_ERROR_ILLEGAL_ADDRESS,)
    with pytest.raises(RuntimeError, match="CUDA_ERROR_ILLEGAL_ADDRESS") as e:
        p()
    assert launch.is_sticky_error(str(e.value))
    assert not launch.is_sticky_error("CUDA driver call cuModuleLoadData failed: "
                                      "CUDA_ERROR_NO_BINARY_FOR_GPU")


def test_the_cu_text_is_read_once_per_file_version(tmp_path, monkeypatch):
    """KernelSpec.source_text (asked for on every launch, through the constants) reads a .cu
    file once and then answers from memory, until the file changes (size or mtime)."""
    import dataclasses
    import os
    from pathlib import Path

    from andrea_edu.kernels import registry
    from andrea_edu.kernels import spec as kspec
    spec = registry.get("v2")
    (tmp_path / spec.source).write_text(spec.source_text())
    mine = dataclasses.replace(spec, source_dir=tmp_path)
    reads: list[str] = []
    real = Path.read_text

    def counting(self, *a, **k):
        reads.append(str(self))
        return real(self, *a, **k)
    monkeypatch.setattr(Path, "read_text", counting)
    monkeypatch.setattr(kspec, "_SOURCE_TEXT", {})
    path = tmp_path / spec.source
    for _ in range(5):
        assert mine.constants()["V2_BK"] == spec.constants()["V2_BK"]
    assert reads.count(str(path)) == 1
    real_text = real(path)
    path.write_text(real_text.replace("constexpr int V2_BK = 32;", "constexpr int V2_BK = 32; "))
    os.utime(path, ns=(1, 1))
    mine.source_text()
    assert reads.count(str(path)) == 2   # read again once the file changed
