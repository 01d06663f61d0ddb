"""Run-time compilation of the attention kernels with NVRTC: PTX, CUBIN, registers, shared memory.

Introduced in the chapter "One kernel, many heads" (compilation, grid) and used again in
"The configuration mirrors the hardware" (tensor-core instructions, registers, occupancy).
Works on a machine with no GPU and no driver: `cuda.bindings.nvrtc` compiles for a named
architecture, and ptxas (inside NVRTC) reports each kernel's resources.

Public API
    compile_attention(version, head_dim, dtype, arch="sm_90", use_cache=True) -> CompiledKernel
        version "v1" (kernels/attention_v1.cu), "v2" (kernels/attention_v2_wmma.cu) or "v3"
        (kernels/attention_v3_flash.cu, sm_80+ only).
        One specialization per (version, tile, dtype, arch), compiled once and cached in memory
        and on disk (ANDREA_CACHE_DIR, default ~/.cache/andrea_edu/kernels; key: source hash,
        options, NVRTC and header versions). Each entry's meta file records the length and
        sha256 of its .ptx and .cubin; they are checked on every load, and an entry that fails
        (truncated, emptied, replaced, a meta that is not an object) is recompiled with a
        warning that names its path. The tile is v1's CHUNKS = ceil(head_dim/32) rounded
        up to 1, 2, 4 or 8 (so head_dim 72 and 100 share a kernel), or v2's and v3's
        HD = head_dim.
        `causal` is a kernel argument, not a specialization.
    CompiledKernel: .ptx (str), .cubin (bytes), .resources (Resources), .compile_seconds,
        .threads_per_block, .grid(B, nh, T), .has_tensor_core_instructions(), .sass() (str or
        None when cuobjdump/nvdisasm are missing), .tensor_core_instructions() (PTX lines),
        .name_expression ("andrea::attention_v2_wmma<__half, 64>"), .lowered_name, .tile,
        .max_head_dim, .version, .dtype, .arch, .log (NVRTC/ptxas), .from_cache.
    Resources(registers, shared_bytes, static_shared_bytes, dynamic_shared_bytes,
        spill_stores, spill_loads, stack_bytes): shared_bytes = static + the dynamic bytes the
        launcher asks for.
    specializations() -> [(version, head_dim, dtype)]: every kernel the library can launch
        (12 for v1, 16 for v2, 8 for v3, per arch); compile_all(archs=ARCHS, workers=2)
        compiles them all.
    shared_bytes(version, head_dim, dtype): the dynamic shared memory a launch requests.
    parse_ptxas_log(log, lowered_name, dynamic_shared=0) -> Resources.
    The package andrea_edu.kernels gathers this API with kernels.toolkit's (nvrtc_version,
    include_dirs, kernel_source, kernel_constants), kernels.occupancy's and kernels.launch's
    (has_gpu, device_info, launch_attention).

Errors: NvrtcUnavailableError (cuda-bindings or the headers are missing: names the pip packages),
CompileError (carries NVRTC's log), ValueError for a bad version/dtype/head_dim/arch.
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import re
import subprocess
import tempfile
import threading
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import torch

from andrea_edu.kernels import registry
from andrea_edu.kernels import toolkit as _tk
from andrea_edu.kernels.spec import CTYPE as _CTYPE
from andrea_edu.kernels.toolkit import CompileError
from andrea_edu.kernels.v1 import V1_CHUNK_SIZES  # noqa: F401  (part of this module's API)

ARCHS = ("sm_80", "sm_89", "sm_90")            # what the tests and the book compile for


def _tile(version: str, head_dim: int, dtype) -> int:
    """The template's tile parameter (v1's CHUNKS, v2's and v3's HD), from the version's spec.
    Validates the arguments."""
    spec = registry.get(version)
    if dtype not in _CTYPE:
        raise ValueError(f"dtype={dtype} is not supported; allowed: {list(_CTYPE)}")
    if not isinstance(head_dim, int) or isinstance(head_dim, bool) or head_dim < 1:
        raise ValueError(f"head_dim={head_dim!r} must be a positive int")
    try:
        return spec.tile(head_dim, dtype)
    except ValueError as e:   # the spec's limits refuse it: say what the dispatcher runs instead
        runs, _ = registry.walk(head_dim, dtype)
        raise ValueError(f"{e}: use version={runs.version!r} (backend={runs.backend!r})" if runs
                         else f"{e}: use backend='sdpa'") from None


def shared_bytes(version: str, head_dim: int, dtype) -> int:
    """Dynamic shared memory the launcher requests: the spec's carve-up, summed
    (KernelSpec.shared_bytes); the .cu checks it at compile time (-DANDREA_SMEM_BYTES)."""
    return registry.get(version).shared_bytes(_tile(version, head_dim, dtype), dtype)


def _arch_number(arch: str) -> int:
    """90 for "sm_90". ValueError for anything else (an int, "90", "sm_x"), and for an
    architecture this NVRTC cannot compile for (it lists the ones it can)."""
    m = re.fullmatch(r"sm_(\d+)", arch) if isinstance(arch, str) else None
    if not m:
        raise ValueError(f"arch={arch!r} must be a string like 'sm_90' (the book compiles for "
                         f"{', '.join(ARCHS)})")
    n = int(m.group(1))
    try:
        ok = _tk.supported_archs()
    except Exception:  # NVRTC missing: compile_attention reports that itself, with the pip hint
        return n
    if n not in ok:
        raise ValueError(f"arch={arch!r} is not supported by this NVRTC "
                         f"{'.'.join(map(str, _tk.nvrtc_version()))}; supported: "
                         f"{', '.join(f'sm_{a}' for a in ok)}")
    return n


@dataclass(frozen=True)
class Resources:
    """What ptxas reports for one kernel, plus the dynamic shared memory it launches with."""
    registers: int
    shared_bytes: int
    static_shared_bytes: int
    dynamic_shared_bytes: int
    spill_stores: int
    spill_loads: int
    stack_bytes: int


def parse_ptxas_log(log: str, lowered_name: str, dynamic_shared: int = 0) -> Resources:
    """Resources of `lowered_name` from an NVRTC log made with --ptxas-options=-v."""
    start = log.find(f"Function properties for {lowered_name}")
    if start < 0:
        raise CompileError(f"ptxas log has no entry for {lowered_name}", log)
    section = log[start:]
    nxt = section.find("Compiling entry function", 1)
    section = section if nxt < 0 else section[:nxt]
    num = lambda pat: int(m.group(1)) if (m := re.search(pat, section)) else 0  # noqa: E731
    regs = num(r"Used (\d+) registers")
    static = num(r"(\d+) bytes smem")
    return Resources(regs, static + dynamic_shared, static, dynamic_shared,
                     num(r"(\d+) bytes spill stores"), num(r"(\d+) bytes spill loads"),
                     num(r"(\d+) bytes stack frame"))


@dataclass
class CompiledKernel:
    """One specialization, compiled (chapter "One kernel, many heads")."""
    version: str
    tile: int                     # v1: CHUNKS (head_dim <= 32*CHUNKS); v2: HD
    dtype: torch.dtype
    arch: str
    name_expression: str
    lowered_name: str
    ptx: str
    cubin: bytes
    log: str
    resources: Resources
    compile_seconds: float
    from_cache: bool = False
    _sass: str | None = field(default=None, repr=False)

    @property
    def threads_per_block(self) -> int:
        return registry.get(self.version).threads

    @property
    def max_head_dim(self) -> int:
        return registry.get(self.version).max_head_dim(self.tile)

    def grid(self, B: int, nh: int, T: int) -> tuple[int, int, int]:
        """Launch grid (KernelSpec.grid): v1 one block per (b, h); v2 and v3 one per (b, h,
        query tile)."""
        return registry.get(self.version).grid(B, nh, T, self.max_head_dim)

    def tensor_core_instructions(self) -> list[str]:
        """PTX lines that run on tensor cores (wmma.mma / mma.sync)."""
        return [ln.strip() for ln in self.ptx.splitlines()
                if re.search(r"\b(wmma\.mma|mma\.sync)", ln)]

    def has_tensor_core_instructions(self) -> bool:
        return bool(self.tensor_core_instructions())

    def sass(self) -> str | None:
        """The CUBIN disassembled by cuobjdump (needs nvdisasm beside it), or None.

        Kept on disk beside the kernel cache, named by the CUBIN's sha256 and the cuobjdump
        binary's size (a listing is a pure function of both), so a chapter that reads the SASS
        of many kernels pays cuobjdump once per kernel and machine, not once per run."""
        if self._sass is not None:
            return self._sass
        tool, disasm = _tk.find_binary("cuobjdump"), _tk.find_binary("nvdisasm")
        if tool is None or disasm is None:
            return None
        key = f"{hashlib.sha256(self.cubin).hexdigest()[:32]}-{Path(tool).stat().st_size}"
        cached = cache_dir() / "sass" / f"{key}.sass"
        try:
            text = _sass_unsealed(cached.read_text())
            if text is not None:  # whole, as written (a cut or edited file is disassembled again)
                self._sass = text
                return text
        except (OSError, UnicodeDecodeError):
            pass
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "k.cubin"
            path.write_bytes(self.cubin)
            env = dict(os.environ, PATH=f"{Path(disasm).parent}{os.pathsep}"
                                        f"{os.environ.get('PATH', '')}")
            run = subprocess.run([tool, "--dump-sass", str(path)], capture_output=True,
                                 text=True, env=env, timeout=60)
        if run.returncode != 0:
            return None
        self._sass = run.stdout
        try:  # best effort: a read-only cache folder only costs the next run a disassembly
            cached.parent.mkdir(parents=True, exist_ok=True)
            tmp_path = cached.with_suffix(f".{os.getpid()}.tmp")
            tmp_path.write_text(_sass_sealed(run.stdout))
            os.replace(tmp_path, cached)
        except OSError:
            pass
        return self._sass


_SEAL = "// andrea-sass sha256="  # the cached listing's last line: the listing's own digest


def _sass_sealed(text: str) -> str:
    """A listing as cached: itself, then one line with its sha256 (`_sass_unsealed` checks)."""
    return f"{text}\n{_SEAL}{hashlib.sha256(text.encode()).hexdigest()}\n"


def _sass_unsealed(raw: str) -> str | None:
    """The listing a cached file holds when it is whole (its last line the sha256 of all
    before it), else None: a listing cut short would count fewer instructions silently."""
    body, sep, seal = raw.rstrip("\n").rpartition("\n" + _SEAL)
    if not sep or hashlib.sha256(body.encode()).hexdigest() != seal:
        return None
    return body


_MEMORY: dict[tuple, CompiledKernel] = {}  # (version, tile, dtype, arch) -> kernel


def cache_dir() -> Path:
    return Path(os.environ.get("ANDREA_CACHE_DIR") or
                Path.home() / ".cache" / "andrea_edu" / "kernels")


def compile_attention(version: str, head_dim: int, dtype, arch: str = "sm_90",
                      use_cache: bool = True) -> CompiledKernel:
    """Compile (or fetch from the caches) the kernel that runs (version, head_dim, dtype, arch)."""
    if not isinstance(use_cache, bool):  # 'no' is a true value: never read it as True
        raise TypeError(f"use_cache={use_cache!r} must be True or False")
    tile = _tile(version, head_dim, dtype)
    spec = registry.get(version)
    archnum = _arch_number(arch)
    why = spec.compile_refusal(head_dim, dtype, archnum, arch)
    if why is not None:
        raise ValueError(why)
    key = (version, tile, dtype, arch)
    if use_cache and key in _MEMORY:
        return _MEMORY[key]
    nvrtc = _tk._import_nvrtc()
    inc = _tk.include_dirs()
    targs = ", ".join([_CTYPE[dtype], *map(str, spec.template_args(tile))])
    name_expr = f"andrea::{spec.kernel}<{targs}>"   # e.g. <__half, 64>; padded: <__half, 80, 72>
    src = _tk.kernel_source(version)
    dyn = spec.shared_bytes(tile, dtype)
    opts = ["-default-device", "--std=c++17", f"--gpu-architecture={arch}",
            "--ptxas-options=-v", "-lineinfo", f"-DANDREA_SMEM_BYTES={dyn}"] + \
        [f"-I{d}" for d in inc]
    digest = hashlib.sha256(json.dumps([src, name_expr, opts[:-len(inc)], _tk.nvrtc_version(),
                                        _tk.header_version(inc)]).encode()).hexdigest()[:24]
    disk = cache_dir() / f"{version}_{tile}_{_CTYPE[dtype]}_{arch}_{digest}"
    if use_cache and (disk.with_suffix(".json")).is_file():
        try:
            meta, ptx_text, cubin_bytes = _read_disk(disk)
            ck = CompiledKernel(version, tile, dtype, arch, name_expr, meta["lowered_name"],
                                ptx_text, cubin_bytes, meta["log"],
                                parse_ptxas_log(meta["log"], meta["lowered_name"], dyn),
                                meta["compile_seconds"], from_cache=True)
            _MEMORY[key] = ck
            return ck
        except _UnverifiableEntry:
            pass  # written before the cache checked itself: compile again, quietly, and overwrite
        except (OSError, KeyError, TypeError, ValueError, CompileError) as e:
            # a damaged, truncated or unverifiable entry: say so, compile again, overwrite it
            warnings.warn(f"kernel cache entry {disk}.* failed its check ({e}); recompiling",
                          RuntimeWarning, stacklevel=2)
    t0 = time.perf_counter()
    lowered, ptx_text, cubin, log = _tk.compile_program(
        nvrtc, src, spec.source, name_expr, opts,
        lambda log: f"NVRTC could not compile {name_expr} for {arch} ({spec.source}):\n{log}")
    seconds = time.perf_counter() - t0
    ck = CompiledKernel(version, tile, dtype, arch, name_expr, lowered, ptx_text, cubin, log,
                        parse_ptxas_log(log, lowered, dyn), seconds)
    if use_cache:
        _MEMORY[key] = ck
        _write_disk(disk, ck)
    return ck


def _write_disk(disk: Path, ck: CompiledKernel) -> None:
    """Best effort: an unwritable cache folder only costs a recompile next time."""
    try:
        disk.parent.mkdir(parents=True, exist_ok=True)
        blobs = {".ptx": ck.ptx.encode(), ".cubin": ck.cubin}
        body = dict(lowered_name=ck.lowered_name, log=ck.log, compile_seconds=ck.compile_seconds,
                    files={k: _fingerprint(v) for k, v in blobs.items()})
        meta = json.dumps({**body, "meta_sha256": _meta_digest(body)})
        for suffix, data in (*blobs.items(),
                             (".json", meta.encode())):  # .json last: it marks a full entry
            tmp = disk.with_suffix(suffix + f".{os.getpid()}.{threading.get_ident()}.tmp")
            try:
                tmp.write_bytes(data)
                os.replace(tmp, disk.with_suffix(suffix))
            finally:  # a failed rename (a folder in the way, a full disk) leaves no .tmp behind
                if tmp.exists():
                    tmp.unlink()
    except OSError:
        pass


def _meta_digest(body: dict) -> str:
    """sha256 of everything a meta file serves besides the blobs' own hashes: the compiler log
    (registers and spills are read from it), the lowered name, the compile time, the blobs'
    lengths and hashes."""
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


class _UnverifiableEntry(ValueError):
    """A cache entry from before the cache recorded lengths and hashes: recompiled quietly."""


def _fingerprint(data: bytes) -> dict:
    return {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}


def _read_disk(disk: Path) -> tuple[dict, str, bytes]:
    """(meta, ptx, cubin) of a disk cache entry, each file checked against the length and
    sha256 its meta recorded; ValueError naming the file and what is wrong otherwise."""
    meta_path = disk.with_suffix(".json")
    try:
        meta = json.loads(meta_path.read_text())
    except json.JSONDecodeError as e:
        raise ValueError(f"{meta_path}: not valid JSON ({e})") from None
    if not isinstance(meta, dict):
        raise ValueError(f"{meta_path}: holds a {type(meta).__name__}, not an object")
    need: dict[str, type | tuple[type, ...]] = {"lowered_name": str, "log": str,
                                                "compile_seconds": (int, float)}
    for k, t in need.items():
        if not isinstance(meta.get(k), t):
            raise ValueError(f"{meta_path}: {k!r} missing or of the wrong type")
    if "files" not in meta:
        raise _UnverifiableEntry(f"{meta_path}: no lengths and hashes recorded")
    if not isinstance(meta["files"], dict):
        raise ValueError(f"{meta_path}: 'files' is not an object")
    if "meta_sha256" not in meta:
        raise _UnverifiableEntry(f"{meta_path}: its compiler log is not hashed")
    if _meta_digest({k: v for k, v in meta.items() if k != "meta_sha256"}) != meta["meta_sha256"]:
        raise ValueError(f"{meta_path}: its log, name or hashes do not match the sha256 recorded "
                         f"with them (edited or damaged)")
    blobs = {}
    for suffix in (".ptx", ".cubin"):
        path, want = disk.with_suffix(suffix), meta["files"].get(suffix)
        data = path.read_bytes()
        if not isinstance(want, dict) or _fingerprint(data) != {"bytes": want.get("bytes"),
                                                              "sha256": want.get("sha256")}:
            raise ValueError(f"{path}: {len(data)} bytes that do not match the length and "
                             f"sha256 recorded in {meta_path.name}")
        blobs[suffix] = data
    return meta, blobs[".ptx"].decode(), blobs[".cubin"]


def specializations() -> list[tuple[str, int, torch.dtype]]:
    """Every (version, head_dim, dtype) kernel the library launches; head_dim is the largest
    the specialization covers (v1's 32*CHUNKS)."""
    return [(s.version, hd, dt) for s in registry.specs() for hd, dt in s.specializations()]


def compile_all(archs=ARCHS, workers: int = 2) -> list[CompiledKernel]:
    """Compile every specialization for every arch it supports (threads: NVRTC releases the
    GIL)."""
    from concurrent.futures import ThreadPoolExecutor
    jobs = [(v, hd, dt, a) for a in archs for (v, hd, dt) in specializations()
            if registry.get(v).compile_refusal(hd, dt, _arch_number(a), a) is None]
    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        return list(pool.map(lambda j: compile_attention(*j), jobs))
