"""SASS evidence per kernel: what one warp executes for one K/V tile, read from the machine code.

Chapter "From one block per head to FlashAttention: a kernel worklog". No GPU needed: the CUBIN
that NVRTC compiled (kernels.nvrtc) is disassembled by cuobjdump from NVIDIA's pip wheel.

    evidence(version, head_dim, dtype=torch.bfloat16, arch="sm_90") -> dict
        per_tile: instruction mix one warp issues for one full, unmasked K/V tile; a tile
                  covers rows_per_warp query rows x keys_per_tile keys (scores_per_tile), which
                  differ between versions: compare *_per_score
                  (total, HMMA, LDSM, LDS, STS, LD, ST, LDG, LDGSTS, SHFL, MUFU.EX2, BAR; LD/ST are
        generic loads/stores, which v2 uses for bf16 WMMA fragments in shared memory)
        smem_bytes_per_tile: shared-memory bytes those instructions move, per warp
        static: the same classes counted once over the K/V loop's SASS (every path)
        registers, spills, shared memory, occupancy on H200 and RTX 4090 (kernels.occupancy)
    parse_sass(text) -> [Instr];  kv_loop(instrs) -> (start, end);  tile_counts(...)

How "per tile" is counted (an estimate from the code, not a measurement):
  1. The K/V loop is the innermost SASS loop (a backward branch) that holds a BAR.SYNC: every
     version synchronizes its block once or twice per K/V tile.
  2. Its body (inner loops collapsed, see 3) is a graph of basic blocks with forward edges.
     The path counted is the one that executes the most work instructions (HMMA, LDSM, LDS,
     STS, LD, ST, LDG, LDGSTS, SHFL, MUFU) and, among those, the fewest instructions: a full
     tile that needs no mask. So v3's prefetch is in and its mask fix-up (compares and
     selects only) is out, and of the full-tile and tail staging (the same copies) the one
     without guards is taken. A remainder block of an unrolled loop does no work when the
     loop's trip count leaves no remainder.
  3. Inner loops (v1's loops over keys and dimensions, v1's and v2's staging loops) count their
     body times their trip count: the source's iteration count (BC or BK keys, head_dim dims,
     the tile's elements per thread) divided by the unroll factor ptxas chose, which is read
     from the loop body (e.g. 8 LDG in a body whose source iteration loads one K and one V
     element: 4 iterations per trip).
  Predicated instructions count as issued. Bank conflicts are not modelled: smem bytes are the
  bytes the instructions request (LDS.128: 16 per lane; LDSM .x4: 4 matrices of 128 bytes;
  LDGSTS.128: 16 bytes written per lane). Generic LD/ST count as shared memory: in these
  kernels every global access is an LDG, STG or LDGSTS.
  Precision: v2's and v3's counts follow their code exactly (v3's: every class checked against
  the source in tests/test_sass.py). v1's is the roughest: its loops over head_dim and keys have
  run-time bounds, which ptxas unrolls by 4 or 16 with remainder loops and duplicates per row.
  Its broadcast reads of sQ (every lane, one address) count at full width, which overstates
  its shared-memory bytes.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

import torch

CLASSES = ("HMMA", "LDSM", "LDS", "STS", "LD", "ST", "LDG", "LDGSTS", "SHFL", "MUFU.EX2", "BAR")
WORK = {"HMMA", "LDSM", "LDS", "STS", "LD", "ST", "LDG", "LDGSTS", "SHFL", "MUFU"}


@dataclass(frozen=True)
class Instr:
    addr: int
    op: str          # opcode with modifiers, e.g. "LDSM.16.M88.4"
    text: str        # the whole instruction, predicate included
    pred: str        # "" or e.g. "@!P0"

    @property
    def base(self) -> str:
        return self.op.split(".")[0]

    @property
    def never(self) -> bool:
        """ptxas's `@!PT` placeholders (e.g. before LDGSTS): issued, never executed."""
        return self.pred == "@!PT"

    def target(self) -> int | None:
        """Branch target of a BRA, else None."""
        if self.base != "BRA":
            return None
        m = re.search(r"(0x[0-9a-f]+)\s*$", self.text)
        return int(m.group(1), 16) if m else None

    @property
    def conditional(self) -> bool:
        return bool(self.pred) or bool(re.match(r"BRA\S*\s+!?U?P\w+\s*,", self.text))


