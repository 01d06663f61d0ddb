"""Tests of andrea_edu.layout: offsets against torch's real storage, contiguity, copies, the trap."""
from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from andrea_edu import layout
from andrea_edu.bench import layout_cost
from andrea_edu.bench.aten import count_aten_ops
from andrea_edu.figures import cuda_stores_heads as layout_figures
from andrea_edu.projections import merge_heads, split_heads

sizes = st.tuples(st.integers(1, 3), st.integers(1, 7), st.integers(1, 5), st.integers(1, 6))


@settings(max_examples=40, deadline=None)
@given(shape=sizes, data=st.data())
def test_offsets_match_torch_storage(shape, data):
    B, T, nh, hs = shape
    b, t = data.draw(st.integers(0, B - 1)), data.draw(st.integers(0, T - 1))
    h, d = data.draw(st.integers(0, nh - 1)), data.draw(st.integers(0, hs - 1))
    x = torch.randn(B, T, nh * hs)  # (B, T, C)
    for name in layout.LAYOUTS:
        y = layout.tensor_in_layout(x, name, nh)
        idx = layout.native_index(name, b, t, h, d, hs)
        off = layout.element_offset(b, t, h, d, name, shape)
        assert layout.torch_offset(y, idx) == off, name
        # the same offset read back through as_strided on the flat storage
        flat = torch.as_strided(y, (y.numel(),), (1,), 0)
        assert flat[off] == x[b, t, h * hs + d], name
        # strides given explicitly give the same answer as the name
        assert layout.element_offset(b, t, h, d, layout.logical_strides(name, shape), shape) == off


@settings(max_examples=25, deadline=None)
@given(shape=sizes)
def test_steps_report_torch_strides_and_contiguity(shape):
    B, T, nh, hs = shape
    steps = layout.layout_steps(B, T, nh, hs, dtype=torch.float16)
    x = torch.empty(B, T, nh * hs)
    xt = x.view(B, T, nh, hs).transpose(1, 2)
    # .contiguous() copies only when the view is not contiguous already (T == 1 or nh == 1)
    copied = not xt.is_contiguous()
    assert [s.kind for s in steps] == ["input", "view", "view", "copy" if copied else "view"]
    assert steps[2].strides == xt.stride() and steps[3].strides == xt.contiguous().stride()
    assert steps[0].is_contiguous and steps[1].is_contiguous and steps[3].is_contiguous
    # the transposed view is non-contiguous exactly when swapping T and nh moves something
    assert steps[2].is_contiguous == xt.is_contiguous()
    if T > 1 and nh > 1:
        assert not steps[2].is_contiguous
    assert steps[3].bytes_copied == (B * T * nh * hs * 2 if copied else 0)  # fp16
    assert steps[2].bytes_copied == 0
    assert steps[3].strides_bytes == tuple(2 * s for s in steps[3].strides)
    assert "| `.contiguous()` |" in layout.steps_table(steps)


def test_andrea_120m_steps():
    steps = layout.layout_steps(8, 1024, 12, 64)
    assert steps[2].strides == (1024 * 768, 64, 768, 1)
    assert steps[3].strides == (12 * 1024 * 64, 1024 * 64, 64, 1)
    assert steps[3].bytes_copied == 8 * 1024 * 768 * 4


@settings(max_examples=25, deadline=None)
@given(shape=sizes)
def test_memory_map_and_head_runs(shape):
    B, T, nh, hs = shape
    for name in layout.LAYOUTS:
        mm = layout.memory_map(name, shape)
        for b, t, h, d in [(B - 1, T - 1, nh - 1, hs - 1), (0, 0, 0, 0)]:
            o = layout.element_offset(b, t, h, d, name, shape)
            assert (mm["b"][o], mm["t"][o], mm["h"][o], mm["d"][o]) == (b, t, h, d)
        # every head of batch item 0 owns exactly T*hs offsets, all distinct
        offs = np.concatenate([layout.head_offsets(h, name, shape) for h in range(nh)])
        assert np.unique(offs).size == T * nh * hs
    btc = layout.runs(layout.head_offsets(nh - 1, "BTC", shape, b=B - 1))
    bhtd = layout.runs(layout.head_offsets(nh - 1, "BHTD", shape, b=B - 1))
    assert bhtd == [(((B - 1) * nh + nh - 1) * T * hs, T * hs)]  # one run after .contiguous()
    if nh > 1:
        assert len(btc) == T and all(n == hs for _, n in btc)  # T strided runs of hs
    else:
        assert len(btc) == 1


