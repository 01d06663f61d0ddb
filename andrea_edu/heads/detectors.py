"""The source's three patterns on real text: is each found, and does its head carry it?

Introduced in the chapter "Heads on real text". The patterns and their labels come from
`heads.text_corpus` (parsed by Python's `tokenize`); the model is any `AndreaModel` (the real-text
model, the toy laboratory's, or GPT-2 small loaded into it) whose vocabulary the batch uses. The
measures themselves (scores S, the uniform baseline U, pattern losses, the ablation D with its
standard error SE) are `heads.measures`, the same definitions as the toy laboratory's; this module
holds real text's rule for reading them:

ratio      R[p, l, h] = S / U: how many times the uniform baseline the head reaches.
found      pattern p is found when its best head has R >= FOUND_RATIO (5). The verdict is
           "found" when the best R clears 5 by more than the score tolerance (expressed as a
           ratio), "not found" when it misses by more, and "within noise of the threshold"
           otherwise, so that no float noise (across CPUs, BLAS kernels, instruction sets) can
           flip it: the tolerance is `text_training.SCORE_TOL`, measured there.
carried    the head found for p carries it when ablating it (on held-out windows) raises p's
           loss by more than two standard errors.
"""
from __future__ import annotations

import numpy as np

from .measures import best_heads, check_real
from .text_corpus import BRACKET, IDENT, PATTERN_NAMES, PATTERNS, PREV  # noqa: F401

FOUND_RATIO = 5.0
LOSS_KEYS = ("all",) + PATTERN_NAMES  # real text's loss columns (measures.pattern_losses)


def verdict(score: float, base: float, tol: float, ratio: float = FOUND_RATIO) -> str:
    """"found", "not found" or "within noise of the threshold": score vs ratio x base, with a
    margin of `tol` (an absolute score tolerance, >= 0) on either side; NaN score or base: not
    measured."""
    for name, v in (("score", score), ("base", base)):
        if isinstance(v, bool) or not isinstance(v, (int, float, np.floating, np.integer)):
            raise TypeError(f"{name}={v!r} must be a number (NaN: not measured), got "
                            f"{type(v).__name__}")
    tol = check_real("tol", tol, 0.0)
    ratio = check_real("ratio", ratio, 0.0)
    if not np.isfinite(score) or not np.isfinite(base):
        return "not measured (no labelled query)"
    if score >= ratio * base + tol:
        return "found"
    if score <= ratio * base - tol:
        return "not found"
    return "within noise of the threshold"


def summary(scores, base, D, SE, tol: float) -> list[dict]:
    """One dict per pattern: its best head, score, ratio to baseline, verdict, and what ablating
    that head costs the pattern (nats, with its standard error) and the other patterns."""
    s = np.asarray(scores)
    out = []
    for p, (l, h) in zip(PATTERNS, best_heads(s)):
        sc = float(s[p, l, h])
        carrier = tuple(int(i) for i in np.unravel_index(np.nanargmax(D[..., 1 + p]),
                                                         D.shape[:2]))
        out.append({"pattern": PATTERNS[p], "head": (l, h), "score": sc,
                    "baseline": float(base[p]), "ratio": sc / float(base[p]),
                    "verdict": verdict(sc, float(base[p]), tol),
                    "margin": sc - FOUND_RATIO * float(base[p]),
                    "ablation": float(D[l, h, 1 + p]), "ablation_se": float(SE[l, h, 1 + p]),
                    "ablation_all": float(D[l, h, 0]),
                    "carrier": carrier, "carrier_ablation": float(D[carrier][1 + p]),
                    "carrier_se": float(SE[carrier][1 + p])})
    return out


def claim_verdict(rows: list[dict]) -> str:
    """The source's empirical claim (heads for positional, syntactic and semantic patterns), rated
    from `summary` rows: "holds" when every pattern is found and the head found carries it (its
    ablation raises that pattern's loss by more than 2 standard errors); "holds with a caveat" when
    at least one is; "does not hold" when none is."""
    def shown(r):
        return r["verdict"] == "found" and r["ablation"] > 2 * r["ablation_se"]
    n = sum(shown(r) for r in rows)
    return "holds" if n == len(rows) else "holds with a caveat" if n else "does not hold"


def scores_verdict(scores, base, tol: float) -> str:
    """The same claim rated from scores alone (e.g. GPT-2 small, where ablating 144 heads is not
    run): "holds" when every pattern is found, "holds with a caveat" when some are, "does not
    hold" when none is."""
    s = np.asarray(scores)
    n = sum(verdict(float(np.nanmax(s[p])), float(base[p]), tol) == "found" for p in PATTERNS)
    return "holds" if n == len(PATTERNS) else "holds with a caveat" if n else "does not hold"
