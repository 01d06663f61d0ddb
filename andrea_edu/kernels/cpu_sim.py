"""CUDA C++ on the CPU: a kernel's own .cu source compiled by g++ and run block by block.

Chapter "One kernel, many heads" (the naive kernel, backend="cpu-sim") and its kernel puzzles.
The host simulator (package data in kernels/host_sim: sim.h, ptx_sim.h, launch.h and stand-in
headers) compiles the kernel's text with the host C++ compiler against stand-ins for
cuda_fp16.h, cuda_bf16.h and mma.h, then runs every block of the grid with one cooperative
fiber per CUDA thread.

What it models: the kernel's own indexing, loops, tails and masks; __syncthreads/__syncwarp and
the warp shuffles (threads resume in a random order at every barrier, seeded, and each pass of
the scheduler runs a random half of the runnable threads, so a missing barrier reads stale or
NaN data); a barrier that not every thread reaches (a deadlock, reported); shared memory
(dynamic and static) and outputs filled with NaN before the run, so a read of memory no thread
wrote shows; a PROT_NONE guard page after every buffer (and before it, with NaN slack between),
so a read or write past the end becomes a sentence naming the buffer, block and thread; WMMA
pointer alignment and ldm rules; v3's PTX (mma.sync m16n8k16, ldmatrix, cp.async) with the
PTX ISA's fragment layouts (ptx_sim.h).
What it does not model: time (nothing here says how fast a GPU runs the kernel); WMMA's lane
layout (opaque on a GPU; here every lane holds the whole tile); warps running in lockstep
(independent thread scheduling is assumed, so code that relies on implicit warp synchrony is
flagged, as it should be since Volta); memory ordering beyond barriers, atomics' contention,
bank conflicts, registers, occupancy (NVRTC and the SASS reader give those); integer overflow
and floating-point exceptions behave as the CPU's. Overruns inside one static __shared__ array
into the next are not caught (only the last ends at the guard page).

    compiler() -> path of g++ (or c++); CompilerMissingError names what to install
    has_compiler() -> bool
    build(source, call, defines=()) -> Path  the simulator binary, cached by content hash under
                                            cache_dir()/host_sim (the NVRTC cache's folder)
    launch(exe, grid, block, shared_bytes, buffers, scalars, seed=1, smem_fill="nan") -> SimRun
    run_attention(q, k, v, causal, version, seed=1) -> out  a registered kernel version's .cu
            with the grid, threads and shared memory the GPU launcher passes (backend="cpu-sim")
    host_source(text) -> the .cu text with its __shared__ declarations pointed at the simulator
Errors: CompilerMissingError, SimulatorError (the simulator refused or crashed: its sentence).
"""
from __future__ import annotations

import functools
import hashlib
import importlib.resources
import math
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import torch

from andrea_edu.kernels import registry
from andrea_edu.kernels.nvrtc import cache_dir, shared_bytes
from andrea_edu.kernels.spec import CTYPE

INSTALL_HINT = ("no C++ compiler (g++) found: the CPU simulator compiles the kernel's CUDA C++ "
                "with it; install it (Debian/Ubuntu and Colab: apt-get install -y g++), or use "
                "backend='emulator' (the Python model of the kernels' blocks)")
FLAGS = ("-std=c++17", "-O2", "-w", "-fno-strict-aliasing",
         "-U_FORTIFY_SOURCE")  # its longjmp check refuses a jump onto a fiber's stack
RUN_TIMEOUT_S = 120


class CompilerMissingError(RuntimeError):
    """No host C++ compiler: the simulator cannot build a kernel."""


class SimulatorError(RuntimeError):
    """The simulated kernel failed: a compile error, a crash or a refusal, in one sentence
    (`.kind`: "compile", "out-of-bounds", "deadlock", "timeout", "refused"; `.detail`: the
    compiler's or simulator's own text)."""

    def __init__(self, msg: str, kind: str, detail: str = ""):
        super().__init__(msg)
        self.kind, self.detail = kind, detail


def compiler() -> str:
    """The host C++ compiler ($CXX, else g++, else c++); CompilerMissingError otherwise."""
    for name in (os.environ.get("CXX") or "", "g++", "c++"):
        found = shutil.which(name) if name else None
        if found:
            return found
    raise CompilerMissingError(INSTALL_HINT)


def has_compiler() -> bool:
    """Whether compiler() finds one (a chapter falls back to the emulator, saying so, if not)."""
    try:
        compiler()
    except CompilerMissingError:
        return False
    return True