def test_runs():
    assert layout.runs([]) == []
    assert layout.runs([3, 4, 5, 9, 10, 20]) == [(3, 3), (9, 2), (20, 1)]


@settings(max_examples=25, deadline=None)
@given(shape=sizes, data=st.data())
def test_trap_origin_matches_torch(shape, data):
    B, T, nh, hs = shape
    b, h = data.draw(st.integers(0, B - 1)), data.draw(st.integers(0, nh - 1))
    t, d = data.draw(st.integers(0, T - 1)), data.draw(st.integers(0, hs - 1))
    ids = torch.arange(B * T * nh * hs).view(B, T, nh * hs)
    trapped = ids.reshape(B, nh, T, hs)
    b2, t2, h2, d2 = layout.trap_origin(b, h, t, d, shape)
    assert trapped[b, h, t, d] == ids[b2, t2, h2 * hs + d2]


def test_trap_produces_wrong_heads():
    rep = layout.reshape_trap(2, 8, 4, 16)
    assert rep.wrong_head == pytest.approx(3 / 4)  # head slot h sees heads 0..3 in turn
    assert rep.wrong > 0.9 and rep.wrong_token > 0.5
    # trapped row (h, t) holds token (h*T + t) // nh of head (h*T + t) % nh
    for h, t, t0, h0 in rep.rows:
        assert (t0, h0) == divmod(h * 8 + t, 4)
    # with one head, or one token, reshape alone is right (nothing to reorder)
    assert layout.reshape_trap(2, 8, 1, 16).wrong == 0.0
    assert layout.reshape_trap(2, 1, 4, 16).wrong == 0.0


def test_trap_breaks_attention_round_trip():
    x = torch.randn(2, 6, 12)
    assert torch.equal(merge_heads(split_heads(x, 3)), x)
    from andrea_edu.projections import reshape_without_transpose
    assert not torch.equal(merge_heads(reshape_without_transpose(x, 3)), x)


def test_copy_cost_and_matmul_timing():
    c = layout_cost.contiguous_copy_cost(1, 16, 4, 8, repeats=3, warmup=1)
    assert c.bytes_copied == 16 * 32 * 4 and c.bytes_moved == 2 * c.bytes_copied
    assert c.median_s > 0 and c.min_s <= c.median_s and c.gb_per_s > 0
    m = layout_cost.matmul_strided_vs_contiguous(2, 16, 4, 8, repeats=3, warmup=1)
    assert m.max_abs_diff <= 1e-5
    assert m.strided_s > 0 and m.contiguous_s > 0 and m.ratio == m.strided_s / m.contiguous_s
    assert set(m.min_s) == {"strided", "contiguous", "copy_then_matmul"}
    # B=2: the transposed view cannot fold (B, nh) into one batch axis, so matmul copies q and k
    assert m.copies == {"strided": 2, "contiguous": 0}
    one = layout_cost.matmul_strided_vs_contiguous(1, 16, 4, 8, repeats=1, warmup=0)
    assert one.copies["strided"] == 0  # B=1: (1, nh) folds into a batch axis with stride hs


def test_count_copies():
    x = torch.randn(2, 3, 4)
    assert layout_cost.count_copies(lambda: x.transpose(0, 1).contiguous()) == 1
    assert layout_cost.count_copies(lambda: x.view(6, 4)) == 0
    assert count_aten_ops(lambda: x @ x.transpose(1, 2)).get("bmm") == 1


