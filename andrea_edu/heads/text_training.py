"""Train a small ANDREA on the standard library's source (CPU, one thread) and record its heads.

Introduced in the chapter "Heads on real text". The committed run is made by the laboratory,

    python -m andrea_lab.make_realtext_run --out book/data/realtext_run.json

which re-executes itself with the CPU instruction-set pins (CPU_PINS: ATen, MKL and oneDNN held to
AVX2) set before torch is imported, trains `TextSettings()` and writes the run JSON (provenance,
losses, scores, ablation) and the model's weights beside it (`realtext_model.pt`, its sha256 in the
JSON), both atomically (temporary file + os.replace). `load_run` validates the JSON and says in one
line which file is wrong and why.

The laboratory's re-check (`andrea_lab.make_realtext_run.recheck_losses`, or `--recheck N`; the
tests run it) trains the schedule's first `RECHECK_STEPS` steps again, in a subprocess with the same
pins, and compares its training losses with the committed ones (stored to 5 decimals): they must
agree within RECHECK_TOL.

How the tolerances were measured (python -m andrea_lab.make_realtext_run --measure-spread, on an
Intel Xeon with AVX-512, 2 cores; and two full runs):
  * the first 40 steps under each of the 8 combinations of ATEN_CPU_CAPABILITY (unset = AVX512
    there, avx2) x MKL_CBWR (unset, AVX2,STRICT) x ONEDNN_MAX_CPU_ISA (unset, AVX2): losses within
    4.8e-7 nats of the pinned run (two float32 ulps); with 2 torch threads (another summation
    order): 2.4e-7 to 4.8e-7 (two runs). The smallest real change tried, the learning rate
    x 1.001, moves them 2.0e-3.
    RECHECK_TOL = 1e-4 nats: 20x the JSON's rounding (5e-6), 200x the float noise, 20x below
    that smallest real change.
  * the whole run with nothing pinned (ATen AVX512, MKL and oneDNN free) against the committed
    pinned one: every head's final score within 1e-4 (the JSON's 4-decimal resolution), every
    ablation within 3e-5 nats, the same best heads. SCORE_TOL = 0.01, a hundred times that, is
    the margin a detector verdict must clear (RECIPES: between two x86 machines without pins,
    noise has moved a toy score by far more, which the pins exist to prevent).
`--no-pin` leaves the knobs to the libraries: it re-runs itself with ANDREA_CPU_ISA=native and the
knobs removed (the command pins them otherwise).
"""
from __future__ import annotations

import os
import platform
import random
import time
from pathlib import Path

import numpy as np
import torch

from .. import env
from ..env import book_build
from ..model import AndreaModel
from . import detectors as D, measures as M
from . import text_corpus as tc
from .run import Run, SettingsError, fit, progress_bar, torch_threads  # noqa: F401
from .text_runs import (FAST, RUN_FILE, SCHEMA, TOY_FILE, WEIGHTS_FILE,  # noqa: F401
                        TextSettings, default_settings,
                        load_run, load_toy, toy_settings, weights_path)

# The pins the committed file is produced with, set before torch is imported (_reexec_pinned):
# the book's shared AVX2 level (env.PINNED_ISA) where env has it.
CPU_PINS = dict(getattr(env, "PINNED_ISA", None) or
                {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "AVX2,STRICT",
                 "ONEDNN_MAX_CPU_ISA": "AVX2"})

EVAL_SEED = 2024  # validation windows of every evaluation
ABLATION_SEED = 2025  # held-out windows of the final ablation
SCORE_TOL = 0.01  # absolute score: measured, see the module docstring