def parse_sass(text: str) -> list[Instr]:
    """cuobjdump --dump-sass output -> instructions in address order (one kernel)."""
    out = []
    for line in text.splitlines():
        m = re.match(r"\s*/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;", line)
        if not m:
            continue
        body = m.group(2).strip()
        pm = re.match(r"(@!?U?P\w+)\s+(.*)", body)
        pred, rest = (pm.group(1), pm.group(2)) if pm else ("", body)
        out.append(Instr(int(m.group(1), 16), rest.split()[0], body, pred))
    return out


def klass(ins: Instr) -> str | None:
    """The evidence class of an instruction (CLASSES), or None."""
    if ins.never:
        return None
    b = ins.base
    if b == "MUFU":
        return "MUFU.EX2" if ".EX2" in ins.op else None
    if b == "BAR":
        return "BAR" if ".SYNC" in ins.op or ins.op == "BAR" else None
    return b if b in CLASSES else None


def smem_bytes(ins: Instr) -> int:
    """Shared-memory bytes one warp's instruction moves (requested, conflicts not counted)."""
    if ins.never:
        return 0
    b, op = ins.base, ins.op
    if b == "LDSM":
        n = 4 if op.endswith(".4") else 2 if op.endswith(".2") else 1
        return 128 * n                                        # n 8x8 matrices of 16-bit
    if b in ("LDS", "STS", "LDGSTS", "LD", "ST"):   # generic LD/ST: shared memory here
        m = re.search(r"\.(U8|S8|U16|S16|32|64|128)\b", op)
        width = {"U8": 1, "S8": 1, "U16": 2, "S16": 2, "32": 4, "64": 8, "128": 16}[
            m.group(1)] if m else 4
        return 32 * width
    return 0


def loops(instrs: list[Instr]) -> list[tuple[int, int]]:
    """(head, back-edge address) of every loop, i.e. every backward branch."""
    return [(t, i.addr) for i in instrs if (t := i.target()) is not None and t <= i.addr]


def kv_loop(instrs: list[Instr]) -> tuple[int, int]:
    """The K/V loop: the innermost loop whose body holds a BAR.SYNC."""
    bars = [i.addr for i in instrs if klass(i) == "BAR"]
    cands = [(h, e) for h, e in loops(instrs) if any(h <= a <= e for a in bars)]
    if not cands:
        raise ValueError("no loop with a BAR.SYNC in this SASS: not an attention kernel?")
    return min(cands, key=lambda he: he[1] - he[0])


def _mix(instrs) -> dict:
    c = dict.fromkeys(CLASSES, 0)
    for i in instrs:
        k = klass(i)
        if k:
            c[k] += 1
    c["FFMA"] = sum(i.base == "FFMA" for i in instrs)      # for the trip plans only
    c["total"] = len(instrs)
    c["smem_bytes"] = sum(smem_bytes(i) for i in instrs)
    return c


