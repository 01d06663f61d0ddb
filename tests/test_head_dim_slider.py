"""The headline head_dim slider ("The configuration mirrors the hardware"): per head_dim the kernel
the dispatcher runs, its compiled evidence and the time MODEL band; a GPU measurement drawn over
the band with its device (from a synthetic GPU file in a temporary data folder, never committed);
no CPU timing standing in for tensor-core evidence."""
from __future__ import annotations

import json

import matplotlib
import pytest
import torch

from andrea_lab import store
from andrea_edu.dispatch import choose_backend
from andrea_edu.bench import dispatched, load_results
from andrea_edu.figures import config_mirrors_hardware as figs
from andrea_edu.kernels import head_dim_evidence as he
from book_toc import REPO

matplotlib.use("Agg")
HDS = (64, 72, 80)          # v3, v1 (the cliff), v2: one of each rung
FAKE = "NVIDIA H200 (fake, test)"


@pytest.fixture(scope="module")
def sweep():
    return he.sweep(HDS)


@pytest.fixture(scope="module")
def padded():
    """The same head_dims with pad=True: v3 at 64, the padded v3 at 72 and 80."""
    return he.sweep(HDS, pad=True)


def test_both_worlds_at_72_padded_and_fallback(sweep, padded):
    """72 padded costs the tensor-core work of 80 (exactly 80/72 per useful column against 64);
    72 fallen back costs orders of magnitude more instructions and model time."""
    by, byp = {r["head_dim"]: r for r in sweep}, {r["head_dim"]: r for r in padded}
    assert [byp[h]["version"] for h in HDS] == ["v3", "v3p", "v3p"]
    p72, f72, a64 = byp[72], by[72], by[64]
    assert p72["width"] == 80 and p72["useful_columns"] == pytest.approx(0.9)
    per_col = lambda r, k: r[k] / r["head_dim"]  # noqa: E731  (per useful column)
    assert per_col(p72, "tensor_per_score") / per_col(a64, "tensor_per_score") == \
        pytest.approx(80 / 72)
    assert p72["tensor_per_score"] == byp[80]["tensor_per_score"]
    assert f72["instr_per_score"] > 30 * p72["instr_per_score"]
    assert f72["model"]["H200"]["lower_us"] > 30 * p72["model"]["H200"]["lower_us"]
    rows = {(d["head_dim"], d["pad"]): d for d in figs.head_dim_rows(sweep, padded, head_dims=(64, 72))}
    assert sorted(rows) == [(64, False), (64, True), (72, False), (72, True)]
    assert (rows[72, True]["kernel"], rows[72, True]["width"]) == ("v3p", 80)
    assert rows[72, True]["useful"] == pytest.approx(0.9)
    assert (rows[72, False]["kernel"], rows[72, False]["width"], rows[72, False]["useful"]) == \
        ("v1", 72, 1.0)


@pytest.mark.parametrize("head_dim", [64, 72, 80])
def test_the_frame_is_legible_at_the_content_width(sweep, padded, head_dim):
    """At most three panels; the frame spans the content column of a 1280-px window (its
    pixels at least the column's width) and no text in it reads under 9 pt there."""
    from andrea_edu.notebook import slider as sl
    fig = figs.head_dim_figure(head_dim, sweep, padded=padded)
    try:
        assert len(fig.axes) <= 3
        w = fig.get_figwidth()
        assert w * sl.DPI >= sl.CONTENT_PX
        fig.canvas.draw()
        texts = [t for t in fig.findobj(matplotlib.text.Text) if t.get_text().strip()
                 and t.get_visible()]
        assert texts
        small = [(t.get_text()[:30], t.get_fontsize()) for t in texts
                 if sl.displayed_pt(t.get_fontsize(), w) < 9]
        assert not small, small
    finally:
        matplotlib.pyplot.close(fig)


def test_each_head_dim_shows_the_kernel_the_dispatcher_runs(sweep):
    for r in sweep:
        d = choose_backend(r["head_dim"], torch.bfloat16, "cuda")
        assert (r["version"], r["backend"], r["why"]) == (d.kernel, d.backend, d.reason)
    by = {r["head_dim"]: r for r in sweep}
    assert [by[h]["version"] for h in HDS] == ["v3", "v1", "v2"]
    assert [v for v, _ in by[72]["refused"]] == ["v3", "v2"] and by[64]["refused"] == []


