"""andrea_edu.kernels.tiles and andrea_edu.figures.config_mirrors_hardware: tile arithmetic against brute force, torch's SDPA
head_dim rules, the compiled kernels' facts, and the chapter's figures with and without data."""
from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from andrea_edu.bench import dispatched
from andrea_edu.figures import config_mirrors_hardware as tile_figures
from andrea_edu.kernels import tiles


@settings(max_examples=60, deadline=None)
@given(seq_len=st.integers(1, 300), head_dim=st.integers(1, 300), tile=st.sampled_from([8, 16, 32]))
def test_tile_coverage_matches_counting_cells(seq_len, head_dim, tile):
    cov = tiles.tile_coverage(seq_len, head_dim, tile)
    grid = torch.zeros(cov.padded_rows, cov.padded_cols)  # the tiles, cell by cell
    grid[:seq_len, :head_dim] = 1
    assert cov.padded_rows % tile == 0 and cov.padded_cols % tile == 0
    assert cov.padded_rows - seq_len < tile and cov.padded_cols - head_dim < tile
    assert cov.useful == int(grid.sum()) and cov.computed == grid.numel()
    assert cov.utilization == pytest.approx(grid.mean().item())
    assert (cov.col_utilization == 1.0) == (head_dim % tile == 0)


def test_the_sources_three_head_dims():
    assert tiles.tile_coverage(1024, 64).col_tiles == 4
    assert tiles.tile_coverage(1024, 64).utilization == 1.0
    assert tiles.tile_coverage(1024, 32).utilization == 1.0
    c72 = tiles.tile_coverage(1024, 72)
    assert (c72.col_tiles, c72.padded_cols, c72.utilization) == (5, 80, 0.9)


@pytest.mark.parametrize("bad", [dict(seq_len=0), dict(head_dim=-3), dict(tile=1.5),
                                 dict(head_dim=True)])
def test_tile_coverage_rejects_bad_sizes(bad):
    kw = dict(seq_len=8, head_dim=8, tile=16) | bad
    with pytest.raises(ValueError, match=list(bad)[0]):
        tiles.tile_coverage(**kw)


@pytest.mark.parametrize("hd, padded, kernel", [(32, 32, 32), (33, 40, 64), (64, 64, 64),
                                                (70, 72, 96), (72, 72, 96), (96, 96, 96),
                                                (130, 136, 160), (256, 256, 256), (257, 264, None)])
def test_torch_flash_head_dim(hd, padded, kernel):
    fl = tiles.torch_flash_head_dim(hd)
    assert (fl["padded_in_memory"], fl["kernel_head_dim"]) == (padded, kernel)
    if kernel:
        assert fl["kernel_utilization"] == pytest.approx(hd / kernel)


def test_sdpa_rules_follow_the_multiples_of_8():
    for hd in range(1, 300):
        r = tiles.sdpa_head_dim_rules(hd)
        assert r["math"][0]
        assert r["flash"][0] == (hd <= 256)
        assert r["efficient"][0] == (hd % 8 == 0)
        assert r["cudnn"][0] == (hd % 8 == 0 and hd <= 256)
    assert tiles.sdpa_head_dim_rules(70, torch.float32)["efficient"] == (False, "head_dim=70 is "
                                                                         "not a multiple of 4")
    assert not tiles.sdpa_head_dim_rules(64, torch.float32)["flash"][0]