def tile_counts(instrs: list[Instr], trip_plan) -> dict:
    """One full, unmasked tile through the K/V loop (module docstring); returns the mix.

    trip_plan(body_mix) -> (source iterations per tile, markers per source iteration, marker)
    for an inner loop's body, or None when the loop is not one the plan knows (counted once).
    """
    head, end = kv_loop(instrs)
    body = [i for i in instrs if head <= i.addr <= end][:-1]   # without the back edge
    inner = [(h, e) for h, e in loops(body)]
    outer = [(h, e) for h, e in inner                          # outermost inner loops
             if not any(h2 <= h and e <= e2 and (h2, e2) != (h, e) for h2, e2 in inner)]
    unroll_max: dict = {}
    plans = {}
    for h, e in inner:
        mix = _mix([i for i in body if h <= i.addr <= e])
        p = trip_plan(mix)
        if p:
            n_src, per_iter, marker = p
            u = max(1, mix[marker] // per_iter)
            plans[(h, e)] = (n_src, u, marker)
            unroll_max[marker] = max(unroll_max.get(marker, 0), u)

    def trips(h, e):
        if (h, e) not in plans:
            return 1
        n_src, u, marker = plans[(h, e)]
        top = unroll_max[marker]
        return n_src // u if u == top else (n_src % top) // u

    # Units: single instructions, and each outermost inner loop as one unit (body x trips).
    units: list = []                                          # (addr, [instructions], is_loop)
    n = 0
    while n < len(body):
        loop = next(((h, e) for h, e in outer if h == body[n].addr), None)
        if loop is None:
            units.append((body[n].addr, [body[n]], False))
            n += 1
            continue
        lb = [i for i in body if loop[0] <= i.addr <= loop[1]]
        units.append((loop[0], lb * trips(*loop), True))
        n += len(lb)
    at = {a: k for k, (a, _, _) in enumerate(units)}

    def branch(k):
        a, ins, is_loop = units[k]
        return None if is_loop else ins[0]

    # Basic blocks of units; edges forward only (the K/V back edge was dropped).
    leaders = {0}
    for k in range(len(units)):
        b = branch(k)
        if b is not None and b.target() is not None:
            leaders.add(k + 1)
            if b.target() in at:
                leaders.add(at[b.target()])
    starts = sorted(x for x in leaders if x < len(units))
    blocks = [(st, (starts[j + 1] if j + 1 < len(starts) else len(units)))
              for j, st in enumerate(starts)]
    block_of = {st: j for j, (st, _) in enumerate(blocks)}

    def succ(j):
        st, en = blocks[j]
        b = branch(en - 1)
        nxt = [j + 1] if j + 1 < len(blocks) else [None]
        t = None if b is None else b.target()
        if b is None or t is None:
            return nxt
        tj = block_of.get(at[t]) if t in at else None          # past the body: the loop end
        return [tj] if not b.conditional else [tj] + nxt

    def remainder_block(region):
        """Straight-line code that peels iterations off the unrolled loop right after it:
        dead when that loop's trip count leaves no remainder."""
        if not region or any(h <= i.addr <= e for i in region for h, e in inner):
            return False
        after = [(h, e) for h, e in inner if h > region[-1].addr]
        if not after or min(after) not in plans:
            return False
        n_src, u, marker = plans[min(after)]
        return u == unroll_max[marker] and n_src % u == 0 and _mix(region)[marker] > 0

    def value(j):
        st, en = blocks[j]
        ins = [i for k in range(st, en) for i in units[k][1]]
        work = sum(i.base in WORK and not i.never for i in ins)
        return (0 if remainder_block(ins) else work, -len(ins)), ins

    # Longest path on the DAG, lexicographic: most work, then fewest instructions.
    best: dict = {None: ((0, 0), [])}
    for j in reversed(range(len(blocks))):
        (w, c), ins = value(j)
        options = [best[s] for s in succ(j) if s is None or s > j]
        (bw, bc), path = max(options, key=lambda o: o[0]) if options else ((0, 0), [])
        best[j] = ((w + bw, c + bc), ins + path)
    mix = _mix(best[0][1] + [instrs[[i.addr for i in instrs].index(end)]])
    mix["kv_loop"] = (hex(head), hex(end))
    return mix


def _evidence_key(spec, ck, head_dim: int, dtype, arch: str) -> str:
    """What one evidence dict is a pure function of: the CUBIN, this module's walk, the spec
    module's trip plan, the GPU table and the occupancy rules, and the case."""
    import hashlib
    import importlib.util
    from pathlib import Path

    h = hashlib.sha256(ck.cubin)
    for mod in (__name__, "andrea_edu.kernels.gpus", "andrea_edu.kernels.occupancy",
                "andrea_edu.kernels.spec", spec.trip_plan.__module__):
        found = importlib.util.find_spec(mod)
        if found is not None and found.origin and Path(found.origin).is_file():
            h.update(Path(found.origin).read_bytes())
    h.update(f"{spec.version}|{head_dim}|{dtype}|{arch}|{spec.source_text()}".encode())
    return h.hexdigest()[:40]


_EVIDENCE_KEYS = ("version", "head_dim", "per_tile", "smem_bytes_per_tile", "scores_per_tile",
                  "registers", "blocks_per_sm", "static", "instructions_per_score")


def evidence(version: str, head_dim: int, dtype=torch.bfloat16, arch: str = "sm_90") -> dict:
    """The SASS evidence of one specialization (module docstring); compiles it if needed.
    Kept on disk beside the kernel cache (nvrtc.cache_dir()/evidence), keyed by the CUBIN and
    the code that reads it (_evidence_key): a chapter that walks many kernels pays the walk
    once per machine. An entry that does not load as a complete record is computed again."""
    import json
    import os

    from andrea_edu.kernels import nvrtc, registry
    spec = registry.get(version)
    ck = nvrtc.compile_attention(version, head_dim, dtype, arch)
    path = nvrtc.cache_dir() / "evidence" / f"{_evidence_key(spec, ck, head_dim, dtype, arch)}.json"
    try:
        got = json.loads(path.read_text())
        if isinstance(got, dict) and all(k in got for k in _EVIDENCE_KEYS):
            got["kv_loop"] = tuple(got["kv_loop"])
            return got
    except (OSError, ValueError):
        pass
    out = _evidence(spec, ck, version, head_dim, dtype, arch)
    try:  # best effort: an unwritable cache only costs the next run the walk
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(out))
        os.replace(tmp, path)
    except OSError:
        pass
    return out


