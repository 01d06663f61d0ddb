"""The toy laboratory's reading of the shared measures: its pattern names and loss columns, the
generator's floors, chance by name, and the detection threshold with its margin.

Introduced in the chapter "Why heads specialize" (`heads.training` records these with every run;
"Why twelve heads, not one wider head" and the sweep's verdicts read them). The measures
themselves (scores S, the baseline U, `best_heads`) are `heads.measures`, shared with real text;
real text's own rule (the ratio to U) is `heads.detectors`.

detected   a head is detected for pattern p when S[p, l, h] >= DETECT_THRESHOLD (0.5: at least
           half of its probability on the designated key), for the pattern of its highest score.
call       the best head's side of the threshold (`threshold_call`): "above", "below", or "at the
           threshold" when it is closer to it than SCORE_MARGIN, a side float rounding could flip.
"""
from __future__ import annotations

import numpy as np
import torch

from andrea_edu.heads.batch import Batch
from andrea_edu.heads.corpus import PATTERNS
from andrea_edu.heads.measures import baseline, best_heads, check_real, check_scores

PATTERN_NAMES = tuple(PATTERNS.values())  # ("previous token", "matching bracket", "recent entity")
LOSS_KEYS = ("all",) + PATTERN_NAMES  # the columns of the toy's loss tables: whole batch, patterns
DETECT_THRESHOLD = 0.5
# How far one head's score moves when only the CPU's rounding changes (two x86 machines before
# the instruction-set pins): the chapter run's best matching-bracket head scored 0.505 on one and
# 0.428 on the other. A score closer to the threshold than SCORE_MARGIN is "at the threshold":
# no claim may rest on the side it fell on; claims rest on the multi-seed sweep instead.
SCORE_MARGIN = 0.1


def floors(batch: Batch) -> dict[str, float]:
    """The toy generator's irreducible loss on each pattern's positions of `batch` (a toy batch:
    real text's has no floor)."""
    floor = batch.floor
    if floor is None:
        raise ValueError("floors: the batch has no floor (only the toy corpus's batches carry the "
                         "generator's irreducible loss)")
    return {name: float(floor[batch.mask(p)].mean()) for p, name in enumerate(PATTERN_NAMES)}


def chance_scores(batch: Batch) -> dict[str, float]:
    """The toy's `baseline` by pattern name, in float32 as its runs record it: the score of a
    head that spreads its attention evenly over keys 0..t, the mean of 1/(t+1)."""
    return dict(zip(PATTERN_NAMES, map(float, baseline(batch, torch.float32))))


def detect(scores, threshold: float = DETECT_THRESHOLD) -> dict[tuple[int, int], str | None]:
    """{(layer, head): the pattern the head is detected for, or None}; scores (3, L, nh);
    threshold a number in [0, 1]."""
    threshold = check_real("threshold", threshold, 0.0, 1.0)
    s = torch.as_tensor(check_scores("scores", scores, len(PATTERN_NAMES)))
    out = {}
    for l in range(s.shape[1]):
        for h in range(s.shape[2]):
            best = int(s[:, l, h].argmax())
            out[(l, h)] = PATTERN_NAMES[best] if s[best, l, h] >= threshold else None
    return out


def threshold_call(score: float, threshold: float = DETECT_THRESHOLD,
                   margin: float = SCORE_MARGIN) -> str:
    """"above" (score >= threshold + margin), "below" (score < threshold - margin), or "at the
    threshold" in between: a side that float rounding alone could flip. "not measurable" for a
    NaN score; threshold in [0, 1], margin >= 0."""
    threshold = check_real("threshold", threshold, 0.0, 1.0)
    margin = check_real("margin", margin, 0.0)
    if isinstance(score, bool) or not isinstance(score, (int, float, np.floating, np.integer)):
        raise TypeError(f"score={score!r} must be a number (NaN: not measured), got "
                        f"{type(score).__name__}")
    if not np.isfinite(score):
        return "not measurable"
    if score >= threshold + margin:
        return "above"
    if score < threshold - margin:
        return "below"
    return "at the threshold"


def best_head_calls(scores, threshold: float = DETECT_THRESHOLD,
                    margin: float = SCORE_MARGIN) -> dict[str, dict]:
    """The toy's patterns by name: the best-scoring head (`best_heads`), its score and its
    `threshold_call`; scores (3, L, nh)."""
    check_real("threshold", threshold, 0.0, 1.0)
    check_real("margin", margin, 0.0)
    s = check_scores("scores", scores, len(PATTERN_NAMES))
    out = {}
    for i, (name, (l, h)) in enumerate(zip(PATTERN_NAMES, best_heads(s))):
        out[name] = {"layer": l, "head": h, "score": float(s[i, l, h]),
                     "call": threshold_call(float(s[i, l, h]), threshold, margin)}
    return out
