"""The experiments of the exercises of "Why heads specialize", one knob each.

    run_with_corpus    the chapter's run again on another corpus (segment shares, nesting depth);
                       the run itself, untrained, when nothing changes
    head_line          one line on what a head does in a run: scores, ablation, detection
    pattern_progress   one line on a pattern: when its loss reaches its floor, its best head
    carrier            the head whose removal hurts a pattern most
    copy_pair          a layer's most needed head and a head of it that no loss needs
    duplicate_head     a copy of a model with one head copied into another (W_O rows halved)
    train_on           train such a model further and follow the two copies' gradients and distance
"""
from __future__ import annotations

import copy
import dataclasses
import random
from dataclasses import dataclass

import numpy as np
import torch

from andrea_edu.heads import corpus
from andrea_edu.heads.per_head import head_grad_norms
from andrea_edu.heads.run import Run, fit, progress_bar, torch_threads
from andrea_edu.heads.toy_calls import (DETECT_THRESHOLD, LOSS_KEYS, PATTERN_NAMES, detect,
                                        threshold_call)
from andrea_edu.heads.training import Settings, train


# ---------------------------------------------------------------- another corpus
def run_with_corpus(settings: Settings, base: Run, segment_weights=None, max_depth=None,
                    progress: bool = True) -> Run:
    """`base` (the run trained on the corpus as it is) when the given values are the corpus's
    own, without training; otherwise a new run with `settings`, trained from scratch on the
    changed corpus (`corpus.variant`: its evaluation batch follows the change). Values outside
    what the corpus allows stop first, in one line (`corpus.check_variant`)."""
    corpus.check_variant(segment_weights, max_depth)
    same_w = segment_weights is None or tuple(segment_weights) == tuple(corpus.SEGMENT_WEIGHTS)
    same_d = max_depth is None or max_depth == corpus.MAX_DEPTH
    if same_w and same_d:
        return base
    with corpus.variant(segment_weights, max_depth):
        return train(settings, progress=progress)


# ---------------------------------------------------------------- one line about a head, a pattern
def _check_head(run: Run, head) -> tuple[int, int]:
    L, nh = run.ablation.shape[:2]
    ok = (isinstance(head, tuple) and len(head) == 2
          and all(isinstance(x, (int, np.integer)) and not isinstance(x, bool) for x in head)
          and 0 <= head[0] < L and 0 <= head[1] < nh)
    if not ok:
        raise ValueError(f"head={head!r} is not allowed; a (layer, head) pair with layer in "
                         f"0..{L - 1} and head in 0..{nh - 1}")
    return int(head[0]), int(head[1])


def carrier(run: Run, pattern: str) -> tuple[int, int]:
    """(layer, head) whose removal raises `pattern`'s loss most in `run` (its ablation table)."""
    if pattern not in PATTERN_NAMES:
        raise ValueError(f"pattern={pattern!r} is not allowed; one of {', '.join(PATTERN_NAMES)}")
    a = np.asarray(run.ablation)[..., 1 + PATTERN_NAMES.index(pattern)]
    if np.isnan(a).all():
        raise ValueError(f"pattern={pattern!r}: no position of this run's evaluation batch has it")
    l, h = np.unravel_index(np.nanargmax(a), a.shape)
    return int(l), int(h)


def copy_pair(run: Run, tol: float = 0.05) -> tuple[int, int, int]:
    """(layer, src, dst) for copying a head over one the model does not need: dst is the head
    whose removal raises the total loss and every pattern's loss least (its largest increase,
    below `tol` nats), src the head of the same layer whose removal costs most. The total alone
    is not enough: a bracket head's +0.375 nats on brackets moved the total little. ValueError
    when no head of any layer stays under `tol`."""
    if not (isinstance(tol, (int, float)) and not isinstance(tol, bool) and tol > 0):
        raise ValueError(f"tol={tol!r} is not allowed; a number > 0 (nats)")
    worst = np.nanmax(np.asarray(run.ablation).astype(float), axis=-1)   # (L, nh): over total and patterns
    layer = int(np.argmin(worst.min(axis=1)))
    if worst[layer].min() >= tol:
        raise ValueError(f"no head of this run is idle: every head's removal raises some loss by "
                         f"{worst.min():.3f} nats or more (tol={tol:g})")
    return layer, int(np.argmax(worst[layer])), int(np.argmin(worst[layer]))


