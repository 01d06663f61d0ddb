"""Train a small ANDREA on the three-pattern corpus and record what every head does.

Introduced in the chapter "Why heads specialize"; its n_head sweep returns in "Why twelve heads,
not one wider head". The corpus is `andrea_edu.heads.corpus`, the model `andrea_edu.model`, and the
measurements (pattern losses, scores, ablations, gradient norms: their definitions are there)
`andrea_edu.heads.measures`, re-exported here.

`train(settings)` runs AdamW on next-token loss only (the pattern labels never reach the loss) and
records: the training loss of every step; every `eval_every` steps, the per-pattern losses and
every head's scores on a fixed evaluation batch; at `n_probes` probes, every head's ablation
increase, solo value and largest output correlation (`gradient_pressure` reads them); at every
step, every head's gradient norm; at the end, the per-pattern ablation table and the heads'
output correlations.
"""
from __future__ import annotations

import random
import time
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import torch

from andrea_edu.config import AndreaConfig
from andrea_edu.heads.corpus import PATTERN_IDS, VOCAB_SIZE, make_batch
from andrea_edu.env import fast_mode
from andrea_edu.heads.measures import (ablation, best_heads, head_scores, pattern_losses,
                                       scores_from_maps, solo_values)
from andrea_edu.heads.per_head import (head_grad_norms, head_output_correlations,
                                       head_param_norms, max_other_correlation)
from andrea_edu.heads.run import Run, RunSettings, fit, progress_bar, torch_threads
from andrea_edu.heads.toy_calls import (DETECT_THRESHOLD, LOSS_KEYS, PATTERN_NAMES, SCORE_MARGIN,
                                        best_head_calls, chance_scores, detect, floors,
                                        threshold_call)
from andrea_edu.model import AndreaModel, count_parameters, count_parameters_by_part

EVAL_SEED = 12345  # every run is evaluated on the same batch, whatever its training seed
# The chapter's main run: n_head 4, seed 2. The rule (tests/test_specialization.py checks it on
# the committed sweep): of seeds 0, 1, 2 at n_head 4, the run whose worst pattern ends closest to
# its floor (largest final loss above the floor, smallest over the seeds). Under the pinned CPU
# numerics (andrea_edu.env, sweep of 2026-12-01): seed 0 0.033, seed 1 0.587 (its recent-entity
# pattern unlearned at step 1500), seed 2 0.018. (Seed 1 was the choice on an unpinned AVX-512
# EPYC, where it learned all three: single runs are at the mercy of rounding, so the chapter's
# verdicts rest on the sweep.) The chapter shows the other two seeds beside it.
CHAPTER_SEED = 2


@dataclass(frozen=True)
class Settings(RunSettings):
    """Model size and training budget of one run. The defaults are the chapter's full run:
    2 layers, d_model 64, 4 heads of 16, 1500 AdamW steps of 32 x 48 tokens (~50k sequences)."""

    LAB: ClassVar[str] = "toy"
    n_probes: int = 10  # ablation probes at steps 0, steps/10, ... (gradient-pressure analysis)
    probe_batch: int = 64
    threads: int = 1  # torch threads while training: 1 makes a run bit-for-bit repeatable

    def model_config(self) -> AndreaConfig:
        return AndreaConfig(d_model=self.d_model, n_head=self.n_head, n_layer=self.n_layer,
                            vocab_size=VOCAB_SIZE, block_size=self.seq_len,
                            name=f"toy ANDREA, {self.n_head} heads")

    def probe_steps(self) -> list[int]:
        return sorted({round(i * self.steps / self.n_probes) for i in range(self.n_probes)})


FAST = dict(steps=120, batch_size=16, seq_len=32, eval_every=20, eval_batch=64, n_probes=3,
            probe_batch=32)


def default_settings(n_head: int = 4, fast: bool | None = None, **changes) -> Settings:
    """The chapter's settings; in fast mode (ANDREA_FAST=1, or fast=True) a budget of seconds."""
    fast = fast_mode() if fast is None else fast
    return Settings(n_head=n_head, **{**(FAST if fast else {}), **changes})