def _evidence(spec, ck, version: str, head_dim: int, dtype, arch: str) -> dict:
    from andrea_edu.kernels import occupancy
    text = ck.sass()
    if text is None:
        raise RuntimeError("cuobjdump/nvdisasm not found: pip install nvidia-cuda-cuobjdump "
                           "nvidia-cuda-nvdisasm")
    instrs = parse_sass(text)
    consts = spec.constants()
    plan = spec.trip_plan(head_dim, consts)
    per_tile = tile_counts(instrs, plan)
    head, end = kv_loop(instrs)
    static = _mix([i for i in instrs if head <= i.addr <= end])
    bk = spec.keys_per_tile
    warps = ck.threads_per_block // 32
    rows = spec.rows(head_dim) // warps                       # query rows per warp
    scores = rows * bk                                        # (query row, key) pairs per tile
    r = ck.resources
    occ = {name: occupancy.occupancy(r, ck.threads_per_block, occupancy.PRESETS[name])
           for name in ("H200", "H100", "RTX 4090")}  # the lent kinds and the reader GPU
    return dict(version=version, head_dim=head_dim, dtype=str(dtype).replace("torch.", ""),
                arch=arch, keys_per_tile=bk, rows_per_warp=rows, scores_per_tile=scores,
                threads_per_block=ck.threads_per_block, warps_per_block=warps,
                per_tile={k: per_tile[k] for k in ("total", *CLASSES)},
                smem_bytes_per_tile=per_tile["smem_bytes"],
                smem_bytes_per_score=per_tile["smem_bytes"] / scores,
                instructions_per_score=per_tile["total"] / scores,
                static={k: static[k] for k in ("total", *CLASSES)},
                registers=r.registers, spill_stores=r.spill_stores, spill_loads=r.spill_loads,
                shared_bytes=r.shared_bytes,
                blocks_per_sm={k: v["blocks_per_sm"] for k, v in occ.items()},
                limited_by={k: v["limiting"] for k, v in occ.items()},
                kv_loop=per_tile["kv_loop"], name=ck.name_expression,
                method="SASS walk of one full, unmasked K/V tile (andrea_edu.kernels.sass)")