def sim_dir() -> Path:
    """Where the simulator's headers are (package data)."""
    return Path(str(importlib.resources.files("andrea_edu.kernels").joinpath("host_sim")))


_SHARED_EXTERN = re.compile(r"extern\s+__shared__\s+(?:__align__\(\d+\)\s+)?([\w: ]+?)\s+(\w+)\s*\[\s*\]\s*;")
_SHARED_STATIC = re.compile(r"(?<!extern )__shared__\s+(?:__align__\(\d+\)\s+)?([\w:<>, ]+?)\s+"
                            r"(\w+)\s*((?:\[[^\]]+\])*)\s*;")


def host_source(text: str) -> str:
    """The kernel text with `extern __shared__ T s[];` pointed at the simulator's dynamic buffer
    and each `__shared__ T s[N]...;` at a per-block slice of its static one."""
    text = _SHARED_EXTERN.sub(r"\1* \2 = static_cast<\1*>(::sim::g_smem);", text)

    def static(m: re.Match) -> str:
        t, name, dims = m.group(1).strip(), m.group(2), m.group(3)
        return (f"{t} (&{name}){dims} = *static_cast<{t} (*){dims}>(::sim::static_shared("
                f"sizeof({t}{dims}), alignof({t})));") if dims else \
            f"{t}& {name} = *static_cast<{t}*>(::sim::static_shared(sizeof({t}), alignof({t})));"
    return _SHARED_STATIC.sub(static, text)


@functools.lru_cache(maxsize=1)
def _headers_digest() -> str:
    h = hashlib.sha256()
    for p in sorted(sim_dir().rglob("*.h")):
        h.update(p.name.encode() + p.read_bytes())
    return h.hexdigest()


@functools.lru_cache(maxsize=4)
def _compiler_id(cxx: str) -> str:
    run = subprocess.run([cxx, "--version"], capture_output=True, text=True, timeout=60)
    return run.stdout.splitlines()[0] if run.stdout else cxx


def build(source: str, call: str, defines: tuple[str, ...] = ()) -> Path:
    """Compile `source` (a kernel's CUDA C++) with `call` (the body of sim_launch, e.g.
    "andrea::k<float,1>((const float*)p[0], (int)s[0]);") into a simulator binary; returns its
    path. Cached by the sha256 of the text, the defines, the flags, the compiler and the
    simulator's headers: a second build of the same kernel is a file lookup."""
    cxx = compiler()
    unit = ("#define ANDREA_PTX_EMULATED 1\n#include \"ptx_sim.h\"\n#line 1 \"kernel.cu\"\n"
            f"{host_source(source)}\n"
            f"void sim_launch(void* const* p, const double* s) {{ (void)p; (void)s; {call} }}\n"
            "#include \"launch.h\"\n")
    key = hashlib.sha256("\0".join([unit, *defines, *FLAGS, _compiler_id(cxx),
                                    _headers_digest()]).encode()).hexdigest()[:24]
    folder = cache_dir() / "host_sim"
    exe = folder / f"sim_{key}"
    if exe.is_file():
        return exe
    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=folder) as tmp:
        cpp = Path(tmp) / "unit.cpp"
        cpp.write_text(unit)
        inc = sim_dir()
        cmd = [cxx, *FLAGS, f"-I{inc}", f"-I{inc / 'include'}",
               *(f"-D{d}" for d in defines), str(cpp), "-o", str(Path(tmp) / "exe")]
        run = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        if run.returncode != 0:
            errors = [ln for ln in run.stderr.splitlines() if "error" in ln]
            first = errors[0] if errors else run.stderr.strip()[-300:]
            raise SimulatorError(f"the C++ compiler rejected the kernel: {first}", "compile",
                                 run.stderr)
        os.replace(Path(tmp) / "exe", exe)
    return exe


@dataclass
class Buffer:
    """One pointer argument: its bytes in (None: filled with `fill`), whether to read it back."""
    name: str
    nbytes: int
    data: bytes | None = None
    fill: str = "nan"           # "nan" (0xff bytes) or "zero", when data is None
    read_back: bool = True


@dataclass
class SimRun:
    """One simulated launch: each read-back buffer's bytes (by name), and the exit code."""
    outputs: dict
    returncode: int


