"""What runs where: each reader's GPU, the kernels the dispatcher runs on it, and their cost.

Chapter "The configuration mirrors the hardware" (and one line in each chapter with a GPU
section). Readers run the book on Colab's T4 (sm_75) or L4 (sm_89), an A100 (sm_80), their own
RTX 3090 (sm_86) or RTX 4090 (sm_89), or an H100/H200 (sm_90). Everything here is decided by
the dispatcher's own rule (each KernelSpec's `ineligibility`, given the GPU's sm) and measured
on the code NVRTC compiles for that architecture (no GPU needed):

    READERS {"T4": occupancy.T4, ...}          the GPUs, oldest architecture first
    TARGET_ARCHS ("sm_75", ..., "sm_90")       the architectures they need
    sm_of(gpu) -> 75                           support(version, sm) -> {dtype: [head_dims]}
    head_dim_text([16, 32, ..., 128]) -> "16-128 in steps of 16"
    compiled(version, head_dim, dtype, arch) -> registers, shared memory, spills (or refused)
    gpu_rows(head_dim=64, dtype=float16) -> one dict per GPU;  table_markdown(rows)
    reader_line(gpu="T4") -> one sentence: what a reader on that GPU sees
"""
from __future__ import annotations

import torch

from andrea_edu.kernels import occupancy, registry
from andrea_edu.kernels.spec import dtype_name

READERS = {"T4": occupancy.T4, "A100": occupancy.A100, "RTX 3090": occupancy.RTX_3090,
           "L4": occupancy.L4, "RTX 4090": occupancy.RTX_4090, "H100": occupancy.H100,
           "H200": occupancy.H200}
TARGET_ARCHS = tuple(sorted({str(g["arch"]) for g in READERS.values()}))  # sm_75 .. sm_90
DTYPES = (torch.float32, torch.float16, torch.bfloat16)
_HEAD_DIMS = range(1, 513)  # every head_dim the dispatcher is asked about


def sm_of(gpu: str) -> int:
    """75 for "T4" (a READERS name)."""
    if gpu not in READERS:
        raise ValueError(f"gpu={gpu!r} is not one of {tuple(READERS)}")
    return int(str(READERS[gpu]["arch"]).removeprefix("sm_"))


def support(version: str, sm: int) -> dict:
    """{dtype name: head_dims} at which the dispatcher lets `version` run on an sm GPU; a dtype
    it never runs is left out."""
    spec = registry.get(version)
    out = {}
    for dt in DTYPES:
        hds = [h for h in _HEAD_DIMS if spec.ineligibility(h, dt, sm) is None]
        if hds:
            out[dtype_name(dt)] = hds
    return out


def head_dim_text(hds: list) -> str:
    """A short form of a list of head_dims: "1-128", "16-128 in steps of 16", "32, 64, 96, 128"."""
    if not hds:
        return "none"
    if len(hds) == 1:
        return str(hds[0])
    step = hds[1] - hds[0]
    if len(hds) > 4 and hds == list(range(hds[0], hds[-1] + 1, step)):
        return f"{hds[0]}-{hds[-1]}" + ("" if step == 1 else f" in steps of {step}")
    return ", ".join(map(str, hds))


def _support_text(sup: dict) -> str:
    """"float16, bfloat16: 16-128 in steps of 16" (dtypes sharing head_dims grouped)."""
    groups: dict = {}
    for dt, hds in sup.items():
        groups.setdefault(tuple(hds), []).append(dt)
    return "; ".join(f"{', '.join(dts)}: head_dim {head_dim_text(list(h))}"
                     for h, dts in groups.items())


def compiled(version: str, head_dim: int, dtype, arch: str) -> dict:
    """What ptxas reports for the kernel compiled for `arch` (registers, shared memory, spills,
    threads per block), or {"refused": the compiler's one-line reason}."""
    from andrea_edu.kernels import nvrtc
    try:
        ck = nvrtc.compile_attention(version, head_dim, dtype, arch)
    except ValueError as e:
        return dict(refused=str(e))
    r = ck.resources
    return dict(registers=r.registers, shared_bytes=r.shared_bytes,
                spill_bytes=r.spill_stores + r.spill_loads, threads=ck.threads_per_block)


