"""Every public function answers bad input in one line naming the parameter (tests/api_probe.py
holds the table): no deep traceback, no silent result. Property-based where a parameter is a
number: hypothesis draws values outside what the documentation allows (derandomized, no example
database, few examples)."""
from __future__ import annotations

import math

import matplotlib
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import api_probe

CASES = api_probe.cases()
PROBE = settings(max_examples=15, derandomize=True, database=None, deadline=None)


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    import matplotlib.pyplot as plt
    plt.close("all")


@pytest.mark.parametrize("fn, param, call, values", CASES,
                         ids=[f"{c[0]}-{c[1]}-{i}" for i, c in enumerate(CASES)])
def test_every_bad_value_is_refused_in_one_line(fn, param, call, values):
    matplotlib.use("Agg")
    outcomes = [(v, *api_probe.classify(param, call, v)) for v in values]
    wrong = [(repr(v)[:40], kind, why) for v, kind, why in outcomes if kind != "clear"]
    assert not wrong, f"{fn}({param}=...): {wrong}"


def _outside(lo: float, hi: float):
    """Floats outside [lo, hi], NaN and infinities included."""
    return st.one_of(st.just(math.nan), st.just(math.inf), st.just(-math.inf),
                     st.floats(max_value=lo, exclude_max=True, allow_nan=False),
                     st.floats(min_value=hi, exclude_min=True, allow_nan=False))


@PROBE
@given(bad=_outside(0.0, 1.0))
def test_head_detectors_refuse_a_threshold_outside_0_1(bad):
    from andrea_edu.heads import toy_calls as TC
    sc = np.full((3, 2, 2), 0.5)
    for call in (lambda: TC.detect(sc, bad), lambda: TC.best_head_calls(sc, bad),
                 lambda: TC.threshold_call(0.5, bad)):
        with pytest.raises(ValueError, match="threshold") as e:
            call()
        assert "\n" not in str(e.value)


@PROBE
@given(bad=_outside(0.0, 1.0))
def test_head_detectors_refuse_scores_outside_0_1(bad):
    from andrea_edu.heads import measures as M, toy_calls as TC
    sc = np.full((3, 2, 2), 0.5)
    sc[1, 0, 1] = bad
    if math.isnan(bad):
        sc[:] = bad  # one NaN is "not measured"; all NaN is nothing measured
    for call in (lambda: TC.detect(sc), lambda: TC.best_head_calls(sc), lambda: M.best_heads(sc)):
        with pytest.raises(ValueError, match="scores") as e:
            call()
        assert "\n" not in str(e.value)


@PROBE
@given(bad=st.one_of(st.integers(max_value=0), st.integers(min_value=601),
                     st.floats(allow_nan=True), st.text(max_size=3)))
def test_the_slider_refuses_a_dpi_that_is_not_an_int_in_range(bad):
    from andrea_edu.notebook import slider as S
    with pytest.raises(ValueError, match="dpi"):
        S.slider(lambda: None, static=True, dpi=bad, a=[1])


@PROBE
@given(stride=st.one_of(st.integers(max_value=-1), st.floats(allow_nan=True)), at=st.integers(0, 3))
def test_element_offset_refuses_negative_or_float_strides(stride, at):
    from andrea_edu.layout import element_offset
    strides = [8, 4, 2, 1]
    strides[at] = stride
    with pytest.raises(ValueError, match="strides"):
        element_offset(0, 0, 0, 0, tuple(strides), shape=(1, 2, 2, 2))


def test_gpt2_weights_holding_nan_are_refused_in_one_line():
    transformers = pytest.importorskip("transformers")
    from andrea_lab import gpt2_small as G
    hf = transformers.GPT2LMHeadModel(transformers.GPT2Config(
        n_layer=1, n_head=2, n_embd=8, vocab_size=11, n_positions=8))
    sd = {k: v.detach().clone() for k, v in hf.state_dict().items()}
    G.from_gpt2(sd, G.config_from_hf(hf.config))  # whole: it loads
    sd["transformer.h.0.attn.c_attn.weight"][0, 0] = math.nan
    with pytest.raises(G.GPT2FileError, match="NaN") as e:
        G.from_gpt2(sd, G.config_from_hf(hf.config))
    assert "\n" not in str(e.value)
