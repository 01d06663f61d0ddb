"""Figures stay readable: annotation text contrasts with its cell (WCAG 2 ratio >= 4.5), lines
join only what belongs together, labels do not overlap what they label, colours have a legend.

Contrast is checked twice: from the colour each cell was given (heatmap's own colour mapping),
and from the rendered pixels under each text with the text hidden, which catches any figure that
draws text on coloured cells, whatever draws the cells.
"""
from __future__ import annotations

import json
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pytest
import torch
from matplotlib.colors import to_rgba
from matplotlib.patches import Rectangle

from andrea_edu.figures import config_mirrors_hardware as cmh
from andrea_edu.figures import cuda_stores_heads as csh
from andrea_edu.figures import one_kernel_many_heads as okm
from andrea_edu.figures import output_projection as op
from andrea_edu.figures import why_heads_specialize as whs
from andrea_edu.figures.head_figures import fig_ablation
from andrea_edu.figures.viz import contrast_ratio, heatmap, text_color_on

WCAG_AA = 4.5  # WCAG 2 minimum contrast for normal text


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def test_contrast_ratio_matches_wcag_reference_values():
    assert contrast_ratio("black", "white") == pytest.approx(21.0)
    assert contrast_ratio("white", "white") == pytest.approx(1.0)
    assert contrast_ratio("#777777", "white") == pytest.approx(4.48, abs=0.01)  # WCAG's example
    assert contrast_ratio((0, 0, 0, 0.0), "white") == pytest.approx(1.0)  # transparent = white


def test_text_color_on_any_background_reaches_wcag_aa():
    rng = np.random.default_rng(0)
    greys = [(v, v, v) for v in np.linspace(0, 1, 101)]
    for bg in greys + [tuple(c) for c in rng.random((500, 3))]:
        assert contrast_ratio(text_color_on(bg), bg) >= WCAG_AA, bg


@pytest.mark.parametrize("cmap", ["viridis", "magma_r", "magma", "gray", "RdBu_r", "YlOrRd"])
def test_heatmap_annotations_contrast_with_their_cells(cmap):
    # extreme values: a huge outlier, clipping at vmin/vmax narrower than the data, a NaN cell
    m = np.array([[-1e6, -1.0, -0.5, 0.0],
                  [0.25, 0.5, 0.75, 1.0],
                  [1e-9, 2.0, 1e6, np.nan]])
    fig, ax = plt.subplots()
    im = heatmap(ax, m, vmin=-1, vmax=1, cmap=cmap, annotate=True)
    rgba = im.to_rgba(m)
    assert len(ax.texts) == m.size
    for t in ax.texts:
        j, i = (int(round(v)) for v in t.get_position())
        ratio = contrast_ratio(t.get_color(), rgba[i, j])
        assert ratio >= WCAG_AA, (cmap, i, j, m[i, j], t.get_color(), rgba[i, j], ratio)


