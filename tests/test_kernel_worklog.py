"""The figures module of the chapter "From one block per head to FlashAttention: a kernel worklog".

It reads the .cu files as text (version headers, loops, marked lines), draws the emulator's
launch, and formats GPU measurements and the time model; these tests pin each of those on the
real sources and on small fake result files (no GPU needed).
"""
from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import matplotlib
import pytest
import torch

from andrea_lab.store import seal_folder
from andrea_edu.figures import kernel_worklog as figs
from andrea_edu.figures.kernel_source import first_line
from andrea_edu.kernels import tiles, time_model
from andrea_edu.kernels.emulator import emulate
from andrea_edu.bench import dispatched

matplotlib.use("Agg")


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    import matplotlib.pyplot as plt
    plt.close("all")


def test_ladder_has_one_entry_per_version_with_the_grid_of_each():
    """The committed ladder's entries, pinned on purpose."""
    items = figs.ladder_markdown().splitlines()
    assert [row[:8] for row in items] == ["- **v1**", "- **v2**", "- **v3**"]
    assert "gridDim = (B * nh)" in items[0] and all("ceil(T / " in r for r in items[1:])
    assert "reversed:" not in items[2]  # long parentheticals are left to the file itself


def test_changes_block_lists_each_versions_line_under_its_step():
    rows = [("S", {v: first_line(v, r"blockIdx\.x") for v in figs.VERSIONS})]
    block = figs.changes_markdown(rows).splitlines()
    assert block[0] == "```cpp" and block[1] == "// ---- S" and block[-1] == "```"
    assert [b.split()[1] for b in block[2:-1]] == list(figs.VERSIONS)


@pytest.mark.parametrize("v", figs.VERSIONS)
def test_decomposition_figure_draws_every_tile_of_the_chosen_head(v):
    q, k, vv = (torch.randn(1, 2, 70, 32).to(torch.float16) for _ in range(3))
    _, tr = emulate(q, k, vv, causal=True, kernel=v)
    fig = figs.decomposition_figure(tr)
    grid_ax, matrix_ax = fig.axes[:2]
    tiles = sum(len(t.steps) for b in tr.blocks if (b.b, b.h) == (0, 0) for t in b.q_tiles)
    assert len(matrix_ax.patches) == tiles
    assert len(grid_ax.patches) == tr.n_blocks
    hatched = [p for p in matrix_ax.patches if p.get_hatch()]
    assert hatched  # causal, T=70: the diagonal tiles hold masked scores


def _fake_results(kernel_for_flash="v3"):
    recs = []
    for hd, sdpa_ms in ((64, 1.0), (128, 2.0)):
        p = dict(shape="ANDREA-120M", series="n_head=12", B=8, T=1024, n_head=12, head_dim=hd,
                 causal=True, dtype="bfloat16")
        recs.append(dict(case="c", backend="sdpa", status="ok", params=p, median_ms=sdpa_ms))
        recs.append(dict(case="c", backend="cuda-naive", status="ok", params=p,
                         median_ms=50 * sdpa_ms, kernel="v1"))
        recs.append(dict(case="c", backend="cuda-wmma", status="invalid", params=p,
                         median_ms=None, kernel="v2"))
        recs.append(dict(case="c", backend="cuda-flash", status="ok", params=p,
                         median_ms=2 * sdpa_ms, kernel=kernel_for_flash))
    prov = dict(device="NVIDIA H200", driver="1", cuda="12.8", date="2026-12-01T00:00",
                git_commit="abcdef0123")
    return dict(records=recs, provenance=prov, _path="/x/bench_headdim_nvidia-h200.json")


def test_measured_rows_take_the_ok_records_and_the_speed_relative_to_sdpa():
    assert dispatched.measured_rows(None, nh=12) == []
    rows = dispatched.measured_rows(_fake_results(), nh=12)
    assert {(r["version"], r["head_dim"]) for r in rows} == {("v1", 64), ("v3", 64),
                                                             ("v1", 128), ("v3", 128)}
    v3 = next(r for r in rows if r["version"] == "v3" and r["head_dim"] == 64)
    assert v3["speed"] == pytest.approx(0.5) and v3["kernel"] == "v3"
    cells = figs.measured_cells(rows)
    assert ["v3", "64", "v3"] in [c[:3] for c in cells] and "0.50x" in {c[5] for c in cells}
    assert all(c[6:] == ["-", "-"] for c in cells)  # no model given: no MODEL column values