def test_the_64_to_72_cliff_is_in_the_compiled_evidence_and_the_band(sweep):
    by = {r["head_dim"]: r for r in sweep}
    a, b = by[64], by[72]
    assert a["tensor_per_score"] > 0 and b["tensor_per_score"] == 0   # v1: no HMMA at all
    assert b["instr_per_score"] > 10 * a["instr_per_score"]
    assert b["model"]["H200"]["lower_us"] > 10 * a["model"]["H200"]["lower_us"]
    assert a["tile_useful"] == 1.0 and b["tile_useful"] == pytest.approx(72 / 80)
    for r in sweep:
        for m in r["model"].values():
            assert 0 < m["lower_us"] <= m["upper_us"]
    assert b["model"]["H200"]["latency_bound"] and b["model"]["H200"]["idle_sms"] == 36


def test_published_points_only_where_cited_and_labelled_extrapolated(sweep):
    by = {r["head_dim"]: r for r in sweep}
    assert {p["kernel"] for p in by[64]["published"]} == {"FlashAttention-2", "cuDNN",
                                                          "FlashAttention-3"}
    assert all(p["extrapolated"] for p in by[64]["published"])
    assert by[72]["published"] == [] and by[80]["published"] == []


def _fake_gpu_file(folder, device: str = FAKE, slug: str = "fake-gpu"):
    """A GPU head_dim file at ANDREA-120M's training shape: SDPA and the dispatched kernel."""
    from andrea_edu.bench import validate_result
    from andrea_edu.bench.results import expected_work

    obj = json.loads((REPO / "book" / "data" / "bench_headdim_cpu.json").read_text())
    obj["provenance"].update(device_kind="gpu", device=device, device_slug=slug,
                             driver="0.0 (test)", cuda="0.0")
    obj["settings"]["timer"] = "cuda-events"
    recs = []
    times: dict[int, dict[str, float | None]] = {
        64: {"sdpa": 0.06, "cuda-flash": 0.05, "cuda-naive": 2.0},
             72: {"sdpa": 0.06, "cuda-flash": None, "cuda-naive": 3.0}}   # v3 refuses 72
    for hd, by_backend in times.items():
        p = dict(shape="ANDREA-120M", series="n_head=12", B=8, T=1024, n_head=12, head_dim=hd,
                 d_model=12 * hd, causal=True, dtype="bfloat16")
        for b, t in by_backend.items():
            rec = dict(case=f"ANDREA-120M/n_head=12/head_dim={hd}", backend=b, params=p,
                       status="ok", reason=None, max_abs_err=0.01, min_ms=t, median_ms=t,
                       max_ms=t, repeats=obj["settings"]["repeats"])
            if t is None:
                rec = dict(case=rec["case"], backend=b, params=p, status="unavailable",
                           reason="ValueError: head_dim=72 is not compiled for v3")
            work = expected_work("headdim", rec)
            assert work is not None
            recs.append({**rec, work[0]: work[1]})
    obj["records"] = recs
    validate_result(obj)
    (folder / f"bench_headdim_{slug}.json").write_text(json.dumps(obj))


def _band_axes(fig):
    return next(ax for ax in fig.axes if ax.get_title().startswith("Time, H200"))


def test_a_gpu_file_draws_its_measurement_over_the_band(sweep, tmp_path, monkeypatch):
    monkeypatch.setenv("ANDREA_DATA_DIR", str(tmp_path))
    assert load_results("headdim", device="gpu") is None
    fig = figs.head_dim_figure(72, sweep, measured={})
    ax = _band_axes(fig)
    assert "no GPU measurement" in ax.get_title()
    assert not any("measured" in s for s in ax.get_legend_handles_labels()[1])

    _fake_gpu_file(tmp_path)
    store.seal_folder(tmp_path)  # the book reads only files its folder's manifest lists
    pts = dispatched.from_results(load_results("headdim", device="gpu"), HDS)
    assert set(pts) == {64, 72} and pts[72]["kernel"]["us"] == pytest.approx(3000)
    assert pts[72]["kernel"]["backend"] == "cuda-naive" and pts[72]["device"] == FAKE
    fig = figs.head_dim_figure(72, sweep, measured=pts)
    ax = _band_axes(fig)
    assert f"measured on {FAKE}" in ax.get_title()
    labels = ax.get_legend_handles_labels()[1]
    assert any(s == "measured: dispatched kernel" for s in labels)
    assert any(s == "measured: torch SDPA" for s in labels)
    stars = {round(float(c.get_offsets()[0][1]), 3) for c in ax.collections
             if c.get_sizes()[0] == 90}                       # the dispatched kernel's points
    assert stars == {50.0, 3000.0}                            # µs, drawn over the band
    hatched = [p for p in ax.patches if p.get_hatch()]
    assert len(hatched) == len(sweep) and all(p.get_facecolor()[3] == 0 for p in hatched)
    assert "with a GPU measurement" in fig.texts[0].get_text()