@pytest.mark.parametrize("call, message", [
    (lambda: layout.element_offset(0, 0, 0, 0, "BTC", (2, 3, 0, 4)), "n_head must be a positive"),
    (lambda: layout.element_offset(0, 3, 0, 0, "BTC", (2, 3, 4, 4)), "t must be an int in 0..2"),
    (lambda: layout.element_offset(0, 0, -1, 0, "BTC", (2, 3, 4, 4)), "h must be an int in 0..3"),
    (lambda: layout.element_offset(0, 0, 0, 0, "BHT", (2, 3, 4, 4)), "layout must be one of"),
    (lambda: layout.element_offset(0, 0, 0, 0, (1, 2), (2, 3, 4, 4)), "4 strides"),
    (lambda: layout.element_offset(0, 0, 0, 0, "BTC"), "shape=(B, T, n_head, head_dim)"),
    (lambda: layout.element_offset(0, 0, 0, 0, "BTC", (2, 3, 4)), "four positive ints"),
    (lambda: layout.layout_steps(2, 3, 4, 1.5),  # type: ignore[arg-type]  # under test
     "head_dim must be a positive int"),
    (lambda: layout.head_offsets(4, "BTC", (1, 2, 4, 2)), "h must be an int in 0..3"),
    # "Twelve vectors become one", exercise 1: an index outside the trapped [1, 12, 8, 64]
    (lambda: layout.trap_origin(0, 12, 5, 0, (1, 8, 12, 64)), "h must be an int in 0..11"),
    (lambda: layout.trap_origin(0, 3, 8, 0, (1, 8, 12, 64)), "t must be an int in 0..7"),
    (lambda: layout.memory_map("BTCD", (1, 2, 4, 2)), "layout must be one of"),
    (lambda: layout_cost.contiguous_copy_cost(1, 2, 2, 2, device="tpu"), "device must be"),
    (lambda: layout_cost.contiguous_copy_cost(1, 2, 2, 2, repeats=0), "repeats must be"),
    (lambda: layout_cost.projection_to_heads(1, 2, 2, 2, variants=("einsum", "bmm")),
     "variants=('einsum', 'bmm'): allowed values are 'matmul, split, copy', 'einsum', "
     "'per-head matmul'"),
    (lambda: layout.reshape_trap(1, 0, 12, 64), "shape: T must be a positive int"),
])
def test_validation_messages(call, message):
    """One line naming the parameter (and the allowed values), before any work."""
    with pytest.raises(ValueError) as e:
        call()
    assert message in str(e.value) and "\n" not in str(e.value), str(e.value)


def test_projection_to_heads_validates_then_reports_copies():
    r = layout_cost.projection_to_heads(1, 8, 3, 4, repeats=1, warmup=0)
    assert set(r.median_s) == set(layout_cost.PROJECTION_VARIANTS) and r.max_abs_diff < 1e-4
    # split_heads is a view and needs .contiguous(); weights stored per head write heads in order
    assert r.contiguous["matmul, split, copy"] is False and r.copies["matmul, split, copy"] == 1
    assert r.contiguous["per-head matmul"] is True and r.copies["per-head matmul"] == 0
    assert all(t > 0 for t in r.median_s.values())
    # with B > 1 the batched matmul broadcasts X over the heads, and torch copies it to do so
    assert layout_cost.projection_to_heads(2, 8, 3, 4, repeats=1, warmup=0).copies[
        "per-head matmul"] > 0
    one = layout_cost.projection_to_heads(1, 4, 2, 2, variants="einsum", repeats=1, warmup=0)
    assert list(one.median_s) == ["einsum"]


def test_figures_draw():
    for fig in (layout_figures.memory_map_figure(4, 8), layout_figures.memory_map_figure(1, 4),
                layout_figures.offset_figure(1, 3, 2, 3), layout_figures.trap_figure(4, 2, 2)):
        assert fig.axes and fig._suptitle is not None and fig._suptitle.get_text()
        plt.close(fig)


def test_fp16_matmul_timing_reaches_the_device_boundary_on_a_cpu():
    """Exercise 5's "cuda" branch times fp16; the same call in fp16 on a CPU validates with the
    fp16 tolerance and reports the dtype it ran."""
    m = layout_cost.matmul_strided_vs_contiguous(2, 16, 4, 8, dtype=torch.float16, repeats=1,
                                                 warmup=0)
    assert m.dtype == "float16" and m.max_abs_diff <= 5e-2 * 8 ** 0.5 and m.ratio > 0