def test_measured_figure_draws_the_model_hatched_and_labelled_model():
    rows = dispatched.measured_rows(_fake_results(), nh=12)
    fig = figs.measured_figure(rows, _fake_results(), model={("v3", 64): 1e-3})
    ax = fig.axes[0]
    hatched = [p for p in ax.patches if p.get_hatch()]
    assert hatched and all(p.get_facecolor()[3] == 0 for p in hatched)  # outlined, not filled
    labels = ax.get_legend_handles_labels()[1]
    assert any("model" in s.lower() for s in labels)
    assert all("model" not in s for s in labels if "measured" in s)


def test_how_to_measure_is_the_chapters_markdown():
    """How to measure is the chapter's Markdown, written once, not a library string."""
    cells = json.loads((Path(__file__).resolve().parents[1] / "book" / "kernel_worklog.ipynb")
                       .read_text())["cells"]
    assert any("scripts/gpu_suite.sh" in "".join(c["source"]) for c in cells
               if c["cell_type"] == "markdown")


def test_one_block_verdicts():
    full = dict(sms=132, slots=264, idle_sms=0)
    idle = dict(sms=132, slots=924, idle_sms=36)
    assert figs.one_block_check({(0, 0): 1}, (264, 1, 1), full)[1] == "holds"
    facts, verdict = figs.one_block_check({(0, 0): 1}, (96, 1, 1), idle)
    assert verdict == "holds with a caveat" and facts["idle H200 SMs"] == "36 of 132"
    facts, verdict = figs.one_block_check({(0, 0): 3}, (96, 16, 1), full)
    assert verdict == "holds with a caveat" and facts["grid"] == (96, 16, 1)
    assert facts["blocks per (b, h)"] == "3"


def test_never_knows_verdicts():
    sig = SimpleNamespace(param_names=("q", "k", "v", "out", "seq_len", "head_dim"))
    reads = [(10, "base = blockIdx.x * seq_len;  // comment")]
    facts, verdict = figs.never_knows_check(sig, [], reads, True)
    assert verdict == "holds" and facts["grid read on lines"] == "10"
    assert facts["one launch vs one per (b, h)"] == "same bits"
    assert figs.never_knows_check(sig, [], reads, False)[1] == "does not hold"
    assert figs.never_knows_check(sig, ["n_head"], reads, True)[1] == "does not hold"


