"""The verdicts of "Why heads specialize", which float noise cannot flip: threshold calls with a
margin, the sweep-level pattern verdicts, gradient pressure that never prints "nan", and the re-check that
says which comparison it made."""
from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import pytest

from andrea_edu import env
from andrea_edu.heads import sweep as W
from andrea_lab import make_sweep as MS
from andrea_lab.make_sweep import pattern_heads
from andrea_edu.heads.gradient_pressure import (CAVEAT_RATIO, RATIO_MARGIN, VERDICT_RATIO,
                                                Pressure, Unmeasured, gradient_pressure)
from andrea_edu.heads.toy_calls import (DETECT_THRESHOLD, PATTERN_NAMES, SCORE_MARGIN,
                                        best_head_calls, threshold_call)

SWEEP = Path(__file__).resolve().parents[1] / "book" / "data" / W.DATA_NAME


@pytest.fixture(scope="module")
def committed():
    return W.load_sweep(SWEEP)


@pytest.mark.parametrize("score, call", [
    (0.505, "at the threshold"), (0.428, "at the threshold"),  # the two machines of issue 12
    (0.6, "above"), (0.3999, "below"), (0.4, "at the threshold"), (float("nan"), "not measurable")])
def test_threshold_call_has_a_margin(score, call):
    assert threshold_call(score) == call


def test_the_margin_covers_the_measured_cross_machine_spread():
    """The same head scored 0.505 on one x86 machine and 0.428 on another (issue 12): the default
    margin must give both one call, the call a margin of 0 would split."""
    a, b = 0.505, 0.428
    assert threshold_call(a, margin=0.0) != threshold_call(b, margin=0.0)  # the flip it prevents
    assert threshold_call(a) == threshold_call(b) == "at the threshold"
    assert SCORE_MARGIN >= max(abs(a - DETECT_THRESHOLD), abs(b - DETECT_THRESHOLD))


def test_best_head_calls_read_the_best_head_per_pattern():
    s = np.zeros((3, 2, 2))
    s[0, 1, 0], s[1, 0, 1], s[2, 1, 1] = 0.9, 0.55, 0.2
    b = best_head_calls(s)
    assert (b["previous token"]["layer"], b["previous token"]["head"]) == (1, 0)
    assert [b[p]["call"] for p in PATTERN_NAMES] == ["above", "at the threshold", "below"]


def test_unmeasured_never_prints_nan():
    u = Unmeasured("no cells")
    assert np.isnan(u) and f"{u:.2f}x" == "not measurablex" and "nan" not in f"{u} {u!r}"


def _pressure(ratio):
    return Pressure("ablation", [], [{}] * 5, ratio, 0.8, 0.1, "holds")


def test_robust_is_false_near_a_bound_of_the_rule():
    assert _pressure(2.0).robust
    for bound in (CAVEAT_RATIO, VERDICT_RATIO):
        assert not _pressure(bound * (1 + RATIO_MARGIN / 2)).robust
        assert _pressure(bound * (1 + 2 * RATIO_MARGIN)).robust or bound == CAVEAT_RATIO


def test_gradient_pressure_text_on_every_committed_run(committed):
    _, runs = committed
    for key, r in runs.items():
        p = gradient_pressure(r)
        for text in (p.summary(), p.ratio_text(), f"{p.pooled_ratio:.2f}x",
                     f"{p.fraction_above_1:.0%}", f"{p.sign_test_p:.2g}"):
            assert "nan" not in text.lower(), (key, text)
        if p.verdict == "not measurable":
            assert p.ratio_text().startswith("not measurable because only"), p.ratio_text()
    pooled = gradient_pressure({f"{n}/{s}": r for (n, s), r in runs.items()})
    assert pooled.verdict != "not measurable"


def test_pattern_heads_over_the_sweep(committed):
    _, runs = committed
    ph = pattern_heads(runs, n_head=4)
    assert set(ph) == set(PATTERN_NAMES)
    for name, v in ph.items():
        assert v["above"] + v["at"] + v["below"] == v["n"] == len(W.SEEDS)
        assert v["verdict"] in ("holds", "holds with a caveat", "does not hold")
        assert name in v["says"] and "nan" not in v["says"]
        if v["verdict"] == "holds":  # a claim that holds is clear of the threshold everywhere
            assert min(v["scores"]) >= DETECT_THRESHOLD + SCORE_MARGIN - 5e-4
    with pytest.raises(ValueError, match="n_head=3"):
        pattern_heads(runs, n_head=3)


def test_the_verdict_rule_of_pattern_heads(committed):
    _, runs = committed
    key = next(k for k in runs if k[0] == 4)
    r = copy.deepcopy(runs[key])
    r.scores = r.scores.copy()
    r.scores[-1][0] = 0.0
    r.scores[-1][0][0, 0] = DETECT_THRESHOLD + 0.02  # at the threshold: cannot be "holds"
    ph = pattern_heads({key: r})
    assert ph["previous token"]["at"] == 1 and ph["previous token"]["verdict"] == "does not hold"
    r.scores[-1][0][0, 0] = DETECT_THRESHOLD + 0.2
    assert pattern_heads({key: r})["previous token"]["verdict"] == "holds"


def test_recheck_says_which_comparison_it_made(committed):
    prov, runs = committed
    stored = runs[(4, 1)]
    live = copy.deepcopy(stored)
    live.train_loss = stored.train_loss + 3e-5  # within the file's rounding
    same = {**prov, "cpu_numerics": env.cpu_provenance()}
    chk = MS.recheck(live, stored, same)
    if env.same_cpu_numerics(env.cpu_provenance(), env.cpu_provenance()):
        assert chk["mode"] == "exact" and chk["ok"] and "bit-exact" in chk["says"]
        live.train_loss = stored.train_loss + 1e-3  # bits differ under the same pins: refused
        assert not MS.recheck(live, stored, same)["ok"]
    else:  # ARM, another build, or pins off: only the tolerance is promised
        assert chk["mode"] == "tolerance"
    arm = {**env.cpu_provenance(), "machine": "aarch64"}  # a producer whose bits cannot match
    other = {**prov, "cpu_numerics": arm}
    live.train_loss = stored.train_loss + MS.CROSS_ISA_SPREAD / 2
    chk = MS.recheck(live, stored, other)
    assert chk["mode"] == "tolerance" and chk["ok"] and "measured cross-ISA spread" in chk["says"]
    live.train_loss = stored.train_loss + 2 * MS.CROSS_ISA_SPREAD
    assert not MS.recheck(live, stored, other)["ok"]

