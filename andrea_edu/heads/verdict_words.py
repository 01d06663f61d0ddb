"""The verdict words: the one vocabulary in which every computation that rates a claim answers.

Used by the computations that rate a claim (`gradient_pressure`, the sweep's pattern verdicts,
the real-text detectors, the trained model's patterns) and by the "Checking the source" box that
shows them (`andrea_edu.figures.verdicts`, which refuses any other word). They live here, below
the figures, because the computation layers import nothing of the figures.

  "holds"                the evidence supports the claim;
  "holds with a caveat"  it supports part of it, or under a condition the row states;
  "does not hold"        the evidence contradicts the claim at the scale the claim speaks of;
  "not observed here"    the evidence cannot decide (the setting is too small, or the effect is
                         not distinguishable from noise);
  "not yet measured"     the check needs a measurement that does not exist yet (a GPU timing).
"""
from __future__ import annotations

HOLDS = "holds"
CAVEAT = "holds with a caveat"
DOES_NOT_HOLD = "does not hold"
NOT_OBSERVED = "not observed here"
NOT_MEASURED = "not yet measured"
VERDICTS = (HOLDS, CAVEAT, DOES_NOT_HOLD, NOT_OBSERVED, NOT_MEASURED)
DECISIVE = (HOLDS, CAVEAT, DOES_NOT_HOLD)  # the verdicts that decide a claim
