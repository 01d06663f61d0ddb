"""Kernels written in a notebook cell: compiled by NVRTC, run on the CPU simulator, checked in words.

Chapter "One kernel, many heads" (the naive kernel, the kernel puzzles). A reader writes a
__global__ function in a `%%cuda NAME` cell (or a Python string); `run_kernel` then

1. compiles it with NVRTC for sm_80 (kernels.toolkit, nvrtc.parse_ptxas_log): registers,
   shared memory, spills, PTX, and SASS when cuobjdump is present (kernels.nvrtc's disassembly
   and cache, kernels.sass's parser); skipped with a note when NVRTC is not installed;
2. runs it on the host simulator (kernels.cpu_sim) under two barrier orders (seeds), shared
   memory and checked outputs filled with NaN, every buffer followed by a guard page;
3. says in one sentence what went wrong, or that nothing did: a compile error; an out-of-bounds
   access (buffer, block, thread); a deadlock (a barrier not every thread reaches); a race
   (two barrier orders disagree), named a missing __syncthreads when one order reads NaN;
   shared memory read before any thread wrote it (the NaN goes away when shared memory starts
   as zeros); an output element never written; a wrong value at (batch, head, row, column),
   against `expect` with the tolerances of andrea_edu.dispatch.TOLERANCE.
It runs on the CPU even where a GPU is present (launching an arbitrary signature on the GPU is
not wired: kernels.launch knows the attention kernels' arguments only).

    run_kernel(source, grid, block, *args, expect=None, shared_bytes=0, seeds=(1, 2)) -> Report
    compile_cell(source) -> dict (registers, shared bytes, spills, PTX lines, SASS mix) or
                            {"skipped": why}
    parameters(source) -> [Param]   the __global__ function's name and parameters
    evidence_line(compile_cell(source)) -> one line: registers, shared memory, spills, PTX, SASS
The `%%cuda NAME` cell magic that feeds it lives in notebook.cuda_magic.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import torch

from andrea_edu.dispatch import TOLERANCE
from andrea_edu.kernels import cpu_sim, nvrtc, sass
from andrea_edu.kernels import toolkit as tk

CTYPES = {"float": torch.float32, "__half": torch.float16, "half": torch.float16,
          "__nv_bfloat16": torch.bfloat16, "int": torch.int32}


@dataclass(frozen=True)
class Param:
    """One parameter of the __global__ function: `const float* q` -> ("q", "float", True, True)."""
    name: str
    ctype: str
    pointer: bool
    const: bool


def parameters(source: str) -> tuple[str, list[Param]]:
    """(kernel name, its parameters) of the one __global__ function in `source`; ValueError
    when there is none, several, or a parameter type the cell cannot pass."""
    found = re.findall(r"__global__\s+(?:void\s+)?(?:__launch_bounds__\([^)]*\)\s+)?void\s+"
                       r"(\w+)\s*\(([^)]*)\)", source)
    if len(found) != 1:
        raise ValueError(f"source: a kernel cell holds exactly one __global__ void function "
                         f"(not a template); found {len(found)}")
    name, plist = found[0]
    params = []
    for raw in filter(None, (p.strip() for p in plist.split(","))):
        m = re.fullmatch(r"(const\s+)?([\w:]+)\s*(\*?)\s*(?:const\s*)?(?:__restrict__\s*)?(\w+)", raw)
        if not m or m.group(2) not in CTYPES:
            raise ValueError(f"source: parameter {raw!r} of {name}: a cell passes pointers to "
                             f"and values of {', '.join(CTYPES)} only")
        params.append(Param(m.group(4), m.group(2), bool(m.group(3)), bool(m.group(1))))
    return name, params


def _call(name: str, params: list[Param]) -> str:
    """The body of sim_launch: the kernel called with p[i] (pointers) and s[j] (values)."""
    args, ip, js = [], 0, 0
    for p in params:
        if p.pointer:
            args.append(f"({'const ' if p.const else ''}{p.ctype}*)p[{ip}]")
            ip += 1
        else:
            args.append(f"({p.ctype})s[{js}]")
            js += 1
    return f"{name}({', '.join(args)});"


def compile_cell(source: str, arch: str = "sm_80") -> dict:
    """NVRTC's evidence for the cell's kernel: registers, shared bytes, spills, PTX lines and
    the SASS instruction mix ({"skipped": why} when NVRTC or its headers are missing)."""
    name, _ = parameters(source)
    try:
        lib = tk._import_nvrtc()
        inc = tk.include_dirs()
    except tk.NvrtcUnavailableError as e:
        return {"skipped": str(e).split(";")[0]}
    opts = ["--std=c++17", f"--gpu-architecture={arch}", "--ptxas-options=-v",
            *(f"-I{d}" for d in inc)]
    lowered, ptx_text, cubin, log = tk.compile_program(
        lib, source, "cell.cu", name, opts,
        lambda log: f"NVRTC could not compile {name}: "
                    f"{next((ln for ln in log.splitlines() if 'error' in ln), log)}")
    res = nvrtc.parse_ptxas_log(log, lowered)
    ck = nvrtc.CompiledKernel("cell", 0, torch.float32, arch, name, lowered, ptx_text, cubin,
                              log, res, 0.0)
    text = ck.sass()
    mix: dict[str, int] = {}
    for ins in sass.parse_sass(text or ""):
        k = sass.klass(ins)
        if k:
            mix[k] = mix.get(k, 0) + 1
    return {"arch": arch, "registers": res.registers, "static_shared_bytes": res.static_shared_bytes,
            "spill_bytes": res.spill_stores + res.spill_loads,
            "ptx_lines": len(ck.ptx.splitlines()), "sass_mix": mix if text else None}


@dataclass
class Report:
    """What run_kernel found. ok: the kernel matched `expect` under every barrier order (or,
    with no expect, ran cleanly and agreed with itself); kind: "ok", "compile", "out-of-bounds",
    "deadlock", "timeout", "refused", "crash", "race", "missing-sync", "uninitialised-shared",
    "unwritten", "nan", "wrong", "no-compiler" (not run: no C++ compiler here); verdict: one
    sentence; outputs: {parameter: tensor} of the first run; where: the index of the first bad
    element, or None; nvrtc: compile_cell's dict."""
    ok: bool
    kind: str
    verdict: str
    outputs: dict = field(default_factory=dict)
    where: tuple | None = None
    nvrtc: dict = field(default_factory=dict)

    def __str__(self) -> str:
        return ("ok: " if self.ok else "not yet: ") + self.verdict

    def _repr_markdown_(self) -> str:
        return f"**{'ok' if self.ok else 'not yet'}**: {self.verdict}"


