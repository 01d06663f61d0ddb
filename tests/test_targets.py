"""Every reader's GPU as a first-class target (kernels.targets, issue 23 items 2 and 3).

T4 (sm_75), A100 (sm_80), RTX 3090 (sm_86), L4 and RTX 4090 (sm_89), H100 and H200 (sm_90): the
dispatcher's decision for the book's cases on each architecture, the kernels compiled for each
(or refused with their one message) and their ptxas resources, and the table the book shows.
"""
from __future__ import annotations

import pytest
import torch

from andrea_edu.dispatch import choose_backend
from andrea_edu.kernels import occupancy, targets

fp32, fp16, bf16 = torch.float32, torch.float16, torch.bfloat16

try:
    from andrea_edu.kernels import toolkit as _tk
    _tk._import_nvrtc()
    _tk.include_dirs()
    NVRTC = True
except Exception:  # noqa: BLE001  (no NVRTC or headers: the compile tests skip, saying why)
    NVRTC = False
needs_nvrtc = pytest.mark.skipif(not NVRTC, reason="NVRTC or the CUDA headers are missing")


def test_the_readers_gpus_and_their_architectures():
    assert targets.TARGET_ARCHS == ("sm_75", "sm_80", "sm_86", "sm_89", "sm_90")
    assert {g: targets.sm_of(g) for g in targets.READERS} == {
        "T4": 75, "A100": 80, "RTX 3090": 86, "L4": 89, "RTX 4090": 89, "H100": 90, "H200": 90}
    assert occupancy.T4["smem_per_block"] == 64 * 1024 and occupancy.T4["reserved_smem"] == 0
    with pytest.raises(ValueError, match=r"gpu='V100' is not one of \('T4'"):
        targets.sm_of("V100")


# (head_dim, dtype, backend asked) -> (backend that runs, words its reason must hold) per sm
T4_CASES = [
    ((64, fp16, "auto"), ("cuda-wmma", "feeds the tensor cores")),
    ((128, fp16, "auto"), ("cuda-wmma", "multiple of 16")),
    ((64, bf16, "auto"), ("cuda-naive", "bfloat16 tensor cores need sm_80 or newer; this GPU is "
                                        "sm_75")),
    ((64, fp32, "auto"), ("cuda-naive", "dtype=float32 is not supported by the tensor-core")),
    ((72, fp16, "auto"), ("cuda-naive", "head_dim=72 is not a multiple of 16")),
    ((256, fp32, "auto"), ("sdpa", "needs more than the 64 KB of shared memory sm_75 allows")),
    ((64, fp16, "cuda-flash"), ("cuda-wmma", "cuda-flash needs sm_80 or newer")),
]
SM80_PLUS_CASES = [
    ((64, fp16, "auto"), ("cuda-flash", "has cp.async and ldmatrix")),
    ((64, bf16, "auto"), ("cuda-flash", "has cp.async and ldmatrix")),
    ((48, bf16, "auto"), ("cuda-wmma", "not one of cuda-flash's compiled head_dims")),
    ((72, bf16, "auto"), ("cuda-naive", "head_dim=72 is not a multiple of 16")),
    ((256, fp32, "auto"), ("cuda-naive", "not supported by the tensor-core kernel")),
    ((300, fp16, "auto"), ("sdpa", "above cuda-naive's maximum 256")),
]


@pytest.mark.parametrize("sm", [75, 80, 86, 89, 90])
def test_the_dispatchers_decisions_for_the_books_cases_per_architecture(sm):
    for (hd, dt, asked), (backend, words) in (T4_CASES if sm == 75 else SM80_PLUS_CASES):
        d = choose_backend(hd, dt, "cuda", asked, sm=sm)
        assert d.backend == backend and words in d.reason + " ".join(d.fallbacks_considered), \
            (sm, hd, dt, asked, d)
    if sm == 75:   # the kernel named: its one reason, and the fix
        with pytest.raises(ValueError, match=r"cuda-naive: head_dim=256 needs more than the 64 KB"):
            choose_backend(256, fp32, "cuda", "cuda-naive", sm=75)


