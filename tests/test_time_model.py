"""kernels.time_model's ceilings: one clock behind the stated peak, no bound faster than the
cited tensor ceiling, v1's shared-memory term a floor, and every bound set beside what
published kernels reach (a warning where the bound's TFLOP/s exceed them). Fake SASS evidence
keeps these fast; the real kernels' counts are checked in tests/test_sass.py."""
from __future__ import annotations

import itertools

import pytest

from andrea_edu.kernels import time_model as tm


def _ev(total=1000, hmma=0, smem=10_000, ex2=16):
    per = dict(total=total, HMMA=hmma, **{"MUFU.EX2": ex2})
    return dict(per_tile=per, smem_bytes_per_tile=smem)


# tensor-heavy, issue-heavy, smem-heavy and exp-heavy tiles: each term gets to be the bound
EVIDENCE = [_ev(200, 128, 2_000, 8), _ev(5_000, 8, 2_000, 8), _ev(300, 8, 400_000, 8),
            _ev(300, 8, 2_000, 4_000)]
CASES = list(itertools.product(("v1", "v2", "v3"), tm.GPUS, (64, 128), (False, True)))


def test_one_clock_derived_from_the_stated_peak():
    """f = dense peak / (SMs x per-SM tensor FLOPs per clock): the H200's 989.5 TFLOP/s on 132
    SMs at 4,096 FLOPs per clock is 1.830 GHz, not the 1.98 GHz boost; the RTX 4090's 165.2 on
    128 SMs at 512 is its 2.52 GHz boost."""
    assert tm.clock_hz("H200") == pytest.approx(1.830e9, rel=1e-3)
    assert tm.clock_hz("RTX 4090") == pytest.approx(2.520e9, rel=1e-3)
    for key, g in tm.GPUS.items():
        assert g["clock_hz"] == tm.clock_hz(key)            # stored copy = the definition
        assert [k for k in g if k.endswith("_hz")] == ["clock_hz"]   # no second clock


@pytest.mark.parametrize("gpu", list(tm.GPUS))
def test_every_clocked_term_uses_that_one_clock(gpu):
    # ANDREA-120M's launch: v3's 1,536 blocks busy every SM, and no block alone sets a term
    m = tm.model_bound("v3", 8, 12, 1024, 64, True, gpu=gpu, evidence=_ev(1000, 64, 8192, 32))
    g, f, c = tm.GPUS[gpu], tm.clock_hz(gpu), m["counts"]
    assert m["sms_busy"] == g["sms"] and not any(m["grid_bound"].values())
    assert m["clock_hz"] == f
    assert m["terms"]["issue"] == pytest.approx(c["instructions"] / (g["sms"] * 4 * f))
    assert m["terms"]["smem"] == pytest.approx(c["smem_bytes"] / (g["sms"] * 128 * f))
    assert m["terms"]["mufu"] == pytest.approx(c["mufu_ex2"] * 32 / (g["sms"] * 16 * f))
    # the tensor term at the ceiling is the same as at f with the per-SM rate: one clock
    assert m["terms"]["tensor"] == pytest.approx(
        c["hmma"] * tm.HMMA_FLOPS / (g["sms"] * g["tensor_flops_per_clock_per_sm"] * f))


@pytest.mark.parametrize("version,gpu,hd,causal", CASES)
def test_no_bound_implies_more_than_the_cited_ceiling(version, gpu, hd, causal):
    ceiling = tm.TENSOR_CEILING[gpu]["flops"]
    assert ceiling <= tm.GPUS[gpu]["tensor_flops"]
    for ev in EVIDENCE:
        m = tm.model_bound(version, 4, 12, 1024, hd, causal, gpu=gpu, evidence=ev)
        assert m["seconds"] == max(m["terms"].values())
        assert m["counts"]["hmma"] * tm.HMMA_FLOPS / m["seconds"] <= ceiling * (1 + 1e-12)
        if m["counts"]["hmma"] * tm.HMMA_FLOPS >= m["useful_flops"]:
            assert m["model_tflops"] * 1e12 <= ceiling * (1 + 1e-12)


