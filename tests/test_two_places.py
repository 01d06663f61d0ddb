"""heads.two_places: the worked example's knobs (chapter "Why twelve heads", exercises 1 and 2).

What one softmax row returns is w_a v_a + w_b v_b. Of features f_a, f_b of the same kind
(through the same W_V dimensions) one head keeps only that weighted sum: at w_a = w_b it carries
f_a + f_b exactly and nothing of f_a - f_b (uncorrelated with the sum for independent features);
at 70/30 the best read-out of the sum explains (0.7 + 0.3)^2 / ((0.49 + 0.09) * 2) = 0.862 of
its variance. Features of different kinds (disjoint dimensions) survive any split.
"""
from __future__ import annotations

import pytest

from andrea_edu.heads import two_places as TP

ONE_HALF, ONE_70, TWO = ("one head, 50% on a / 50% on b", "one head, 70% on a / 30% on b",
                         "two heads, one key each")


def test_a_sum_survives_the_blend_a_difference_does_not():
    s = TP.two_places_table(splits=(0.5, 0.7), n=3000, target="sum")
    d = TP.two_places_table(splits=(0.5, 0.7), n=3000, target="difference")
    assert s[ONE_HALF] < 1e-9 and d[ONE_HALF] > 0.95  # theory: 0 and 1
    assert abs(s[ONE_70] - (1 - 1 / 1.16)) < 0.03     # theory: 0.138
    assert abs(d[ONE_70] - 1 / 1.16) < 0.03           # theory: 0.862
    assert s[TWO] < 1e-9 and d[TWO] < 1e-9


def test_features_of_different_kinds_survive_one_head():
    same = TP.two_places_table(splits=(0.5, 0.9), n=3000)
    diff = TP.two_places_table(splits=(0.5, 0.9), n=3000, kinds="different")
    assert all(abs(v - 0.5) < 0.03 for k, v in same.items() if k.startswith("one head"))
    assert all(v < 1e-9 for v in diff.values())


@pytest.mark.parametrize("kw,name,allowed", [({"target": "product"}, "target", TP.TARGETS),
                                              ({"kinds": "mixed"}, "kinds", TP.KINDS)])
def test_a_knob_outside_the_allowed_is_one_line(kw, name, allowed):
    with pytest.raises(ValueError) as e:
        TP.two_places_table(**kw)
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith(f"{name}=") and str(allowed) in msg
