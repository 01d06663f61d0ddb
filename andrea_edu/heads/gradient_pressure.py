"""Do heads that contribute redundantly receive smaller gradients? The source's claim, measured.

Introduced in the chapter "Why heads specialize". The source says: "heads that contribute
redundantly receive smaller gradients than heads that contribute uniquely". `specialization.train`
probes the model at steps 0, steps/10, ...; at each probe, for every head (layer l, head h), on the
total loss of a fixed probe batch:

  Δ  unique contribution: the loss increase when only this head is ablated (W_O rows zeroed);
  V  solo value: the loss it recovers when it is the only head of its layer left;
  ρ  the largest correlation between its output (head . W_O rows) and another head's of its layer;
  G  the mean norm of the gradient on its own parameters (its W_Q, W_K, W_V columns and W_O rows)
     over the training steps from this probe to the next: the gradient it receives in that state.

Classes, per probe and head (the operational meaning of the source's words):
  inactive   V < MIN_SOLO: on its own the head recovers almost nothing; it contributes nothing,
             redundantly or not, so it is left out of the comparison.
  redundant  V >= MIN_SOLO and Δ < V / 2: the other heads already cover more than half of what
             this head can do (removing it costs less than half of what it achieves alone).
  unique     V >= MIN_SOLO and Δ >= V / 2.
A second, independent definition uses the outputs instead of the loss: among active heads,
redundant when ρ >= CORR_REDUNDANT, unique otherwise.

Comparison: in every (run, probe, layer) cell holding both a unique and a redundant head,
ratio = mean G(unique) / mean G(redundant) (same layer and moment, so the layers' and the
schedule's different gradient scales cancel). Pooled: the geometric mean of the ratios.
A two-sided sign test asks whether ratio > 1 happens more often than a coin would (the cells are
not independent, probes of one run follow each other, so read its p-value as a guide).
Verdict rule: "holds" when the pooled ratio >= 1.25 and ratio > 1 in >= 75 % of cells;
"holds with a caveat" when the pooled ratio >= 1.1 and ratio > 1 in more than half of them (a
weak or inconsistent effect in the claimed direction); "does not hold" when the evidence points
the other way as clearly (pooled ratio <= 1/1.1 and ratio > 1 in less than half of the cells:
redundant heads get more gradient); "not observed here" otherwise: no difference this toy can
resolve, which does not refute a smaller effect (figures.verdicts); "not measurable" with fewer
than MIN_CELLS cells (`reason` says why, and the ratios are `Unmeasured`: they print as "not
measurable", never as "nan").
Robustness: one run's pooled ratio moves with the CPU's rounding (a run that sits near a rule's
bound can change verdict on another machine), so a chapter's verdict is the pooled one over the
committed multi-seed sweep; `Pressure.robust` says whether the pooled ratio is at least
RATIO_MARGIN (relative) away from every bound of the rule.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from andrea_edu.heads.verdict_words import NOT_OBSERVED


MIN_SOLO = 0.05  # nats: a head that recovers less than this on its own is inactive
CORR_REDUNDANT = 0.5
MIN_CELLS = 3
VERDICT_RATIO = 1.25
VERDICT_CONSISTENCY = 0.75
CAVEAT_RATIO = 1.1
# Relative distance from a bound of the rule (1.1, 1.25) inside which a pooled ratio is "at the
# edge": rounding alone moved one run's pooled ratio by up to this much between two x86 CPUs.
RATIO_MARGIN = 0.05


class Unmeasured(float):
    """NaN that formats as "not measurable" (f"{x:.2f}" included), never as "nan"."""

    reason: str

    def __new__(cls, reason: str = "") -> Unmeasured:
        obj = super().__new__(cls, float("nan"))
        obj.reason = reason
        return obj

    def __format__(self, spec: str) -> str:
        return "not measurable"

    def __str__(self) -> str:
        return "not measurable"

    __repr__ = __str__


def classify(delta: float, solo: float, corr: float | None = None, by: str = "ablation") -> str:
    """"inactive", "redundant" or "unique" for one head at one probe (see the module docstring)."""
    if by not in ("ablation", "correlation"):
        raise ValueError(f"by={by!r} must be 'ablation' or 'correlation'")
    if solo < MIN_SOLO:
        return "inactive"
    if by == "ablation":
        return "redundant" if delta < solo / 2 else "unique"
    if corr is None:
        raise ValueError("by='correlation' needs corr, the head's largest output correlation")
    return "redundant" if corr >= CORR_REDUNDANT else "unique"


@dataclass
class Pressure:
    """The measurement: one row per (run, probe, head), one ratio per comparable cell."""

    by: str
    rows: list  # dicts: run, step, layer, head, delta, solo, corr, grad, cls
    ratios: list  # dicts: run, step, layer, ratio, n_unique, n_redundant
    pooled_ratio: float
    fraction_above_1: float
    sign_test_p: float
    verdict: str
    reason: str = ""  # why "not measurable", in words; "" otherwise

    @property
    def robust(self) -> bool:
        """True when the pooled ratio is at least RATIO_MARGIN (relative) from every bound of
        the verdict rule, so that rounding alone cannot change the verdict."""
        if self.verdict == "not measurable":
            return False
        return all(abs(self.pooled_ratio / b - 1) >= RATIO_MARGIN
                   for b in (1 / CAVEAT_RATIO, CAVEAT_RATIO, VERDICT_RATIO))

    def ratio_text(self) -> str:
        """"1.83x", or "not measurable because ..." (never "nanx")."""
        if self.verdict == "not measurable":
            return f"not measurable because {self.reason}"
        return f"{self.pooled_ratio:.2f}x"

    def mean_grad(self, cls: str) -> float:
        g = [r["grad"] for r in self.rows if r["cls"] == cls]
        return float(np.mean(g)) if g else Unmeasured(f"no {cls} head")

    def count(self, cls: str) -> int:
        return sum(r["cls"] == cls for r in self.rows)

    def summary(self) -> str:
        if self.verdict == "not measurable":
            return f"not measurable because {self.reason}"
        return (f"{len(self.ratios)} cells with both kinds of head: unique heads received "
                f"{self.pooled_ratio:.2f}x the gradient of redundant ones (geometric mean); "
                f"more in {100 * self.fraction_above_1:.0f}% of cells (sign test "
                f"p = {self.sign_test_p:.2g})")


def _rows(run, name, relative: bool = False) -> list[dict]:
    if relative and getattr(run, "param_norm", None) is None:
        raise ValueError(f"relative=True needs each head's parameter norm at the probes, which "
                         f"only a run trained in this process keeps ({name} has none); allowed: "
                         f"relative=False, or a run from training.train")
    rows = []
    for j, p in enumerate(run.probes):
        delta, solo = np.asarray(p["delta"]), np.asarray(p["solo"])  # (L, nh) each
        rho, grad = np.asarray(p["corr_max"]), np.asarray(p["grad"])  # (L, nh) each
        if relative:  # G / ||theta_h||: the gradient relative to the size of what it moves
            grad = grad / np.maximum(np.asarray(run.param_norm[j]), 1e-12)
        L, nh = delta.shape
        for l in range(L):
            for h in range(nh):
                rows.append({"run": name, "step": int(p["step"]), "layer": l, "head": h,
                             "delta": float(delta[l, h]), "solo": float(solo[l, h]),
                             "corr": float(rho[l, h]), "grad": float(grad[l, h])})
    return rows


def gradient_pressure(runs, by: str = "ablation", relative: bool = False) -> Pressure:
    """Classify every head at every probe of `runs` (a Run, or {name: Run}) and compare gradients.
    relative=True compares G / ||theta_h|| (each head's gradient norm over the norm of its own
    parameters at the probe) instead of G; it needs runs trained in this process."""
    if not isinstance(relative, bool):
        raise ValueError(f"relative={relative!r} is not allowed; True or False")
    if not isinstance(runs, dict):
        runs = {"run": runs}
    rows = []
    for name, run in runs.items():
        for r in _rows(run, name, relative):
            r["cls"] = classify(r["delta"], r["solo"], r["corr"], by=by)
            rows.append(r)
    cells: dict = {}
    for r in rows:
        cells.setdefault((r["run"], r["step"], r["layer"]), []).append(r)
    ratios = []
    for (name, step, layer), members in cells.items():
        u = [m["grad"] for m in members if m["cls"] == "unique"]
        d = [m["grad"] for m in members if m["cls"] == "redundant"]
        if u and d and np.mean(d) > 0:
            ratios.append({"run": name, "step": step, "layer": layer,
                           "ratio": float(np.mean(u) / np.mean(d)),
                           "n_unique": len(u), "n_redundant": len(d)})
    if len(ratios) < MIN_CELLS:
        n_u, n_r = (sum(r["cls"] == c for r in rows) for c in ("unique", "redundant"))
        reason = (f"only {len(ratios)} (layer, probe) cell{'s' * (len(ratios) != 1)} held both a "
                  f"unique and a redundant head ({MIN_CELLS} needed; {n_u} unique and {n_r} "
                  f"redundant head-probes in all)")
        nan = Unmeasured(reason)
        return Pressure(by, rows, ratios, nan, nan, nan, "not measurable", reason)
    logs = [math.log(r["ratio"]) for r in ratios]
    pooled = math.exp(sum(logs) / len(logs))
    k = sum(r["ratio"] > 1 for r in ratios)
    above = k / len(ratios)
    if pooled >= VERDICT_RATIO and above >= VERDICT_CONSISTENCY:
        verdict = "holds"
    elif pooled >= CAVEAT_RATIO and above > 0.5:
        verdict = "holds with a caveat"
    elif pooled <= 1 / CAVEAT_RATIO and above < 0.5:
        verdict = "does not hold"
    else:
        verdict = NOT_OBSERVED
    return Pressure(by, rows, ratios, pooled, above, sign_test(k, len(ratios)), verdict)


def sign_test(k: int, n: int) -> float:
    """Two-sided exact binomial p-value of k successes in n fair coin flips."""
    if not 0 <= k <= n or n < 1:
        raise ValueError(f"need 0 <= k <= n and n >= 1, got k={k}, n={n}")
    tail = sum(math.comb(n, i) for i in range(min(k, n - k) + 1)) / 2 ** n
    return min(1.0, 2 * tail)