def _place(idx: tuple, shape: tuple) -> str:
    """(batch, head, row, column) words for a 4-d output, index words otherwise."""
    if len(shape) == 4:
        return "(batch {}, head {}, row {}, column {})".format(*idx)
    return f"index {tuple(idx) if len(idx) != 1 else idx[0]}"


def _first(mask: torch.Tensor) -> tuple:
    return tuple(int(i) for i in mask.nonzero()[0])


def run_kernel(source: str, grid, block, *args: Any, expect=None, shared_bytes: int = 0,
               seeds: tuple = (1, 2), evidence: bool = True) -> Report:
    """Compile `source` (one __global__ void function), launch it over `grid` x `block` on the
    CPU with `args` (tensors for pointer parameters, numbers for the rest, in order) and say
    what happened. expect: a tensor for the one non-const pointer parameter, or {name:
    tensor}; those buffers start as NaN, so the kernel must write every element. The other
    pointer buffers start as the tensors' bytes."""
    name, params = parameters(source)
    if len(args) != len(params):
        raise ValueError(f"args: {name} takes {len(params)} arguments "
                         f"({', '.join(p.name for p in params)}); got {len(args)}")
    outs = [p for p in params if p.pointer and not p.const]
    if expect is not None and not isinstance(expect, dict):
        if len(outs) != 1:
            raise ValueError(f"expect: {name} writes {len(outs)} buffers; pass {{name: tensor}}")
        expect = {outs[0].name: expect}
    expect = expect or {}
    bufs, scalars, shapes = [], [], {}
    for p, a in zip(params, args):
        if p.pointer:
            if not isinstance(a, torch.Tensor) or a.dtype != CTYPES[p.ctype]:
                raise TypeError(f"args: {p.name} is a {'const ' if p.const else ''}{p.ctype}*; "
                                f"pass a {CTYPES[p.ctype]} tensor, got "
                                f"{a.dtype if isinstance(a, torch.Tensor) else type(a).__name__}")
            shapes[p.name] = (tuple(a.shape), a.dtype)
            if p.name in expect and tuple(expect[p.name].shape) != tuple(a.shape):
                raise ValueError(f"expect: {p.name} has shape {tuple(a.shape)}, expect "
                                 f"{tuple(expect[p.name].shape)}")
            data = None if p.name in expect else cpu_sim._raw(a)
            bufs.append(cpu_sim.Buffer(p.name, a.numel() * a.element_size(), data,
                                       read_back=not p.const))
        else:
            if not isinstance(a, (int, float)) or isinstance(a, bool) and p.ctype != "int":
                raise TypeError(f"args: {p.name} is a {p.ctype}; got {type(a).__name__}")
            scalars.append(float(a))
    unknown = set(expect) - {p.name for p in outs}
    if unknown:
        raise ValueError(f"expect: {sorted(unknown)} are not written by {name}; it writes "
                         f"{[p.name for p in outs]}")
    evid: dict = {}
    if evidence:
        try:
            evid = compile_cell(source)
        except tk.CompileError as e:
            return Report(False, "compile", str(e), nvrtc={"log": e.log})
    try:
        exe = cpu_sim.build(source, _call(name, params))

        def run(seed: int, smem_fill: str = "nan", out_fill: str = "nan") -> dict:
            for b in bufs:
                b.fill = out_fill
            r = cpu_sim.launch(exe, grid, block, shared_bytes, bufs, scalars, seed, smem_fill)
            return {k: torch.frombuffer(bytearray(v), dtype=torch.uint8).view(shapes[k][1])
                    .view(shapes[k][0]) for k, v in r.outputs.items()}
        runs = [run(s) for s in seeds]
    except cpu_sim.SimulatorError as e:
        return Report(False, e.kind, str(e), nvrtc=evid)
    except cpu_sim.CompilerMissingError as e:
        return Report(False, "no-compiler", f"not run: {e}", nvrtc=evid)
    first = runs[0]
    for other, seed in zip(runs[1:], seeds[1:]):
        for k, t in first.items():
            same = (t == other[k]) | (torch.isnan(t.float()) & torch.isnan(other[k].float()))
            if not bool(same.all()):
                idx = _first(~same)
                nan = bool(torch.isnan(t.float()).any() or torch.isnan(other[k].float()).any())
                what = (f"{k} at {_place(idx, t.shape)} is {float(t[idx]):.6g} under one barrier "
                        f"order (seed {seeds[0]}) and {float(other[k][idx]):.6g} under another "
                        f"(seed {seed})")
                if nan:
                    return Report(False, "missing-sync", f"a missing __syncthreads(): {what}; a "
                                  f"thread read shared memory before the thread that writes it "
                                  f"got there", first, idx, evid)
                return Report(False, "race", f"a race: {what}; threads read or write the same "
                              f"place with no barrier ordering them", first, idx, evid)
    for k, t in first.items():
        bad = torch.isnan(t.float())
        if not bool(bad.any()):
            continue
        idx = _first(bad)
        where = f"{k} at {_place(idx, t.shape)} is NaN"
        if not bool(torch.isnan(run(seeds[0], smem_fill="zero")[k].float()[idx])):
            return Report(False, "uninitialised-shared", f"{where}: it read shared memory that no "
                          f"thread wrote (with shared memory starting as zeros it is a number)",
                          first, idx, evid)
        if k in expect and not bool(torch.isnan(run(seeds[0], out_fill="zero")[k].float()[idx])):
            n = int(bad.sum())
            return Report(False, "unwritten", f"{where}: no thread wrote it ({n} of "
                          f"{t.numel()} elements never written; is the grid or a loop too "
                          f"small?)", first, idx, evid)
        return Report(False, "nan", f"{where}: computed as NaN (0/0, inf - inf, or a value "
                      f"read from past the start of a buffer)", first, idx, evid)
    for k, want in expect.items():
        got = first[k]
        atol, rtol = TOLERANCE.get(got.dtype, (0.0, 0.0))
        diff = (got.float() - want.float()).abs()
        bad = diff > atol + rtol * want.float().abs()
        inf = torch.isinf(want.float()) | torch.isinf(got.float())   # -inf must be -inf exactly
        bad |= inf & (got.float() != want.float())
        if bool(bad.any()):
            idx = _first(bad)
            return Report(False, "wrong", f"{k} at {_place(idx, got.shape)} is "
                          f"{float(got[idx]):.6g}, expected {float(want[idx]):.6g} "
                          f"({int(bad.sum())} of {got.numel()} elements outside "
                          f"|err| <= {atol:g} + {rtol:g}*|expected|)", first, idx, evid)
    checked = f"matches the expected values at all {sum(first[k].numel() for k in expect)} " \
              f"elements" if expect else "ran cleanly"
    return Report(True, "ok", f"{name} {checked} under {len(seeds)} barrier orders; no "
                  f"out-of-bounds access, no read of unwritten shared memory", first, None, evid)


def evidence_line(ev: dict) -> str:
    """One line of NVRTC evidence, e.g. 'sm_80: 40 registers, 0 bytes static shared memory,
    no spills, 212 PTX lines; SASS: 12 LDG, 2 STG'."""
    if "skipped" in ev:
        return f"NVRTC not used: {ev['skipped']}"
    mix = ev.get("sass_mix")
    sass_txt = ("; SASS: " + ", ".join(f"{n} {k}" for k, n in sorted(mix.items())) if mix
                else "; SASS: cuobjdump not installed")
    return (f"{ev['arch']}: {ev['registers']} registers, {ev['static_shared_bytes']} bytes static "
            f"shared memory, {ev['spill_bytes'] or 'no'} spill bytes, {ev['ptx_lines']} PTX "
            f"lines{sass_txt}")