def head_line(run: Run, head) -> str:
    """What head (layer, head) does in `run`, in one line: its score for each pattern, the loss
    each pattern loses without it, and the pattern it is detected for (if any)."""
    l, h = _check_head(run, head)
    sc = np.asarray(run.scores_after)[:, l, h]
    ab = np.asarray(run.ablation)[l, h, 1:]
    what = detect(np.nan_to_num(run.scores_after, nan=0.0)).get((l, h))  # an absent pattern: never
    parts = [f"{p}: none in the batch" if np.isnan(s) else f"{p} {s:.2f} ({a:+.3f})"
             for p, s, a in zip(PATTERN_NAMES, sc, ab)]
    return (f"L{l}H{h}: score (loss change without it, nats) " + ", ".join(parts)
            + f"; detected as: {what or 'none'}")


def pattern_progress(run: Run, pattern: str, tol: float = 0.05) -> str:
    """One line on `pattern` in `run`: the first evaluated step at which its loss is within `tol`
    nats of its floor (or how far above it the run ends), and its best head against the
    detection threshold."""
    if pattern not in PATTERN_NAMES:
        raise ValueError(f"pattern={pattern!r} is not allowed; one of {', '.join(PATTERN_NAMES)}")
    if not (isinstance(tol, (int, float)) and not isinstance(tol, bool) and tol > 0):
        raise ValueError(f"tol={tol!r} is not allowed; a number of nats > 0")
    i = PATTERN_NAMES.index(pattern)
    excess = np.asarray(run.eval_loss)[:, LOSS_KEYS.index(pattern)] - run.floors[pattern]
    if np.isnan(excess).all():
        return f"{pattern}: no position of this run's evaluation batch has it"
    hit = np.nonzero(excess <= tol)[0]
    reach = (f"within {tol:g} nats of its floor from step {run.eval_steps[hit[0]]}" if len(hit)
             else f"not within {tol:g} nats of its floor in {run.settings.steps} steps (ends "
                  f"{excess[-1]:.3f} above it)")
    s = np.asarray(run.scores_after)[i]
    l, h = np.unravel_index(np.nanargmax(s), s.shape)
    return (f"{pattern}: loss {reach}; best head L{l}H{h}, score {s[l, h]:.2f} "
            f"({threshold_call(float(s[l, h]))} the threshold {DETECT_THRESHOLD:g})")


# ---------------------------------------------------------------- a head and its copy
def _head_slices(model, layer: int, head: int):
    C, hs = model.cfg.d_model, model.cfg.head_dim
    att = model.blocks[layer].attn
    cols = [part * C + head * hs + j for part in range(3) for j in range(hs)]  # its q, k, v columns
    return att, torch.tensor(cols), slice(head * hs, (head + 1) * hs)