def test_fragment_tables_follow_the_isa_and_p_needs_no_data_movement():
    # the ISA's figure for C/D: row r, column c of a 16x8 tile sits in lane 4(r%8) + c//2
    assert tiles.accumulator_owner(0, 0) == (0, "c0")
    assert tiles.accumulator_owner(9, 7) == (4 * 1 + 3, "c3")
    # A: a4, a5 are rows 0-7 of columns 8-15; a6, a7 rows 8-15 of columns 8-15
    assert tiles.a_operand_owner(0, 8) == (0, "a4") and tiles.a_operand_owner(15, 15) == (31, "a7")
    # the kernel's pack2: a0a1 <- s[2kk][0..1], a2a3 <- s[2kk][2..3], a4..a7 <- s[2kk+1]
    for r in range(16):
        for c in range(16):
            lane_s, reg_s = tiles.accumulator_owner(r, c % 8)
            lane_a, reg_a = tiles.a_operand_owner(r, c)
            assert lane_s == lane_a
            assert int(reg_a[1]) == 4 * (c // 8) + int(reg_s[1])
    ax = figs.fragment_figure().axes[0]
    assert len(ax.texts) == 256 and not ax.lines  # no red cross: every lane agrees


# --- SASS evidence and the time model, on fake dicts shaped like kernels.sass / time_model's ---
def _ev(total, smem, hmma=0):
    per = dict.fromkeys(figs.MIX, 1)
    per.update(total=total, HMMA=hmma)
    return dict(per_tile=per, smem_bytes_per_tile=smem, registers=64, spill_stores=0,
                spill_loads=0, blocks_per_sm={"H200": 4, "RTX 4090": 2}, keys_per_tile=64)


def _model(seconds, bound="smem"):
    terms = dict(issue=seconds / 2, tensor=seconds / 4, smem=seconds / 3, mufu=seconds / 5,
                 hbm=seconds / 6)
    terms[bound] = seconds
    return dict(kind="model", seconds=seconds, lower=seconds, upper=sum(terms.values()),
                bound_by=bound, terms=terms, model_tflops=1.0, sms=132, sms_busy=132,
                latency_bound=False, warps_per_busy_sm=8,
                B=8, n_head=12, T=1024, causal=True, dtype="bfloat16", gpu="NVIDIA H200",
                work=dict(blocks=96))


EV = {"v1": _ev(4000, 40000), "v2": _ev(1000, 10000, 32), "v3": _ev(500, 2500, 64)}
SC = {"v1": 100, "v2": 100, "v3": 100}
MO = {"v1": _model(1e-3), "v2": _model(1e-4, "issue"), "v3": _model(2e-5)}


def test_evidence_figure_draws_the_model_hatched_and_a_measurement_solid():
    key = lambda d: {(v, 64): x for v, x in d.items()}  # noqa: E731
    models = {(v, 64): {"H200": m} for v, m in MO.items()}
    fig = figs.evidence_figure(key(EV), key(SC), models, "v3", 64, {"H200": 3e-5})
    ax2 = fig.axes[1]
    hatched = [p for p in ax2.patches if p.get_hatch()]
    solid = [p for p in ax2.patches if not p.get_hatch()]
    assert len(hatched) == 6 and all(p.get_facecolor()[3] == 0 for p in hatched)  # 5 terms + sum
    assert max(p.get_height() for p in hatched) == pytest.approx(MO["v3"]["upper"] * 1e6)
    assert len(solid) == 1 and solid[0].get_height() == pytest.approx(30)
    labels = ax2.get_legend_handles_labels()[1]
    assert any("model" in s.lower() for s in labels) and any(s.endswith("measured") for s in labels)
    fig2 = figs.model_overview_figure(models)
    assert all(p.get_hatch() == "///" for p in fig2.axes[0].patches)
    assert "MODEL" in fig2.axes[0].get_ylabel()


def test_measured_seconds_and_the_models_name_for_the_gpu():
    res = _fake_results()
    assert dispatched.model_gpu(res, {"H200": 0, "RTX 4090": 0}) == "H200"
    assert dispatched.model_gpu(None, {"H200": 0}) is None
    rows = dispatched.measured_rows(res, nh=12)
    secs = dispatched.measured_seconds(rows, res, 8, 1024)
    assert secs[("v3", 64)] == {"H200": pytest.approx(2e-3)}
    assert dispatched.measured_seconds(rows, res, 4, 1024) == {}
    v3 = next(c for c in figs.measured_cells(rows, {("v3", 64): 1e-3}) if c[:2] == ["v3", "64"])
    assert v3[6:] == ["1.000", "2.0x"]


def test_rung_numbers_keep_the_nonzero_counts_per_score_and_the_bracket():
    e = _ev(512, 2048, 64)
    e["per_tile"]["LDS"] = 0
    m = dict(_model(2e-5), gpu_key="H200", sms_busy=96)
    r = figs.rung_numbers(e, 1024, m)
    assert r["SASS per warp-tile"]["HMMA"] == 64 and "LDS" not in r["SASS per warp-tile"]
    assert r["SASS per warp-tile"]["total"] == 512
    assert r["per score"] == {"instructions": 0.5, "smem bytes": 2.0}
    assert r["MODEL H200, µs"] == (20.0, round(m["upper"] * 1e6, 1))
    assert r["blocks per SM"] == 4 and r["bound by"] == "smem" and r["SMs busy"] == "96 of 132"


def test_log_axes_label_ticks_without_mathtext():
    """A live slider draws frames on a background thread; mathtext is not thread-safe."""
    key = lambda d: {(v, 64): x for v, x in d.items()}  # noqa: E731
    models = {(v, 64): {"H200": m} for v, m in MO.items()}
    rows = dispatched.measured_rows(_fake_results(), nh=12)
    for fig in (figs.evidence_figure(key(EV), key(SC), models, "v2", 64),
                figs.model_overview_figure(models),
                figs.measured_figure(rows, _fake_results(), model={("v3", 64): 1e-3})):
        fig.canvas.draw()
        for ax in fig.axes:
            labels = [t.get_text() for t in ax.get_xticklabels() + ax.get_yticklabels()]
            assert labels and not any("$" in t for t in labels), labels


# --- the chapter itself, with a GPU results file (fake, never committed) -----------------------
def _fake_gpu_headdim(out_dir, device: str = "NVIDIA H200", slug: str = "fake-gpu",
                      scale: float = 1.0):
    """A head_dim results file as a GPU run would write it: ANDREA-120M, n_head=12, every
    version and SDPA (times x scale), device relabelled as a fake so that no reader could take
    it for a GPU."""
    import json

    from andrea_edu.bench import validate_result
    from andrea_edu.bench.results import expected_work
    from book_toc import REPO

    obj = json.loads((REPO / "book" / "data" / "bench_headdim_cpu.json").read_text())
    # the model's row is found by the device record (whole name, SM count), never a part of
    # the name: the fake says so in its driver field
    obj["provenance"].update(device_kind="gpu", device=device, sm_count=132,
                             device_slug=slug, driver="0.0 (test)", cuda="0.0")
    obj["settings"]["timer"] = "cuda-events"
    recs = []
    for hd in dispatched.HEAD_DIMS:
        p = dict(shape="ANDREA-120M", series="n_head=12", B=8, T=1024, n_head=12, head_dim=hd,
                 d_model=12 * hd, causal=True, dtype="bfloat16")
        for backend, ms, kernel in (("sdpa", 0.1, None), ("cuda-naive", 6.0, "v1"),
                                    ("cuda-wmma", 0.6, "v2"), ("cuda-flash", 0.16, "v3")):
            ms *= scale
            rec = dict(case=f"ANDREA-120M/n_head=12/head_dim={hd}", backend=backend,
                       params=p, status="ok", reason=None, max_abs_err=0.01, min_ms=ms,
                       median_ms=ms, max_ms=ms, repeats=obj["settings"]["repeats"], kernel=kernel)
            work = expected_work("headdim", rec)
            assert work is not None
            recs.append({**rec, work[0]: work[1]})  # the FLOPs the file's formula gives
    obj["records"] = recs
    validate_result(obj)
    (out_dir / f"bench_headdim_{slug}.json").write_text(json.dumps(obj))
    seal_folder(out_dir)  # the book reads only files its folder's SHA256SUMS lists


def test_chapter_shows_a_gpu_file_beside_the_model(tmp_path, monkeypatch):
    import nbformat
    from nbclient import NotebookClient

    from book_toc import REPO

    _fake_gpu_headdim(tmp_path)
    # an H100's file beside the H200's (issue 41 item 6): both shown, neither shadows the other
    _fake_gpu_headdim(tmp_path, device="NVIDIA H100 80GB HBM3", slug="fake-gpu-h100", scale=2.0)
    monkeypatch.setenv("ANDREA_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("ANDREA_FAST", "1")
    monkeypatch.delenv("ANDREA_BOOK_BUILD", raising=False)
    path = REPO / "book" / "kernel_worklog.ipynb"
    nb = nbformat.read(path, as_version=4)
    NotebookClient(nb, timeout=600, kernel_name="python3", allow_errors=True,
                   resources={"metadata": {"path": str(path.parent)}}).execute()
    outs = [o for c in nb.cells for o in c.get("outputs", [])]
    errors = [f"{o.get('ename')}: {o.get('evalue')}" for o in outs if o["output_type"] == "error"]
    assert not errors, errors
    text = "\n".join("".join(o.get("data", {}).get("text/markdown", "")) for o in outs)
    printed = "\n".join(o.get("text", "") for o in outs if o["output_type"] == "stream")
    assert "'device': 'NVIDIA H200', 'driver': '0.0 (test)'" in printed
    assert "'device': 'NVIDIA H100 80GB HBM3', 'driver': '0.0 (test)'" in printed
    assert "Not yet measured" not in printed
    assert "| v3 | 64 | v3 | 0.160 | 0.100 | 0.62x |" in text  # measured beside the model
    assert "| v3 | 64 | v3 | 0.320 | 0.200 | 0.62x |" in text  # the H100's, its own table
    figures = [o for c in nb.cells if "one block per GPU" in "".join(c.source)
               for o in c.get("outputs", []) if "image/png" in o.get("data", {})]
    assert len(figures) == 2                                   # one figure per GPU file
    plain = "\n".join("".join(o.get("data", {}).get("text/plain", "")) for o in outs)
    # exercise 5's cell, as committed (device = "cpu"), reads the first GPU file by name
    assert "'device': 'NVIDIA H100 80GB HBM3',\n 'version': 'v3',\n 'ran': 'v3',\n " \
        "'head_dim': 64,\n 'measured, ms': 0.32," in plain
    assert ("'measured vs SDPA (best head_dim)': {'NVIDIA H100 80GB HBM3': 0.62, "
            "'NVIDIA H200': 0.62}") in " ".join(plain.split())  # at a glance, per GPU


def test_cooperate_verdicts():
    e = dict(keys_per_tile=64, warps_per_block=4, rows_per_warp=32)
    assert figs.cooperate_check(130, 130, e, 2)[1] == "holds"
    facts, verdict = figs.cooperate_check(128, 130, e, 1)
    assert verdict == "holds with a caveat" and facts["query rows per block"] == "128 of 130"


def test_lane_elements_follow_the_isa():
    """Exercise 1: lane 4g + t holds rows g, g + 8 and columns 2t, 2t + 1 (+ 8 for s[1]); the
    A operand puts the same elements in the same lane, in pack2's order."""
    held = tiles.lane_elements(5)  # g = 1, t = 1
    assert held["s[0]"] == {"c0": (1, 2), "c1": (1, 3), "c2": (9, 2), "c3": (9, 3)}
    assert held["s[1]"] == {"c0": (1, 10), "c1": (1, 11), "c2": (9, 10), "c3": (9, 11)}
    for lane in range(32):
        h = tiles.lane_elements(lane)
        assert list(h["A"].values()) == list(h["s[0]"].values()) + list(h["s[1]"].values())
    for bad in (32, -1, 5.0):
        with pytest.raises(ValueError, match=r"lane=.*: allowed values are 0\.\.31"):
            tiles.lane_elements(bad)  # type: ignore[arg-type]  # under test


def test_model_terms_max_or_sum():
    m = dict(_model(4e-5, "issue"), version="v3", head_dim=64, useful_flops=8e9,
             published=[dict(kernel="FlashAttention-2", seconds=5e-5)])
    perfect = time_model.model_terms(m, "perfect")
    none = time_model.model_terms(m, "none")
    total = sum(m["terms"].values())
    assert perfect["largest"] == "issue" and perfect["MODEL terms, µs"]["issue"] == 40.0
    assert perfect["max of the terms, µs"] == 40.0 and perfect["useful TFLOP/s"] == 200
    assert none["sum of the terms, µs"] == round(total * 1e6, 1) and "max of the terms, µs" not in none
    assert perfect["published, µs"] == {"FlashAttention-2": 50.0}
    with pytest.raises(ValueError, match="overlap='some': allowed values are 'perfect', 'none'"):
        time_model.model_terms(m, "some")


def test_model_beside_measured_without_a_file_names_where_it_looked(tmp_path, monkeypatch):
    monkeypatch.setenv("ANDREA_DATA_DIR", str(tmp_path))
    (line,) = dispatched.model_beside_measured(None, 12, torch.bfloat16)
    assert line.startswith("no committed bench_headdim_<gpu>.json found; looked in: "
                           f"{tmp_path / 'bench_headdim_<gpu>.json'}")
    res = _fake_results()
    res["provenance"]["device"] = "NVIDIA A10"
    (line,) = dispatched.model_beside_measured(res, 12, torch.bfloat16)
    assert line == "NVIDIA A10: no time-model preset (presets: H200, H100, RTX 4090)"
    with pytest.raises(ValueError, match="hs=80"):
        dispatched.model_beside_measured(_fake_results(), 12, torch.bfloat16, head_dims=(80,))
    rows = dispatched.model_beside_measured(_fake_results(), 12, torch.bfloat16, head_dims=(64,))
    assert rows and all(isinstance(r, dict) for r in rows)
    for r in rows:   # measured beside the bracket, and the ratio to its lower edge
        lo, hi = r["MODEL, ms"]
        assert 0 < lo <= hi   # the ratio from unrounded times: the rounded ones agree to 5 %
        assert r["measured / lower edge"] == pytest.approx(r["measured, ms"] / lo, rel=0.05)


def test_exercise_5_gpu_run_reaches_the_driver_boundary_on_a_cpu():
    """The suite call of exercise 5's "cuda" branch, with its arguments, runs on a CPU: SDPA is
    timed, the three kernels are recorded as unavailable, and the lines read the result."""
    from andrea_edu.bench import suites

    res = suites.run_suite("headdim", device="cpu", fast=True, progress=False, strict=False,
                           head_dims=(64,), shapes=["ANDREA-120M"], series=["n_head"],
                           backends=("sdpa", *figs.BACKEND.values()), repeats=1, warmup=0)
    status = {r["backend"]: r["status"] for r in res["records"]}
    assert status == {"sdpa": "ok", **dict.fromkeys(figs.BACKEND.values(), "unavailable")}
    assert {"cuda-naive", "cuda-wmma", "cuda-flash"} <= set(status)
    (line,) = dispatched.model_beside_measured(res, 12, torch.bfloat16, head_dims=(64,))
    assert "no time-model preset (presets: H200" in line