def test_every_gpu_file_gets_its_own_rows(tmp_path, monkeypatch):
    """Issue 41 item 6: two GPUs' head_dim files both reach the chapter, one row per device and
    head_dim, in file-name order, neither shadowing the other."""
    from andrea_edu.data import load
    monkeypatch.setenv("ANDREA_DATA_DIR", str(tmp_path))
    assert dispatched.every_gpu(load("bench_headdim_gpus", missing="none"), HDS) == []
    _fake_gpu_file(tmp_path)
    other = json.loads((tmp_path / "bench_headdim_fake-gpu.json").read_text())
    other["provenance"].update(device="Second fake GPU", device_slug="zz-fake-gpu")
    (tmp_path / "bench_headdim_zz-fake-gpu.json").write_text(json.dumps(other))
    store.seal_folder(tmp_path)
    rows = dispatched.every_gpu(load("bench_headdim_gpus"), HDS)
    assert [(r["device"], r["head_dim"]) for r in rows] == [
        (FAKE, 64), (FAKE, 72), ("Second fake GPU", 64), ("Second fake GPU", 72)]
    r72 = rows[1]
    assert r72["kernel µs"] == pytest.approx(3000)
    assert r72["kernel / SDPA"] == pytest.approx(r72["kernel µs"] / r72["SDPA µs"])


def test_a_cpu_file_is_never_drawn_as_tile_evidence(sweep):
    cpu = load_results("headdim", device="cpu", data_dir_=REPO / "book" / "data")
    assert cpu is not None and dispatched.from_results(cpu, HDS) == {}
    fig, ax = matplotlib.pyplot.subplots()
    figs.draw_throughput(ax, cpu, 64)
    assert "(CPU, reduced shapes)" in ax.get_title()  # the panel names its device kind


def test_the_live_measurement_validates_then_times(monkeypatch):
    """On the CPU the same path runs up to the GPU: dispatch, check against the reference, then
    time; a GPU asked for where there is none is one clear error."""
    with pytest.raises(ValueError, match="head_dim=0"):
        dispatched.measure(0)
    if not torch.cuda.is_available():
        with pytest.raises(RuntimeError, match="no CUDA GPU"):
            dispatched.measure(64)
    order: list[str] = []
    real = dispatched.timing.time_fns

    def check(*a, **k):
        order.append("check")
        return dict(passed=True)

    def time_fns(fns, *a, **k):
        order.append("time")
        return real(fns, *a, **k)

    monkeypatch.setattr(dispatched, "compare_to_reference", check)
    monkeypatch.setattr(dispatched.timing, "time_fns", time_fns)
    pt = dispatched.measure(16, B=1, n_head=2, T=32, device="cpu", repeats=3, warmup=1)
    assert order == ["check", "check", "time"]
    assert pt["device_kind"] == "cpu" and pt["kernel"]["us"] > 0 and pt["sdpa"]["us"] > 0


@pytest.mark.parametrize("head_dim", [64, 72])
def test_the_frame_keeps_its_titles_legends_and_text_inside_and_apart(sweep, padded, head_dim):
    fig = figs.head_dim_figure(head_dim, sweep, padded=padded)
    fig.canvas.draw()
    r = fig.canvas.get_renderer()
    boxes = [(t.get_text()[:40], t.get_window_extent(r)) for t in
             [*fig.texts, *(ax.title for ax in fig.axes), *(t for ax in fig.axes for t in ax.texts
                                                          if len(t.get_text()) > 30)]
             if t.get_text().strip()]
    boxes += [(f"legend {i}", ax.get_legend().get_window_extent(r))
              for i, ax in enumerate(fig.axes) if ax.get_legend()]
    for s, bb in boxes:
        assert fig.bbox.contains(bb.x0, bb.y0) and fig.bbox.contains(bb.x1, bb.y1), s
    for a in range(len(boxes)):
        for b in range(a + 1, len(boxes)):
            assert not boxes[a][1].overlaps(boxes[b][1]), (boxes[a][0], boxes[b][0])
    matplotlib.pyplot.close(fig)


def test_a_padded_measurement_draws_over_the_padded_band(sweep, padded):
    """pad=True's measured point sits on the right-hand band of its head_dim (the padded world)."""
    pt = dict(device=FAKE, source="test", kernel=dict(backend="cuda-flash-padded", us=60.0),
              sdpa=dict(backend="flash", us=50.0))
    fig = figs.head_dim_figure(72, sweep, padded=padded, measured_padded={72: pt})
    try:
        ax = _band_axes(fig)
        stars = [c for c in ax.collections if c.get_sizes()[0] == 90]
        assert len(stars) == 1
        x, y = stars[0].get_offsets()[0]
        assert y == pytest.approx(60.0) and x == pytest.approx(HDS.index(72) + 0.2)
        assert f"measured on {FAKE}" in ax.get_title()
    finally:
        matplotlib.pyplot.close(fig)