def test_what_runs_where_follows_the_dispatchers_rule():
    assert targets.support("v3", 75) == {}
    assert targets.support("v2", 75) == {"float16": list(range(16, 129, 16))}
    assert targets.support("v1", 75)["bfloat16"] == list(range(1, 129))
    for sm in (80, 86, 89, 90):
        assert targets.support("v3", sm) == {"float16": [32, 64, 96, 128],
                                             "bfloat16": [32, 64, 96, 128]}
        assert targets.support("v1", sm)["float32"] == list(range(1, 257))
    assert targets.head_dim_text(list(range(16, 129, 16))) == "16-128 in steps of 16"
    assert targets.head_dim_text(list(range(1, 129))) == "1-128"
    assert targets.head_dim_text([32, 64, 96, 128]) == "32, 64, 96, 128"
    line = targets.reader_line("T4")
    assert line.startswith("On a T4 (`sm_75`), at head_dim 64: float16 runs cuda-wmma (v2); "
                           "bfloat16 runs cuda-naive (v1) (bfloat16 tensor cores need sm_80")
    assert "cuda-flash (v3) does not run there: cuda-flash needs sm_80 or newer" in line
    assert targets.reader_line("A100") == ("On an A100 (`sm_80`), at head_dim 64: float16 runs "
                                           "cuda-flash (v3); bfloat16 runs cuda-flash (v3).")


@needs_nvrtc
@pytest.mark.parametrize("arch", ["sm_75", "sm_80", "sm_86", "sm_89", "sm_90"])
def test_each_kernel_compiles_for_each_architecture_or_refuses_with_its_reason(arch):
    """v1 and v2 at head_dim 64 (fp16) compile for every target (v1 with no spills; v2's fp16
    kernel spills a few bytes on sm_86..sm_90, which the table shows), v3 for sm_80+; where a
    kernel cannot run, compile_attention refuses before NVRTC, in one line."""
    sm = int(arch[3:])
    for version in ("v1", "v2"):
        r = targets.compiled(version, 64, fp16, arch)
        assert 0 < r["registers"] <= 255 and r["threads"] == 128, (version, arch, r)
        assert r["spill_bytes"] == 0 if version == "v1" else 0 <= r["spill_bytes"] <= 64
        assert r["shared_bytes"] <= (64 if sm == 75 else 99) * 1024
    v3 = targets.compiled("v3", 64, bf16, arch)
    bf = targets.compiled("v2", 64, bf16, arch)
    if sm < 80:
        # the compiler's refusal is the spec's one limits function, the arch as the GPU
        assert v3 == {"refused": "arch='sm_75': cuda-flash needs sm_80 or newer (cp.async, "
                                 "bf16 mma.sync); this GPU is sm_75"}
        assert bf == {"refused": "arch='sm_75': bfloat16 tensor cores need sm_80 or newer; this "
                                 "GPU is sm_75"}
        assert targets.compiled("v1", 256, fp16, arch)["refused"].startswith(
            "arch='sm_75': head_dim=256 needs more than the 64 KB of shared memory")
    else:
        assert v3["spill_bytes"] == 0 and 200 < v3["registers"] <= 255 and "registers" in bf


@needs_nvrtc
def test_the_table_reads_the_compiled_kernels_and_the_dispatcher():
    rows = targets.gpu_rows(gpus=("T4", "RTX 3090"))
    t4, ga = rows
    assert t4["versions"]["v3"]["support"] == {} and "registers" not in t4["versions"]["v3"]
    assert t4["auto"]["float16"].version == "v2" and t4["auto"]["bfloat16"].version == "v1"
    v2 = t4["versions"]["v2"]
    occ = occupancy.occupancy(v2, v2["threads"], occupancy.T4)
    assert v2["blocks_per_sm"] == occ["blocks_per_sm"] >= 1
    assert ga["auto"]["float16"].version == "v3" and ga["versions"]["v3"]["registers"] > 0
    md = targets.table_markdown(rows).splitlines()
    assert md[0].startswith("| GPU | arch | SMs | v1 (cuda-naive) | v2 (cuda-wmma) | v3 (cuda-flash)")
    assert md[2].startswith("| T4 | `sm_75` | 40 | ") and "| does not run |" in md[2]
    assert md[2].endswith("| cuda-wmma (v2) | cuda-naive (v1) |")
    assert f"{v2['registers']} registers" in md[2]
    v2_86 = ga["versions"]["v2"]
    assert (f"{v2_86['spill_bytes']} spill bytes" in md[3]) == (v2_86["spill_bytes"] > 0)