def test_hopper_ceiling_says_none_is_published_and_what_it_assumes():
    h = tm.TENSOR_CEILING["H200"]
    assert h["published"] is False and h["flops"] == tm.GPUS["H200"]["tensor_flops"]
    assert "publishes no rate for mma.sync" in h["note"] and "assumes" in h["note"]
    assert tm.TENSOR_CEILING["RTX 4090"]["published"] is True


@pytest.mark.parametrize("hd", [32, 64, 96, 128])
def test_v1_smem_term_is_a_floor_below_the_sass_count(hd):
    """v1's bound must be a bound: its smem term counts the bytes it cannot avoid, never the
    SASS count that overstates broadcasts, so v1's bound <= the estimate with SASS bytes."""
    floor = tm.v1_smem_floor(hd)
    sass_bytes = 10 * floor                           # SASS overstates: floor wins
    m = tm.model_bound("v1", 8, 12, 1024, hd, True, evidence=_ev(100, 0, sass_bytes, 8))
    n = m["work"]["warp_tiles"]
    assert m["counts"]["smem_bytes"] == n * floor < m["counts"]["smem_bytes_sass"]
    over = m["counts"]["smem_bytes_sass"] / (128 * tm.GPUS["H200"]["sms"] * tm.clock_hz("H200"))
    assert m["seconds"] <= over and m["bound_by"] == "smem"
    low = tm.model_bound("v1", 8, 12, 1024, hd, True, evidence=_ev(100, 0, floor // 2, 8))
    assert low["counts"]["smem_bytes"] == low["work"]["warp_tiles"] * (floor // 2)


def test_published_band_same_design_first_and_only_where_cited():
    useful = 4 * 8 * 12 * 1024 * 1024 * 64 * 0.5
    band = tm.published_band("v3", "H200", True, useful, 64)
    assert [b["kernel"] for b in band][0] == "FlashAttention-2" and band[0]["same_design"]
    assert band[0]["instruction"] == "mma.sync" and band[0]["tflops"] == 229.0
    assert band[0]["seconds"] == pytest.approx(useful / 229e12)
    assert not any(b["same_design"] for b in tm.published_band("v2", "H200", True, useful, 64))
    assert tm.published_band("v3", "RTX 4090", True, useful, 64) == []
    assert tm.published_band("v3", "H200", True, useful, 96) == []
    assert {b["tflops"] for b in tm.published_band("v3", "H200", False, useful)} == {306, 373, 392}
    assert {b["tflops"] for b in tm.published_band("v3", "H200", True, useful, 128)} == {260, 410, 423}
    assert {b["tflops"] for b in tm.published_band("v3", "H200", False, useful, 128)} == {350, 574, 565}


def test_a_published_rate_on_other_pairs_is_labelled_an_extrapolation():
    """The FlashAttention-3 paper measured 16 x 32 (batch, head) pairs at head_dim 64: its rate
    applied to ANDREA-120M's 96 pairs is an extrapolation, and the row says so."""
    useful = 4 * 8 * 12 * 1024 * 1024 * 64 * 0.5
    ours = tm.published_band("v3", "H200", True, useful, 64, pairs=96)
    theirs = tm.published_band("v3", "H200", True, useful, 64, pairs=16 * 32)
    assert all(b["extrapolated"] and "an extrapolation" in b["where"] for b in ours)
    assert not any(b["extrapolated"] or "extrapolation" in b["where"] for b in theirs)
    assert all("B=16 x 32 heads" in b["where"] for b in ours + theirs)


def test_the_model_counts_only_the_sms_the_grid_occupies():
    """v1 launches B * n_head = 96 blocks: on 132 SMs, 36 hold none, so the clocked terms divide
    by 96 SMs (the heaviest block alone on one SM gives the same), 132/96 of the every-SM-busy
    figure; with one block of 4 warps per SM the launch is marked latency-bound."""
    ev = _ev(1000, 0, 100, 16)
    m = tm.model_bound("v1", 8, 12, 1024, 64, True, evidence=ev)
    f, n = tm.clock_hz("H200"), m["work"]["warp_tiles"]
    assert m["sms_busy"] == 96 and m["work"]["blocks"] == 96
    assert m["terms"]["issue"] == pytest.approx(n * 1000 / (96 * 4 * f))
    assert m["terms"]["issue"] == pytest.approx(m["work"]["max_block_warp_tiles"] * 1000 / (4 * f))
    assert m["latency_bound"] and m["warps_per_busy_sm"] == 4
    fills = tm.model_bound("v3", 8, 12, 1024, 64, True, evidence=ev)
    assert fills["sms_busy"] == 132 and not fills["latency_bound"]


def test_one_block_alone_bounds_the_launch():
    """One (batch, head) pair: v1 is one block on one SM; its warps issue at most one
    instruction each per clock, and no split over SMs can make it faster."""
    m = tm.model_bound("v1", 1, 1, 1024, 64, True, evidence=_ev(1000, 0, 100, 16))
    w, f = m["work"], tm.clock_hz("H200")
    assert w["blocks"] == 1 and m["sms_busy"] == 1
    assert m["terms"]["issue"] == pytest.approx(
        w["max_block_warp_tiles"] * 1000 / (min(4, w["warps_per_block"]) * f))


@pytest.mark.parametrize("version", ["v1", "v2", "v3"])
def test_the_bracket_is_the_largest_term_and_the_sum(version):
    for ev in EVIDENCE:
        m = tm.model_bound(version, 8, 12, 1024, 64, True, evidence=ev)
        assert m["lower"] == m["seconds"] == max(m["terms"].values()) == m["terms"][m["bound_by"]]
        assert m["upper"] == pytest.approx(sum(m["terms"].values())) and m["upper"] >= m["lower"]


def test_a_bound_above_published_kernels_says_so():
    """The worklog's bracket cell sets FlashAttention-2's published point (v3's design) beside
    the bound; the bound flags when its TFLOP/s pass every published mma.sync kernel's."""
    fast = tm.model_bound("v3", 8, 12, 1024, 64, True, evidence=_ev(10, 4, 100, 1))
    assert fast["above_published"] and fast["model_tflops"] > 229
    fa2 = [b for b in fast["published"] if b["same_design"]]
    assert [(b["kernel"], b["instruction"], b["tflops"]) for b in fa2] == \
        [("FlashAttention-2", "mma.sync", 229.0)] and fa2[0]["extrapolated"]
    slow = tm.model_bound("v3", 8, 12, 1024, 64, True, evidence=_ev(100_000, 4, 100, 1))
    assert not slow["above_published"]
    none = tm.model_bound("v3", 8, 12, 1024, 64, True, gpu="RTX 4090", evidence=_ev())
    assert not none["published"] and not none["above_published"]


def test_the_clock_is_the_peak_over_sms_and_flops_per_clock_and_the_ceiling_says_if_published():
    """The worklog's Evidence prints, per GPU, the peak, SMs, FLOPs per clock and the clock
    they give, and whether the HMMA.16816 rate is published (else the dense peak is assumed)."""
    h200 = tm.GPUS["H200"]
    assert (h200["tensor_flops"], h200["sms"], h200["tensor_flops_per_clock_per_sm"]) == \
        (989.5e12, 132, 4096)
    assert round(tm.clock_hz("H200") / 1e9, 3) == 1.830
    assert set(tm.TENSOR_CEILING) == set(tm.GPUS)
    assert not tm.TENSOR_CEILING["H200"]["published"] and tm.TENSOR_CEILING["RTX 4090"]["published"]
    for key, c in tm.TENSOR_CEILING.items():
        if not c["published"]:   # not published for mma.sync: the dense peak is assumed
            assert c["flops"] == tm.GPUS[key]["tensor_flops"]


@pytest.mark.parametrize("kw, allowed", [(dict(version="v9"), "is not one of ('v1', 'v2', 'v3p', 'v3'"),
                                         (dict(gpu="A100"), "is not one of ('H200', 'H100', 'RTX 4090')")])
def test_model_bound_names_the_allowed_values_in_one_line(kw, allowed):
    """The worklog's exercise 4 edits `version_e`: a version or GPU the model lacks stops at
    once, in one line naming the allowed ones."""
    args = dict(version="v3", B=8, nh=12, T=1024, head_dim=64, gpu="H200") | kw
    with pytest.raises(ValueError) as e:
        tm.model_bound(**args)
    assert allowed in str(e.value) and "\n" not in str(e.value), str(e.value)