def train(settings: TextSettings | None = None, progress: bool = True,
          stop_after: int | None = None, corpus: tc.Corpus | None = None) -> Run:
    """Train from scratch (deterministic for given settings and corpus) and measure the heads.

    stop_after: only the first `stop_after` steps of the schedule (no final ablation), for the
    re-check."""
    s = settings or default_settings()
    if not isinstance(s, TextSettings):
        raise TypeError(f"settings must be a TextSettings, got {type(s).__name__}")
    s.check()
    n_steps = s.steps_to_run(stop_after)
    c = corpus or tc.corpus_cached()
    t0, c0 = time.perf_counter(), time.process_time()
    with torch_threads(s.threads):
        model = AndreaModel(s.model_config(c.vocab_size), seed=s.seed)
        rng = random.Random(s.seed)
        full = stop_after is None
        ev = tc.labelled_batch(c, s.eval_batch, s.seq_len, seed=EVAL_SEED) if full else None
        eval_steps, eval_loss, scores = [], [], []

        def evaluate(step):
            assert ev is not None  # evaluations run only in a full run, which made ev
            model.eval()
            eval_steps.append(step)
            eval_loss.append(M.pattern_losses(M.per_position_loss(model, ev), ev))
            scores.append(M.head_scores(model, ev).numpy())
            model.train()
            if progress and not book_build():
                best = scores[-1].reshape(3, -1).max(axis=1) / M.baseline(ev)
                bar.write(f"step {step}: val loss {eval_loss[-1][0]:.3f}, best head / uniform: "
                          + ", ".join(f"{n} {r:.1f}x" for n, r in zip(D.PATTERN_NAMES, best)))

        def before_step(step):
            if full and step % s.eval_every == 0:
                evaluate(step)

        bar = progress_bar(n_steps, f"training {s.n_layer} layers x {s.n_head} heads on the "
                           f"standard library", progress)
        train_loss = fit(model, s, n_steps, lambda: tc.train_batch(c, s.batch_size, s.seq_len, rng),
                         bar, before_step, postfix_every=25)
        if full:
            evaluate(n_steps)
            ab = tc.labelled_batch(c, s.ablation_batch, s.seq_len, seed=ABLATION_SEED)
            abl, abl_se = M.ablation(model, ab)
            assert ev is not None  # made above in a full run
            base = M.baseline(ev)
        else:
            abl = abl_se = np.zeros((s.n_layer, s.n_head, 4))
            base = np.zeros(3)
    L, nh = s.n_layer, s.n_head
    return Run(settings=s, provenance=provenance(c), train_loss=train_loss,
                   eval_steps=eval_steps, eval_loss=np.array(eval_loss).reshape(-1, 4),
                   scores=np.array(scores).reshape(-1, 3, L, nh), baseline=base, ablation=abl,
                   ablation_se=abl_se, wall_seconds=time.perf_counter() - t0,
                   cpu_seconds=time.process_time() - c0, model=model)


# ---------------------------------------------------------------- provenance


def mkl_cbwr() -> str | None:
    """The code path MKL runs (its CBWR branch, as the library reports it), or None where the
    torch build does not expose it. MKL_CBWR=AVX2,STRICT reads 'AVX2,STRICT'; an unknown value
    falls back to 'AUTO'."""
    import ctypes
    names = {1: "OFF", 2: "AUTO", 3: "COMPATIBLE", 4: "SSE2", 6: "SSE4_2", 8: "AVX", 10: "AVX2",
             12: "AVX512_MIC", 13: "AVX512", 14: "AVX512_MIC_E1", 15: "AVX512_E1"}
    try:
        lib = ctypes.CDLL(str(Path(torch.__file__).parent / "lib" / "libtorch_cpu.so"))
        f = lib.mkl_serv_cbwr_get
    except (OSError, AttributeError):
        return None
    f.restype, f.argtypes = ctypes.c_int, [ctypes.c_int]
    v = f(-1)  # MKL_CBWR_ALL: the branch in the low bits, STRICT as 0x10000
    return names.get(v & 0xFFFF, str(v & 0xFFFF)) + (",STRICT" if v & 0x10000 else "")


def cpu_keys() -> dict:
    """The CPU as the real-text chapter shows it under a run: name, machine, cores, ATen's
    level, the three pins, MKL's branch (a run's own provenance keys)."""
    return {"cpu": env.cpu_name(), "machine": platform.machine(), "cores": os.cpu_count(),
            "cpu_capability": torch.backends.cpu.get_cpu_capability(),
            "pins": {k: os.environ.get(k) for k in CPU_PINS}, "mkl_cbwr": mkl_cbwr()}


def provenance(corpus: tc.Corpus) -> dict:
    """A run's provenance: the one schema's shared keys (`andrea_edu.data.new_provenance`) and
    the run's own: its CPU (`cpu_keys`) and the corpus it read (the laboratory's writer adds the
    commit and the code hash: andrea_lab.run_writers.save_run)."""
    from ..data import new_provenance
    return new_provenance(
        "a small ANDREA trained on the Python standard library's source, CPU",
        "python -m andrea_lab.make_realtext_run --out book/data/" + RUN_FILE,
        **cpu_keys(), corpus=dict(corpus.provenance))