def gpu_rows(head_dim: int = 64, dtype=torch.float16, gpus=tuple(READERS)) -> list[dict]:
    """Per GPU: its sm, what each kernel version runs there (dtypes, head_dims), and for the
    versions that run (head_dim, dtype): registers, shared memory and blocks per SM of the
    kernel compiled for its architecture; plus the spec backend="auto" runs for float16 and
    bfloat16 at head_dim (registry.walk, the dispatcher's rule; None: torch's sdpa)."""
    rows = []
    for gpu in gpus:
        sm, preset, arch = sm_of(gpu), READERS[gpu], str(READERS[gpu]["arch"])
        versions: dict[str, dict] = {}
        row: dict = dict(gpu=gpu, name=preset["name"], arch=arch, sms=preset["sms"],
                         head_dim=head_dim, dtype=dtype_name(dtype), versions=versions)
        for spec in _rungs():
            why = spec.ineligibility(head_dim, dtype, sm)
            v: dict = dict(backend=spec.backend, support=support(spec.version, sm), why_not=why)
            if why is None:
                v.update(compiled(spec.version, head_dim, dtype, arch))
                if "registers" in v:
                    occ = occupancy.occupancy(v, v["threads"], preset)
                    v.update(blocks_per_sm=occ["blocks_per_sm"], occupancy=occ["occupancy"],
                             limited_by=occ["limiting"])
            versions[spec.version] = v
        row["auto"] = {dtype_name(dt): registry.walk(head_dim, dt, sm)[0]
                       for dt in (torch.float16, torch.bfloat16)}
        rows.append(row)
    return rows


def _rungs() -> list:
    """The ladder's specs (registry.ladder): the padded v3 is v3's code at a wider width, so its
    support, registers and occupancy are v3's and get no column of their own."""
    return [registry.get(v) for v in registry.ladder()]


def _cell(v: dict) -> str:
    if not v["support"]:
        return "does not run"
    text = _support_text(v["support"])
    if "registers" in v:
        n, spill = v["blocks_per_sm"], v["spill_bytes"]
        text += (f"; {v['registers']} registers" + (f", {spill} spill bytes" if spill else "")
                 + f", {n} block{'s' * (n != 1)}/SM ({v['occupancy']:.0%} of warps)")
    return text


def table_markdown(rows: list[dict]) -> str:
    """One row per GPU, one column per kernel version (what runs, and at the rows' head_dim and
    dtype its registers and blocks per SM), and what auto runs for fp16 and bf16."""
    specs = _rungs()
    hd, dt = rows[0]["head_dim"], rows[0]["dtype"]
    head = (["GPU", "arch", "SMs"] + [f"{s.version} ({s.backend})" for s in specs]
            + [f"auto, float16, head_dim {hd}", f"auto, bfloat16, head_dim {hd}"])
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = [r["gpu"], f"`{r['arch']}`", str(r["sms"])]
        cells += [_cell(r["versions"][s.version]) for s in specs]
        cells += [f"{s.backend} ({s.version})" if s else "sdpa (torch)"
                  for s in r["auto"].values()]
        out.append("| " + " | ".join(cells) + " |")
    out.append(f"\nRegisters, spills and blocks per SM: the {dt} kernel at head_dim {hd}, "
               f"compiled by NVRTC for each architecture (ptxas's counts); occupancy from each "
               f"GPU's published per-SM limits (kernels.occupancy), not measured.")
    return "\n".join(out)


def reader_line(gpu: str = "T4", head_dim: int = 64) -> str:
    """What a reader on `gpu` sees, in one sentence, from the dispatcher's rule (what
    backend="auto" runs for float16 and bfloat16)."""
    sm = sm_of(gpu)
    never = [s for s in _rungs() if not support(s.version, sm)]
    parts = []
    for dt in (torch.float16, torch.bfloat16):
        spec, passed = registry.walk(head_dim, dt, sm)
        text = f"{dtype_name(dt)} runs " + (f"{spec.backend} ({spec.version})" if spec else
                                            "torch's sdpa")
        better = [why for s, why in passed if s not in never]
        parts.append(text + (f" ({better[-1]})" if better else ""))
    article = "an" if gpu[0] in "AEFHILMNORSX" else "a"    # an A100, an H100, an RTX, a T4
    return (f"On {article} {gpu} (`{READERS[gpu]['arch']}`), at head_dim {head_dim}: "
            + "; ".join(parts) + "." + "".join(
                f" {s.backend} ({s.version}) does not run there: "
                f"{s.ineligibility(head_dim, torch.float16, sm)}." for s in never))
