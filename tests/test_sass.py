"""kernels.sass (SASS evidence per K/V tile) and kernels.time_model (the labelled lower-bound
model): the counting rules on small hand-written SASS, then the real kernels compiled by NVRTC
(skipped without cuda-bindings or cuobjdump), and v3's PTX for sm_80 and sm_90."""
from __future__ import annotations

import math

import pytest
import torch

from andrea_edu.kernels import sass, time_model
from andrea_edu.kernels.toolkit import block_rows, kernel_constants


def _sass(lines):
    """cuobjdump-style text from (address, instruction) pairs."""
    return "\n".join(f"        /*{a:04x}*/                   {t} ;  /* 0x0 */" for a, t in lines)


def test_instruction_classes_and_shared_memory_bytes():
    ins = sass.parse_sass(_sass([
        (0x00, "LDSM.16.M88.4 R4, [R2]"), (0x10, "LDSM.16.MT88.2 R4, [R2]"),
        (0x20, "LDS.128 R4, [R2]"), (0x30, "STS.U16 [R2], R4"), (0x40, "LDS R4, [R2]"),
        (0x50, "LDGSTS.E.BYPASS.128 [R2], desc[UR4][R4.64]"), (0x60, "@!PT LDS RZ, [RZ]"),
        (0x70, "MUFU.EX2 R1, R2"), (0x80, "MUFU.RCP R1, R2"), (0x90, "BAR.SYNC.DEFER_BLOCKING 0x0"),
        (0xa0, "HMMA.16816.F32.BF16 R0, R4, R8, R0"), (0xb0, "LD.E R4, desc[UR4][R2.64]")]))
    assert [sass.klass(i) for i in ins] == ["LDSM", "LDSM", "LDS", "STS", "LDS", "LDGSTS", None,
                                           "MUFU.EX2", None, "BAR", "HMMA", "LD"]
    assert [sass.smem_bytes(i) for i in ins] == [512, 256, 512, 64, 128, 512, 0, 0, 0, 0, 0, 128]
    assert ins[6].pred == "@!PT" and ins[6].never


def test_walk_takes_the_full_unmasked_path_and_weights_inner_loops():
    """K/V loop 0x00..0x100 (it holds the BAR); an if/else whose sides hold the same work (the
    shorter is taken); a mask block with no work (skipped); an inner loop with one LDG per
    trip whose source loop has 8 iterations of one load each: 8 trips."""
    lines = [
        (0x00, "BAR.SYNC.DEFER_BLOCKING 0x0"),
        (0x10, "@P0 BRA 0x50"),                       # if / else
        (0x20, "LDGSTS.E.BYPASS.128 [R2], desc[UR4][R4.64]"),
        (0x30, "IADD3 R1, R1, 0x1, RZ"),
        (0x40, "BRA 0x90"),
        (0x50, "ISETP.GE.AND P1, PT, R1, R2, PT"),    # else side: same copy, more guards
        (0x60, "SEL R4, R4, RZ, P1"),
        (0x70, "SEL R5, R5, RZ, P1"),
        (0x80, "LDGSTS.E.BYPASS.128 [R2], desc[UR4][R4.64]"),
        (0x90, "@P2 BRA 0xc0"),                       # mask block: no work -> skipped
        (0xa0, "FSEL R8, R8, -INF , P3"),
        (0xb0, "FSEL R9, R9, -INF , P3"),
        (0xc0, "LDG.E.U16.CONSTANT R3, desc[UR4][R6.64]"),   # inner loop 0xc0..0xe0
        (0xd0, "IADD3 R6, R6, 0x2, RZ"),
        (0xe0, "@P4 BRA 0xc0"),
        (0xf0, "HMMA.16816.F32.BF16 R0, R4, R8, R0"),
        (0x100, "@P5 BRA 0x0"),
    ]
    ins = sass.parse_sass(_sass(lines))
    assert sass.kv_loop(ins) == (0x00, 0x100)
    mix = sass.tile_counts(ins, lambda m: (8, 1, "LDG") if m["LDG"] else None)
    # BAR, BRA(0x10), 3 of the short side, BRA(0x90), 3 x 8 loop trips, HMMA, the back edge
    assert mix["total"] == 1 + 1 + 3 + 1 + 3 * 8 + 1 + 1
    assert (mix["LDGSTS"], mix["LDG"], mix["HMMA"], mix["BAR"]) == (1, 8, 1, 1)
    assert mix["smem_bytes"] == 512