def _rendered_background_contrast(fig) -> list[tuple[str, float]]:
    """(text, contrast) for every text inside an axes: the text's colour against the median
    colour of the pixels under it, rendered with every text hidden."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    texts = [t for ax in fig.axes for t in ax.texts if t.get_text().strip() and t.get_visible()]
    boxes = [t.get_window_extent(renderer) for t in texts]
    for t in texts:
        t.set_visible(False)
    fig.canvas.draw()
    img = np.asarray(fig.canvas.buffer_rgba())  # (H, W, 4), row 0 = top
    H = img.shape[0]
    out = []
    for t, bb in zip(texts, boxes):
        x0, x1 = int(np.floor(bb.x0)), int(np.ceil(bb.x1))
        y0, y1 = H - int(np.ceil(bb.y1)), H - int(np.floor(bb.y0))
        patch = img[max(y0, 0):y1, max(x0, 0):x1, :3].reshape(-1, 3) / 255.0
        bg = tuple(np.median(patch, axis=0))
        out.append((t.get_text(), contrast_ratio(t.get_color(), bg)))
        t.set_visible(True)
    return out


def _assert_readable(fig):
    pairs = _rendered_background_contrast(fig)
    assert pairs, "the figure has no annotation text to check"
    bad = [(s, round(r, 2)) for s, r in pairs if r < WCAG_AA]
    assert not bad, f"annotations below {WCAG_AA}:1 contrast: {bad[:10]}"


def test_ablation_heatmap_is_readable_on_pale_and_dark_cells():
    abl = np.zeros((2, 4, 4))  # (L, nh, 1 + patterns): mostly 0 (palest), one huge, some mid
    abl[0, 1, 1] = 3.0
    abl[1, 2, 2] = 0.4
    abl[1, 3, 3] = 1.5
    abl[0, 0, 3] = 2.4
    _assert_readable(fig_ablation(abl, ("all", "previous token", "matching bracket", "entity")))


def test_cell_label_figures_are_readable():
    _assert_readable(okm.grid_figure(2, 12))       # numbers on head colours
    _assert_readable(csh.trap_figure())            # "t0 h0" on head colours
    _assert_readable(csh.offset_figure(1, 2, 1, 3))


def test_online_softmax_trace_draws_rows_as_points_and_labels_both_axes():
    from andrea_edu.kernels.emulator import emulate

    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, 40, 16, generator=g) for _ in range(3))
    _, trace = emulate(q, k, v, causal=True, kernel="v1")
    fig = okm.trace_figure(trace, 1, 1)
    ax_m, ax_l = fig.axes[1], fig.axes[2]  # the m axis and its twin (l)
    for ax in (ax_m, ax_l):
        data_lines = [ln for ln in ax.get_lines() if len(ln.get_xdata()) > 1]
        assert data_lines
        for ln in data_lines:  # one point per query row: independent rows are not joined
            assert ln.get_linestyle() in ("None", "none", ""), ln.get_label()
            assert ln.get_marker() not in (None, "None", "")
        assert ax.get_ylabel().strip()
    assert "l" in ax_l.get_ylabel() and ax_l.yaxis.get_label_position() == "right"


def _text_boxes(fig, renderer):
    out = []
    for t in fig.texts + [t for ax in fig.axes for t in ax.texts + [ax.title]]:
        if t.get_text().strip() and t.get_visible():
            out.append((t.get_text(), t.get_window_extent(renderer)))
    return out


def test_mma_shapes_labels_do_not_overlap_the_matrices_or_each_other():
    fig = cmh.mma_shapes_figure()
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    texts = _text_boxes(fig, renderer)
    matrices = [p.get_window_extent(renderer) for ax in fig.axes for p in ax.patches
                if isinstance(p, Rectangle)]
    assert len(matrices) == 6  # A, B, C for each of the two instruction paths
    for s, bb in texts:
        assert fig.bbox.contains(bb.x0, bb.y0) and fig.bbox.contains(bb.x1, bb.y1), s
        for mb in matrices:
            assert not bb.overlaps(mb), f"label {s!r} overlaps a matrix"
    for a in range(len(texts)):
        for b in range(a + 1, len(texts)):
            assert not texts[a][1].overlaps(texts[b][1]), (texts[a][0], texts[b][0])


def test_mma_shapes_keep_api_ptx_and_sass_apart_and_name_wgmma():
    fig = cmh.mma_shapes_figure()
    words = " ".join(t.get_text() for ax in fig.axes for t in ax.texts) + " " + \
        " ".join(t.get_text() for t in fig.texts)
    for needle in ("nvcuda::wmma::mma_sync", "16x16x16 fragments", "wmma.mma.sync",
                   "m16n16k16", "mma.sync.aligned", ".m16n8k16", "HMMA.16816"):
        assert needle in words, needle
    # Hopper's wgmma, which neither kernel uses, is named in the chapter's text beside the figure
    nb = json.loads((Path(__file__).resolve().parents[1] / "book"
                     / "config_mirrors_hardware.ipynb").read_text(encoding="utf-8"))
    prose = " ".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "markdown")
    assert "wgmma" in prose and "FlashAttention-3" in prose
    for level in ("CUDA C++", "PTX", "SASS"):
        assert sum(t.get_text().startswith(level) for ax in fig.axes for t in ax.texts) == 2


def test_head_mixing_bars_have_a_legend_of_heads():
    g = torch.Generator().manual_seed(0)
    shares = {n: torch.softmax(torch.randn(12, 64, generator=g), 0) for n in ("a", "b")}
    fig = op.fig_head_mixing(shares, n_show=16)
    legend = fig.axes[0].get_legend()
    assert legend is not None
    labels = [t.get_text() for t in legend.get_texts()]
    assert sorted(labels) == sorted(f"head {h}" for h in range(12))
    colors = {t.get_text(): h.get_facecolor() for t, h in zip(legend.get_texts(),
                                                               legend.legend_handles)}
    assert colors["head 3"] == to_rgba(fig.axes[0].patches[3 * 16].get_facecolor())


def test_trace_legend_sits_outside_the_data():
    """The online-softmax trace's legend (m and l markers) is below the axes, not on the points."""
    from andrea_edu.kernels.emulator import emulate

    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, 100, 32, generator=g) for _ in range(3))
    _, trace = emulate(q, k, v, causal=True, kernel="v1")
    fig = okm.trace_figure(trace, 0, 4)
    fig.canvas.draw()
    r = fig.canvas.get_renderer()
    ax_m = fig.axes[1]
    leg = ax_m.get_legend().get_window_extent(r)
    assert leg.y1 <= ax_m.get_window_extent(r).y0        # wholly below the plotting area