def test_mma_work_per_score_is_four_head_dims():
    bq, bk = tiles.v2_block_shape()
    for hd in (16, 32, 64, 128):
        w = tiles.mma_work(hd)
        assert w["tensor_flops_per_score"] == 4 * hd == w["useful_flops_per_score"]
        assert w["wmma_ops_per_kv_tile"] == 2 * (bq // 16) * (bk // 16) * (hd // 16)
    assert tiles.mma_work(72)["tensor_flops_per_score"] == 4 * 80  # the padded tile's work
    assert tiles.mma_work(32, bq=16, bk=16)["wmma_ops_per_kv_tile"] == 4


def _nvrtc_or_skip():
    try:
        from cuda.bindings import nvrtc  # noqa: F401
    except ImportError as e:
        pytest.skip(f"NVRTC (cuda-bindings) is not installed: {e}")


def test_kernel_facts_tensor_cores_only_for_multiples_of_16():
    _nvrtc_or_skip()
    f64, f72 = dispatched.kernel_facts(64), dispatched.kernel_facts(72)
    assert f64["error"] is None and f72["error"] is None, (f64["error"], f72["error"])
    assert (f64["backend"], f64["kernel"]) == ("cuda-flash", "v3")  # auto prefers v3 (sm_80+)
    assert f64["tensor_core_instructions"] > 0
    assert (f72["backend"], f72["kernel"]) == ("cuda-naive", "v1")
    assert f72["tensor_core_instructions"] == 0 and f72["fallbacks"]
    assert f64["resources"]["registers"] > 0 and f64["occupancy"]["blocks_per_sm"] >= 1
    B, nh, T = 8, 12, 1024
    assert f72["grid_fill"]["n_blocks"] == B * nh  # v1: one block per (batch, head)
    from andrea_edu.kernels.toolkit import block_rows
    bq = block_rows(f64["kernel"], 64)              # v3: 128 query rows per block at 64
    assert f64["grid_fill"]["n_blocks"] == B * nh * math.ceil(T / bq)
    assert dispatched.kernel_facts(300)["kernel"] is None  # above every kernel: sdpa, nothing compiled


def _fake_results(device_kind="gpu"):
    recs = []
    for hd in (32, 64, 72):
        for backend, ms in (("sdpa", 1.0), ("cuda-wmma", 2.0)):
            recs.append(dict(case=f"x/{hd}", backend=backend, status="ok", reason=None,
                             params=dict(shape="ANDREA-120M", series="n_head=12", head_dim=hd),
                             median_ms=ms, min_ms=ms, max_ms=ms, tflops=hd / ms,
                             sdpa_choice="flash_attention"))
    dev = "NVIDIA H200" if device_kind == "gpu" else "CPU: test"
    return dict(provenance=dict(device_kind=device_kind, device=dev),
                settings=dict(dtype="bfloat16", shapes={"ANDREA-120M": dict(B=8, T=1024)}),
                records=recs)


def test_curves_and_device_label():
    res = _fake_results()
    cs = tile_figures.curves(res)
    assert [h for h, _ in cs["cuda-wmma"]] == [32, 64, 72]
    assert tile_figures.curves(res, series="d_model=768") == {}
    assert tile_figures.device_label(res) == "NVIDIA H200"
    assert "CPU" in tile_figures.device_label(_fake_results("cpu"))


def _fake_row(hd, version, instr, lower):
    """One kernels.head_dim_evidence.at() row, made up (no compile): what the figure reads."""
    cov = tiles.tile_coverage(1024, hd)
    m = dict(lower_us=lower, upper_us=3 * lower, bound_by="issue", latency_bound=version == "v1",
             sms_busy=96, sms=132, blocks=96, blocks_per_sm=2, registers=64, waves=1,
             idle_sms=36, tensor_per_score=0.0 if version == "v1" else 0.06,
             instr_per_score=instr, smem_per_score=10.0, useful_tflops=1.0)
    return dict(head_dim=hd, B=8, n_head=12, T=1024, causal=True, version=version,
                backend="cuda-" + version, why=f"{version} runs", tile_useful=cov.utilization,
                col_tiles=cov.col_tiles, model={"H200": m, "RTX 4090": m}, registers=64,
                tensor_per_score=m["tensor_per_score"], instr_per_score=instr,
                smem_per_score=10.0, blocks_per_sm={"H200": 2, "RTX 4090": 2},
                waves={"H200": 1, "RTX 4090": 1}, idle_sms={"H200": 36, "RTX 4090": 32},
                published=[])


@pytest.mark.parametrize("measured", [False, True])
def test_head_dim_figure_draws_with_or_without_a_measurement(measured):
    import matplotlib.pyplot as plt
    from matplotlib.figure import Figure

    sweep = [_fake_row(64, "v3", 0.3, 20.0), _fake_row(72, "v1", 35.0, 2600.0)]
    pts = {72: dict(device="NVIDIA H200 (test)", source="f.json",
                    kernel=dict(backend="cuda-naive", us=3000.0),
                    sdpa=dict(backend="flash", us=50.0))} if measured else None
    fig = tile_figures.head_dim_figure(72, sweep, measured=pts)
    try:
        assert isinstance(fig, Figure)
        titles = " ".join(ax.get_title() for ax in fig.axes)
        assert "90.0% useful" in titles and "MODEL" in titles
        assert ("measured on NVIDIA H200 (test)" in titles) == measured
        assert ("no GPU measurement" in titles) != measured
        with pytest.raises(ValueError, match="not in the sweep"):
            tile_figures.head_dim_figure(80, sweep)
        fig.canvas.draw()  # a live slider draws frames on a thread: no mathtext tick labels
        ticks = [t.get_text() for ax in fig.axes for t in ax.get_yticklabels()]
        assert ticks and not any("$" in t for t in ticks), ticks
    finally:
        plt.close(fig)
    plt.close(tile_figures.mma_shapes_figure())


def test_head_dims_at_least():
    assert tiles.head_dims_at_least(1.0, 1024) == list(range(16, 129, 16))  # no padding at all
    near = tiles.head_dims_at_least(0.9, 1024)
    # 90% of a 16-wide tile: the last tile of ceil(h/16) holds at least 0.9 * 16 * ceil(h/16)
    assert near == [h for h in range(1, 129) if h >= 0.9 * 16 * math.ceil(h / 16)]
    assert 15 in near and 14 not in near and 72 in near and 71 not in near
    assert tiles.head_dims_at_least(0.5, 1024, up_to=8) == [8]


@pytest.mark.parametrize("bad", [90, 0, -0.5, 1.5, True, "0.9"])
def test_head_dims_at_least_names_the_allowed_fractions(bad):
    with pytest.raises(ValueError) as e:
        tiles.head_dims_at_least(bad)
    assert str(e.value).startswith(f"useful={bad!r}: allowed values are fractions in (0, 1]")


def test_flash_utilization_figure():
    import matplotlib.pyplot as plt

    fig = tile_figures.flash_utilization_figure(256)
    ys = fig.axes[0].lines[0].get_ydata()  # the curve; the other lines mark the kernel widths
    assert len(ys) == 256 and max(ys) == 1.0 and min(ys) == 1 / 32  # head_dim 1 in the 32 kernel
    plt.close(fig)
    for bad in (0, 257, 64.0):
        with pytest.raises(ValueError, match=r"h_max=.*: allowed values are 1\.\.256"):
            tile_figures.flash_utilization_figure(bad)  # type: ignore[arg-type]  # under test


def test_sdpa_eligibility_and_same_d_model():
    res = _fake_results()
    res["records"] += [dict(backend="sdpa:efficient", status="unavailable",
                            reason="RuntimeError: No viable backend. More text",
                            params=dict(head_dim=70))]
    (row,) = tile_figures.sdpa_eligibility(res)
    assert row == {"head_dim": 70, "backend": "sdpa:efficient", "measured": "unavailable",
                   "reason": "RuntimeError: No viable backend", "eligible on a GPU": False,
                   "rule": "head_dim=70 is not a multiple of 8"}
    assert "no committed head_dim measurement" in tile_figures.same_d_model(None)
    assert "cuda-wmma not timed at head_dim 32 and 64" in tile_figures.same_d_model(res)
    res["settings"]["shapes"]["ANDREA-120M"]["d_model"] = 768
    for hd, nh, ms in ((32, 24, 3.0), (64, 12, 2.0)):
        res["records"].append(dict(backend="cuda-wmma", status="ok", median_ms=ms, params=dict(
            shape="ANDREA-120M", series="d_model=768", head_dim=hd, n_head=nh, B=8, T=1024)))
    same = tile_figures.same_d_model(res)
    assert isinstance(same, dict) and same["d_model"] == 768 and (same["B"], same["T"]) == (8, 1024)
    assert (same["head_dim 32 (n_head 24), ms"], same["head_dim 64 (n_head 12), ms"],
            same["ratio 32 / 64"]) == (3.0, 2.0, 1.5)


def test_exercise_5_gpu_run_reaches_the_driver_boundary_on_a_cpu():
    """The suite call of exercise 5's "cuda" branch, with its arguments, runs on a CPU: SDPA is
    timed, the tensor-core kernel is recorded as unavailable, and the line reads the result."""
    from andrea_edu.bench import suites

    res = suites.run_suite("headdim", device="cpu", fast=True, progress=False, strict=False,
                           head_dims=(32, 64), shapes=["ANDREA-120M"], series=["d_model"],
                           backends=("sdpa", "cuda-wmma"), repeats=1, warmup=0)
    status = {(r["backend"], r["params"]["head_dim"]): r["status"] for r in res["records"]}
    assert status == {("sdpa", 32): "ok", ("sdpa", 64): "ok", ("cuda-wmma", 32): "unavailable",
                      ("cuda-wmma", 64): "unavailable"}
    assert "head_dim 32 (n_head 24), ms" in tile_figures.same_d_model(res, "sdpa")
    assert "cuda-wmma not timed" in tile_figures.same_d_model(res, "cuda-wmma")