def test_walk_avoids_a_mask_entered_through_a_short_circuit():
    """`if (tail || (causal && diagonal)) mask();` compiles to a jump *into* the mask when the
    first test holds, then a jump over it when the second fails: the unmasked path is the
    second jump's, not the first's."""
    ins = sass.parse_sass(_sass([
        (0x00, "BAR.SYNC.DEFER_BLOCKING 0x0"),
        (0x10, "@P0 BRA 0x40"),                       # tail: into the mask
        (0x20, "ISETP.GT.AND P1, PT, R1, R2, PT"),
        (0x30, "@!P1 BRA 0x70"),                      # not diagonal: over the mask
        (0x40, "FSEL R8, R8, -INF , P3"),
        (0x50, "FSEL R9, R9, -INF , P3"),
        (0x60, "FSEL R10, R10, -INF , P3"),
        (0x70, "HMMA.16816.F32.BF16 R0, R4, R8, R0"),
        (0x80, "@P5 BRA 0x0")]))
    mix = sass.tile_counts(ins, lambda m: None)
    assert mix["total"] == 6 and mix["HMMA"] == 1      # BAR, BRA, ISETP, BRA, HMMA, back edge


def test_launch_work_counts_the_tiles_each_block_stages():
    c3 = kernel_constants("v3")
    w = time_model.launch_work("v3", 2, 3, 130, False, 64)
    n_q = math.ceil(130 / block_rows("v3", 64))
    assert w["blocks"] == 6 * n_q and w["kv_tiles"] == 6 * n_q * math.ceil(130 / c3["V3_BK"])
    assert w["warp_tiles"] == w["kv_tiles"] * c3["V3_WARPS"]
    causal = time_model.launch_work("v3", 1, 1, 256, True, 96)["kv_tiles"]   # 64-row blocks
    assert causal == sum(range(1, 256 // c3["V3_BK"] + 1))             # 1 + 2 + 3 + 4
    narrow = time_model.launch_work("v3", 1, 1, 256, True, 64)               # 128-row blocks
    assert narrow["kv_tiles"] == 2 + 4
    # warps of 32 rows skip tiles wholly above their rows: (1+1+2+2) + (3+3+4+4)
    assert narrow["warp_tiles"] == 6 + 14
    v1 = time_model.launch_work("v1", 1, 1, 64, False, 64)
    c1 = kernel_constants("v1")
    assert v1["kv_tiles"] == (64 // c1["V1_BR"]) * (64 // c1["V1_BC"])


def _evidence_or_skip(version, hd, dtype=torch.bfloat16, arch="sm_90"):
    try:
        return sass.evidence(version, hd, dtype, arch)
    except Exception as e:  # no cuda-bindings / headers / cuobjdump here
        pytest.skip(f"cannot compile or disassemble here: {type(e).__name__}: {e}")


@pytest.mark.parametrize("hd", [32, 64, 128])
def test_v3_tile_mix_is_what_the_source_says(hd):
    """Per warp and 64-key tile, with mt m16 tiles per warp (2 up to head_dim 64): S
    (BK/8 x HD/16) + O (HD/8 x BK/16) HMMA.16816 per m16 tile, one LDSM.x4 per 16x16 block of K
    and of V (shared by the m16 tiles), the tile's 16-byte copies shared by 128 threads, one
    exp2 per score plus one alpha per row half, two quad shuffles per row half, one barrier."""
    ev = _evidence_or_skip("v3", hd)
    c = kernel_constants("v3")
    bk, mt = c["V3_BK"], block_rows("v3", hd) // c["V3_WARPS"] // 16
    assert ev["rows_per_warp"] == 16 * mt and mt == (2 if hd <= 64 else 1)
    t = ev["per_tile"]
    assert t["HMMA"] == mt * 2 * (bk // 8) * (hd // 16)
    assert t["LDSM"] == 2 * (bk // 16) * (hd // 16)
    assert t["LDGSTS"] == 2 * bk * hd // 8 // c["V3_THREADS"]
    assert t["MUFU.EX2"] == mt * (16 * bk // 32 + 2) and t["SHFL"] == 4 * mt and t["BAR"] == 1
    assert t["LDS"] == t["STS"] == t["LD"] == t["LDG"] == 0       # S, P, O stay in registers
    assert ev["smem_bytes_per_tile"] == 512 * (t["LDSM"] + t["LDGSTS"])
    assert ev["spill_stores"] == ev["spill_loads"] == 0 and ev["blocks_per_sm"]["H200"] >= 2


def test_v3_against_v2_at_head_dim_64():
    """The issue's targets, read from the SASS: no spills, >= 2 blocks per SM on an H200,
    >= 4x fewer shared-memory bytes per score (query row x key: the tiles differ in size) and a
    model bound >= 3x below v2's."""
    v2, v3 = _evidence_or_skip("v2", 64), _evidence_or_skip("v3", 64)
    assert v2["per_tile"]["HMMA"] == 32 and v2["per_tile"]["LD"] + v2["per_tile"]["LDS"] > 0
    assert v2["scores_per_tile"] == 16 * 32 and v3["scores_per_tile"] == 32 * 64
    assert v2["smem_bytes_per_score"] / v3["smem_bytes_per_score"] >= 4
    assert v3["spill_stores"] == 0 and v3["blocks_per_sm"]["H200"] >= 2
    m2, m3 = (time_model.model_bound(v, 8, 12, 1024, 64, True, evidence=e)
              for v, e in (("v2", v2), ("v3", v3)))
    assert m2["kind"] == m3["kind"] == "model" and "model" in m3["label"].lower()
    assert m2["seconds"] / m3["seconds"] >= 3
    assert all(x > 0 for x in m3["terms"].values()) and m3["seconds"] == max(m3["terms"].values())


def test_model_bound_grows_with_the_work():
    ev = _evidence_or_skip("v3", 64)
    small, big = (time_model.model_bound("v3", 8, 12, T, 64, False, evidence=ev)
                  for T in (512, 2048))          # B=8: both grids busy every SM of an H200
    assert small["sms_busy"] == big["sms_busy"] == 132
    assert big["seconds"] > 10 * small["seconds"] and big["kind"] == "model"
    with pytest.raises(ValueError, match="gpu="):
        time_model.model_bound("v3", 1, 1, 64, 64, gpu="TPU", evidence=ev)


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_v3_compiles_to_mma_sync_ldmatrix_and_cp_async(arch, dtype):
    from andrea_edu.kernels import nvrtc
    try:
        ck = nvrtc.compile_attention("v3", 64, dtype, arch)
    except Exception as e:
        pytest.skip(f"NVRTC unavailable: {type(e).__name__}: {e}")
    kind = "bf16.bf16" if dtype == torch.bfloat16 else "f16.f16"
    assert f"mma.sync.aligned.m16n8k16.row.col.f32.{kind}.f32" in ck.ptx
    assert "ldmatrix.sync.aligned.m8n8.x4.shared.b16" in ck.ptx
    assert "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16" in ck.ptx
    assert "cp.async.cg.shared.global" in ck.ptx and "cp.async.wait_group" in ck.ptx
    assert "ex2.approx.ftz.f32" in ck.ptx
    assert ck.resources.spill_stores == ck.resources.spill_loads == 0
    with pytest.raises(ValueError, match="sm_80"):
        nvrtc.compile_attention("v3", 64, dtype, "sm_75")


@pytest.mark.parametrize("hd", [32, 64, 128])
def test_v1_smem_floor_is_below_what_its_sass_requests(hd):
    """The floor v1's model term uses (each lane's own K and V words, the staging stores) is
    below the SASS count, which includes the broadcast reads of sQ at full width."""
    ev = _evidence_or_skip("v1", hd)
    assert 0 < time_model.v1_smem_floor(hd) <= ev["smem_bytes_per_tile"]


def test_v3_design_case_bound_is_set_beside_flashattention_2():
    """At the design case the counts allow more TFLOP/s than FlashAttention-2, the published
    kernel of v3's design, reaches: the model says so instead of reading like a forecast."""
    ev = _evidence_or_skip("v3", 64)
    m = time_model.model_bound("v3", 8, 12, 1024, 64, True, evidence=ev)
    fa2 = m["published"][0]
    assert fa2["kernel"] == "FlashAttention-2" and fa2["seconds"] > m["seconds"]
    assert m["above_published"] == (m["model_tflops"] > fa2["tflops"])