def launch(exe: Path, grid, block, shared: int, buffers: list[Buffer], scalars: list[float],
           seed: int = 1, smem_fill: str = "nan", timeout: float = RUN_TIMEOUT_S) -> SimRun:
    """Run a built simulator over `grid` blocks of `block` threads with `shared` bytes of dynamic
    shared memory; SimulatorError with the simulator's sentence when it crashes or refuses."""
    g = tuple(grid) + (1,) * (3 - len(tuple(grid)))
    b = tuple(block) + (1,) * (3 - len(tuple(block)))
    with tempfile.TemporaryDirectory() as tmp:
        lines = [f"grid {g[0]} {g[1]} {g[2]}", f"block {b[0]} {b[1]} {b[2]}", f"smem {shared}",
                 f"seed {seed}", f"smem_fill {smem_fill}", f"buffers {len(buffers)}"]
        for i, buf in enumerate(buffers):
            src, dst = "-", (str(Path(tmp) / f"out{i}") if buf.read_back else "-")
            if buf.data is not None:
                src = str(Path(tmp) / f"in{i}")
                Path(src).write_bytes(buf.data)
            how = "file" if buf.data is not None else buf.fill
            label = re.sub(r"\W", "_", buf.name)
            lines.append(f"{buf.nbytes} {how} {src} {dst} {label}")
        lines += [f"scalars {len(scalars)}", *(repr(float(s)) for s in scalars)]
        jobfile = Path(tmp) / "job.txt"
        jobfile.write_text("\n".join(lines) + "\n")
        try:
            run = subprocess.run([str(exe), str(jobfile)], capture_output=True, text=True,
                                 timeout=timeout)
        except subprocess.TimeoutExpired:
            raise SimulatorError(f"the kernel did not finish within {timeout:.0f} s on the CPU "
                                 f"(a loop that never ends?)", "timeout") from None
        if run.returncode != 0:
            raise _failure(run.returncode, run.stderr)
        outs = {buf.name: (Path(tmp) / f"out{i}").read_bytes()
                for i, buf in enumerate(buffers) if buf.read_back}
    return SimRun(outs, run.returncode)


def _failure(rc: int, stderr: str) -> SimulatorError:
    said = next((ln[5:] for ln in stderr.splitlines() if ln.startswith("sim: ")), "")
    if rc == 4:
        return SimulatorError(f"out-of-bounds access: {said.removeprefix('out of bounds: ')}",
                              "out-of-bounds", stderr)
    if "deadlock" in said:
        return SimulatorError(f"{said}: some threads of a block wait at a __syncthreads() (or "
                              f"shuffle) that others never reach, e.g. one inside an if",
                              "deadlock", stderr)
    if said:
        return SimulatorError(f"the simulator stopped the kernel: {said}", "refused", stderr)
    return SimulatorError(f"the simulated kernel crashed (exit code {rc}): "
                          f"{stderr.strip()[-300:] or 'no message'}", "crash", stderr)


def _raw(t: torch.Tensor) -> bytes:
    return t.detach().contiguous().cpu().view(torch.uint8).numpy().tobytes()


def run_attention(q, k, v, causal: bool, version: str, seed: int = 1):
    """Kernel `version`'s .cu run on the CPU: the template the launcher compiles (the spec's
    kernel and tile), with the grid, threads and dynamic shared memory it launches with
    (KernelSpec.grid, .threads, .shared_bytes, as kernels.launch passes them). q, k, v:
    contiguous CPU tensors [B, nh, T, hs]; returns out (B, nh, T, hs), q's dtype."""
    spec = registry.get(version)
    B, nh, T, hs = q.shape
    tile = spec.tile(hs, q.dtype)
    ct = CTYPE[q.dtype]
    smem = shared_bytes(version, hs, q.dtype)
    # the template's int arguments after the dtype, as NVRTC's name expression spells them
    targs = ", ".join(str(a) for a in spec.template_args(tile))
    call = (f"andrea::{spec.kernel}<{ct}, {targs}>((const {ct}*)p[0], (const {ct}*)p[1], "
            f"(const {ct}*)p[2], ({ct}*)p[3], (int)s[0], (int)s[1], (float)s[2], (int)s[3]);")
    exe = build(spec.source_text(), call, (f"ANDREA_SMEM_BYTES={smem}",))
    n = q.numel() * q.element_size()
    bufs = [Buffer(name, n, _raw(t), read_back=False) for name, t in (("q", q), ("k", k), ("v", v))]
    bufs.append(Buffer("out", n))                        # NaN until written
    grid = spec.grid(B, nh, T, spec.max_head_dim(tile))
    run = launch(exe, grid, (spec.threads,), smem, bufs, [T, hs, 1.0 / math.sqrt(hs), int(causal)],
                 seed=seed)
    raw = bytearray(run.outputs["out"])
    return torch.frombuffer(raw, dtype=torch.uint8).view(q.dtype).view(B, nh, T, hs).clone()