def duplicate_head(model, layer: int, src: int, dst: int):
    """A copy of `model` in which head `dst` of `layer` becomes a copy of head `src`: its columns
    of c_attn (W_Q, W_K, W_V) and its rows of W_O are src's, and both heads' W_O rows are halved,
    so the two copies together write what src wrote alone (dst's own contribution is gone)."""
    nh, L = model.cfg.n_head, model.cfg.n_layer
    for name, v, hi in (("layer", layer, L), ("src", src, nh), ("dst", dst, nh)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or not 0 <= v < hi:
            raise ValueError(f"{name}={v!r} is not allowed; an int in 0..{hi - 1}")
    if src == dst:
        raise ValueError(f"dst={dst} is not allowed; a head other than src={src}")
    twin = copy.deepcopy(model)
    att, cs, rs = _head_slices(twin, layer, src)
    _, cd, rd = _head_slices(twin, layer, dst)
    with torch.no_grad():
        att.c_attn[:, cd] = att.c_attn[:, cs]
        att.W_O[rd] = att.W_O[rs] / 2
        att.W_O[rs] = att.W_O[rs] / 2
    return twin


@dataclass
class TwinRun:
    """Training on after `duplicate_head`: per step, the gradient norm of each copy and the
    distance between their parameters (relative to the first copy's norm)."""

    pair: tuple  # ((layer, a), (layer, b))
    grad: np.ndarray  # (steps, 2)
    distance: np.ndarray  # (steps + 1,): before each step, and after the last
    loss_before: float  # the model's loss on the evaluation batch before training on
    loss_after: float

    def says(self) -> str:
        (l, a), (_, b) = self.pair
        n = len(self.grad)
        if n == 0:
            return (f"L{l}H{a} copied into L{l}H{b}: loss on the evaluation batch "
                    f"{self.loss_before:.4f}; no step trained")
        gap = np.abs(self.grad[:, 0] - self.grad[:, 1]) / np.maximum(self.grad.max(axis=1), 1e-12)
        return (f"L{l}H{a} copied into L{l}H{b}, {n} steps trained on: gradient norms "
                f"{self.grad[0, 0]:.4f} / {self.grad[0, 1]:.4f} at the first step, "
                f"{self.grad[-1, 0]:.4f} / {self.grad[-1, 1]:.4f} at the last (largest relative "
                f"difference {gap.max():.1e}); distance between the copies "
                f"{self.distance[0]:.1e} -> {self.distance[-1]:.1e} of a copy's norm; loss "
                f"{self.loss_before:.4f} -> {self.loss_after:.4f}")


def train_on(model, settings: Settings, steps: int, pair, lr_scale: float = 0.1,
             seed: int = 1) -> TwinRun:
    """Train `model` (changed in place) for `steps` more AdamW steps on the corpus (a fresh
    stream, `seed`), learning rate lr_scale * settings.lr with the warm-up and cosine decay of
    a `steps`-step run, recording both heads of `pair` ((layer, a), (layer, b)): their gradient
    norms at every step and the distance between their parameters."""
    if isinstance(steps, bool) or not isinstance(steps, int) or not 0 <= steps <= 5000:
        raise ValueError(f"steps={steps!r} is not allowed; an int in 0..5000")
    (l, a), (l2, b) = pair
    if l != l2:
        raise ValueError(f"pair={pair!r} is not allowed; two heads of one layer")
    rng = random.Random(seed)
    ev = corpus.make_batch(settings.eval_batch, settings.seq_len, seed=seed + 10_000)
    s = dataclasses.replace(settings, steps=max(steps, 1), warmup=1, lr=settings.lr * lr_scale)

    def loss_now() -> float:
        with torch.no_grad():
            return float(model(ev.idx, ev.targets)[1])

    def distance() -> float:
        att, ca, ra = _head_slices(model, l, a)
        _, cb, rb = _head_slices(model, l, b)
        with torch.no_grad():
            xa = torch.cat([att.c_attn[:, ca].flatten(), att.W_O[ra].flatten()])
            xb = torch.cat([att.c_attn[:, cb].flatten(), att.W_O[rb].flatten()])
            return float((xa - xb).norm() / xa.norm().clamp_min(1e-12))

    grads = np.zeros((steps, 2))
    dist: list[float] = []
    before = loss_now()

    def next_batch():
        batch = corpus.make_batch(s.batch_size, s.seq_len, rng=rng)
        return batch.idx, batch.targets

    def after_backward(step):
        g = head_grad_norms(model)
        grads[step] = (float(g[l, a]), float(g[l, b]))

    with torch_threads(settings.threads):
        if steps:
            fit(model, s, steps, next_batch, progress_bar(steps, "training", False),
                lambda step: dist.append(distance()), after_backward)
        dist.append(distance())
    return TwinRun(pair=((l, a), (l, b)), grad=grads, distance=np.array(dist),
                   loss_before=before, loss_after=loss_now())