def train(settings: Settings | None = None, progress: bool = True,
          stop_after: int | None = None) -> Run:
    """Train one model from scratch (deterministic for given settings) and analyse it.

    stop_after: run only the first `stop_after` steps of the schedule (the same learning rates
    as the whole run), e.g. to check a stored run's first steps in seconds.
    """
    s = settings or default_settings()
    if not isinstance(s, Settings):
        raise TypeError(f"settings must be a Settings, got {type(s).__name__}")
    s.check()
    if s.steps < s.n_probes or s.eval_every < 1:
        raise ValueError(f"steps={s.steps} must be >= n_probes={s.n_probes}, eval_every="
                         f"{s.eval_every} >= 1")
    n_steps = s.steps_to_run(stop_after)
    t0, c0 = time.perf_counter(), time.process_time()
    with torch_threads(s.threads):
        model = AndreaModel(s.model_config(), seed=s.seed)
        rng = random.Random(s.seed)
        ev = make_batch(s.eval_batch, s.seq_len, seed=EVAL_SEED)
        pb = make_batch(s.probe_batch, s.seq_len, seed=EVAL_SEED + 1)
        L, nh = s.n_layer, s.n_head
        grads = np.zeros((n_steps, L, nh), dtype=np.float32)
        eval_steps, eval_loss, scores, probes, param_norm = [], [], [], [], []
        probe_at = set(s.probe_steps())

        def evaluate(step):
            with torch.no_grad(), model.record("attn.probs") as maps:
                per_pos = model.per_position_loss(ev.idx, ev.targets)  # (B, T)
            eval_steps.append(step)
            eval_loss.append(pattern_losses(per_pos, ev))  # (4,), LOSS_KEYS
            scores.append(scores_from_maps(torch.stack(maps), ev).numpy())

        def before_step(step):
            if step % s.eval_every == 0:
                evaluate(step)
            if step in probe_at:
                param_norm.append(head_param_norms(model).numpy())
                probes.append({"step": step, "delta": ablation(model, pb, chunk=None)[0][..., 0],
                               "solo": solo_values(model, pb, chunk=None)[..., 0],
                               "corr_max": max_other_correlation(
                                   head_output_correlations(model, pb))})

        def next_batch():
            batch = make_batch(s.batch_size, s.seq_len, rng=rng)
            return batch.idx, batch.targets

        def after_backward(step):
            grads[step] = head_grad_norms(model).numpy()

        bar = progress_bar(n_steps, f"training {L} layers x {nh} heads", progress)
        train_loss = fit(model, s, n_steps, next_batch, bar, before_step, after_backward)
        evaluate(n_steps)
        ablation_d, _ = ablation(model, ev, chunk=None)  # one pass, as the runs are recorded
        corr = head_output_correlations(model, ev)
    bounds = [p["step"] for p in probes] + [n_steps]
    for p, lo, hi in zip(probes, bounds, bounds[1:]):
        p["grad"] = grads[lo:hi].mean(axis=0)  # (L, nh): gradients in the state probed
    return Run(settings=s, param_count=count_parameters(model),
               param_by_part=count_parameters_by_part(model), train_loss=train_loss,
               eval_steps=eval_steps, eval_loss=np.array(eval_loss), scores=np.stack(scores),
               floors=floors(ev), baseline=np.array(list(chance_scores(ev).values())),
               grad_norm=grads, probes=probes,
               ablation=ablation_d, correlations=corr,
               wall_seconds=time.perf_counter() - t0, cpu_seconds=time.process_time() - c0,
               model=model, param_norm=np.stack(param_norm))


def model_after(steps: int, settings: Settings | None = None) -> AndreaModel:
    """The chapter's model after the first `steps` steps of its training schedule (0: as
    initialised), without a run's evaluations and probes: for an exercise that looks at the
    weights ("Reading the pipeline", exercise 5). Deterministic for given settings."""
    s = settings or default_settings()
    if not isinstance(s, Settings):
        raise TypeError(f"settings must be a Settings, got {type(s).__name__}")
    s.check()
    if isinstance(steps, bool) or not isinstance(steps, int) or not 0 <= steps <= s.steps:
        raise ValueError(f"steps={steps!r} must be an int in 0..{s.steps} (the schedule's "
                         f"length{', fast mode' if s.steps == FAST['steps'] else ''})")
    with torch_threads(s.threads):
        model = AndreaModel(s.model_config(), seed=s.seed)
        rng = random.Random(s.seed)

        def next_batch():
            batch = make_batch(s.batch_size, s.seq_len, rng=rng)
            return batch.idx, batch.targets

        if steps:
            fit(model, s, steps, next_batch, progress_bar(steps, "training", False))
    return model


_CACHE: dict[Settings, Run] = {}


def train_cached(settings: Settings | None = None, progress: bool = True) -> Run:
    """`train`, once per Settings per Python process (the notebooks reuse runs across cells)."""
    s = settings or default_settings()
    if s not in _CACHE:
        _CACHE[s] = train(s, progress=progress)
    return _CACHE[s]