def _opening_figure(scores):
    from andrea_edu.heads import corpus

    batch = corpus.make_batch(1, 64, seed=0)
    b, start = whs.pick_example(batch, length=28)
    L, nh = np.asarray(scores).shape[1:]
    maps = torch.rand(L, 1, nh, 64, 64)
    return whs.fig_specialists(maps, batch, scores, b=b, start=start, length=28)


def test_opening_figure_token_labels_are_9px_high_at_1280px():
    """Cap height of every token label >= 9 px when the figure is shown 1280 px wide (DejaVu
    Sans capitals: 0.73 em)."""
    scores = np.random.default_rng(0).random((3, 2, 4))
    fig = _opening_figure(scores)
    px_per_pt = 1280 / fig.get_figwidth() / 72
    labels = [t for ax in fig.axes for t in ax.get_xticklabels() + ax.get_yticklabels()]
    assert labels and min(t.get_fontsize() for t in labels) * px_per_pt * 0.73 >= 9


def test_one_head_per_pattern_shows_three_different_heads_and_says_why():
    """When one head leads two patterns, the figure still shows three different heads (the best
    distinct choice) and the panel that does not get its top head names it."""
    sc = np.zeros((3, 2, 4))
    sc[0, 0, 1], sc[1, 0, 1], sc[1, 1, 2], sc[2, 1, 3] = 0.9, 0.8, 0.6, 0.7   # L0H1 leads two
    shown = whs.shown_heads(sc)
    assert len({(l, h) for l, h, *_ in shown.values()}) == 3
    assert shown["previous token"][:2] == (0, 1) and shown["matching bracket"][:2] == (1, 2)
    titles = [ax.get_title() for ax in _opening_figure(sc).axes]
    assert "its best, L0H1 (0.80), is shown for previous token" in titles[1]
    assert "its best head" in titles[0] and "its best head" in titles[2]


def _legends_inside_the_canvas(fig) -> list[str]:
    """Legends a saved frame would cut (the slider saves the canvas as it is, no tight bbox)."""
    fig.canvas.draw()
    r = fig.canvas.get_renderer()
    box = fig.bbox
    cut = []
    for i, ax in enumerate(fig.axes):
        leg = ax.get_legend()
        if leg is not None:
            b = leg.get_window_extent(r)
            if b.x0 < box.x0 - 1 or b.y0 < box.y0 - 1 or b.x1 > box.x1 + 1 or b.y1 > box.y1 + 1:
                cut.append(f"axes {i}: legend {b.bounds} outside the canvas {box.bounds}")
    return cut


@pytest.mark.parametrize("asked, shown, measured", [("v3", "v3", None), ("v3", "v2", None),
                                                     ("v1", "v1", {"H200": 3e-3,
                                                                   "RTX 4090": 2e-3})])
def test_worklog_slider_frames_keep_every_legend_on_the_canvas(asked, shown, measured):
    """The worklog's evidence slider, in its widest frames: two GPUs' model terms, the published
    band, a measurement of each GPU, and a fallback frame with its suptitle."""
    from andrea_edu.figures import kernel_worklog as wl

    per = dict.fromkeys(wl.MIX, 3)
    per.update(total=600, HMMA=64)
    e = dict(per_tile=per, smem_bytes_per_tile=20000, registers=240, spill_stores=0,
             spill_loads=0, blocks_per_sm={"H200": 2, "RTX 4090": 2}, keys_per_tile=64)

    def model(s, gpu):
        terms = dict(issue=s, tensor=s / 2, smem=s / 3, mufu=s / 4, hbm=s / 5)
        return dict(kind="model", seconds=s, lower=s, upper=sum(terms.values()), bound_by="issue",
                    terms=terms, B=8, n_head=12, T=1024, causal=True, gpu=gpu,
                    published=[dict(seconds=s * 3), dict(seconds=s * 2.5)])

    ev = {(v, 64): e for v in wl.VERSIONS}
    scores = {(v, 64): 2048 for v in wl.VERSIONS}
    models = {(v, 64): {"H200": model(2e-5, "NVIDIA H200"),
                        "RTX 4090": model(8e-5, "NVIDIA GeForce RTX 4090")}
              for v in wl.VERSIONS}
    fig = wl.evidence_figure(ev, scores, models, shown, 64, measured, asked=asked)
    assert _legends_inside_the_canvas(fig) == []
