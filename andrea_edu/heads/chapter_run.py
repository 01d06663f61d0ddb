"""The main run of "Why heads specialize", read from committed data instead of trained while the
book builds (1,500 steps: about a minute of one CPU core, most of the chapter's build time).

The run (n_head 4, training.CHAPTER_SEED, the chapter's full settings) is committed twice over:
its record is the sweep's entry for it (specialization_sweep.json: evaluations every 50 steps,
probes with each head's gradient norm averaged between them, ablation, correlations), and its
final weights are toy_lab_model.pt (written by heads.text_training --toy-out; evaluations and
probes draw no randomness, so that run's weights are this one's).

`chapter_run(settings)` puts them together into a `heads.run.Run` with its model, and checks that
the weights are the run's: evaluated now, they give the entry's final losses, scores, ablation
table and head correlations (`final_state`, `check_weights`); the run's final state is this
evaluation, done live (`training.train` computes the same after its last step). That the training
is this code's is the laboratory's check, not the page's: the tests train the first steps again and
compare them with the entry (`andrea_lab.make_sweep.recheck`: bit-exact under the producer's CPU
numerics, within the measured cross-ISA spread elsewhere).
Why read it rather than train it: besides the time, 1,500 steps under other CPU numerics are
another run (sweep.MEASURED_CROSS_CPU_FINAL_LOSS); read, the page shows the run its sweep, its
seed rule and its statistics describe, on any machine. Other settings (fast mode, a reader's
change) are trained, as before (`training.train_cached`).
"""
from __future__ import annotations

import dataclasses

import numpy as np
import torch

from andrea_edu.env import cpu_provenance, same_cpu_numerics
from andrea_edu.data import DataFileError, find_data, where_looked
from andrea_edu.heads import training as S
from andrea_edu.heads.corpus import make_batch
from andrea_edu.heads.measures import ablation, pattern_losses, scores_from_maps
from andrea_edu.heads.per_head import head_output_correlations
from andrea_edu.heads.run import Run, torch_threads

STORED_ROUNDING = {"eval_loss": 5e-5, "ablation": 5e-5, "scores": 5e-4, "correlations": 5e-4}
# Evaluating the same weights under other CPU numerics moves a loss or a score by float rounding
# only. Measured on an AMD EPYC (the committed weights, final_state): ATen AVX-512 unpinned and
# MKL_CBWR=COMPATIBLE against the three AVX2 pins, largest difference 4.8e-7 (an ablation
# entry); against the Intel Xeon that wrote the sweep, within the stored rounding alone. Allowed
# on top of the stored rounding when this machine's numerics differ from the producer's: 20x.
OTHER_NUMERICS = 1e-5


def committed_settings() -> S.Settings:
    """The settings of the committed run: the chapter's full run."""
    return S.default_settings(4, seed=S.CHAPTER_SEED, fast=False)


# ---------------------------------------------------------------- the weights, evaluated now
def final_state(model, s: S.Settings) -> dict:
    """What `training.train` computes after its last step, from the weights alone: the losses
    and scores on the evaluation batch, the ablation table and the heads' output correlations."""
    ev = make_batch(s.eval_batch, s.seq_len, seed=S.EVAL_SEED)
    with torch_threads(s.threads), torch.no_grad():  # as training evaluated: the same bits
        with model.record("attn.probs") as maps:
            per_pos = model.per_position_loss(ev.idx, ev.targets)
        return {"eval_loss": pattern_losses(per_pos, ev).astype(float),  # (4,), LOSS_KEYS
                "scores": scores_from_maps(torch.stack(maps), ev).numpy().astype(float),
                "ablation": np.asarray(ablation(model, ev, chunk=None)[0], dtype=float),
                "correlations": np.asarray(head_output_correlations(model, ev), dtype=float)}


def check_weights(now: dict, stored: Run, exact: bool) -> dict:
    """How far the weights' live evaluation (`final_state`) is from the stored run's end, per
    quantity, against what is allowed: the stored rounding, plus OTHER_NUMERICS when this
    machine's CPU numerics differ from the producer's. {"diff": {...}, "allowed": {...}, "ok"}."""
    ref = {"eval_loss": stored.eval_loss[-1], "scores": stored.scores[-1],
           "ablation": stored.ablation, "correlations": stored.correlations}
    diff, allowed = {}, {}
    for k, r in ref.items():
        a, b = np.asarray(now[k], dtype=float), np.asarray(r, dtype=float)
        both = ~(np.isnan(a) & np.isnan(b))  # a pattern absent from the batch is NaN in both
        diff[k] = float(np.abs(a - b)[both].max()) if both.any() else 0.0
        allowed[k] = STORED_ROUNDING[k] * 1.001 + (0 if exact else OTHER_NUMERICS)
    return {"diff": diff, "allowed": allowed, "ok": all(diff[k] <= allowed[k] for k in diff)}


def _sweep_entry(settings: S.Settings):
    from andrea_edu.heads.sweep import DATA_NAME, load_sweep
    path = find_data(DATA_NAME, verify=False)  # load_sweep checks the manifest
    if path is None:
        return None, None
    prov, runs = load_sweep(path)
    stored = runs.get((settings.n_head, settings.seed))
    return (prov, stored) if stored is not None and stored.settings == settings else (None, None)


def chapter_run(settings: S.Settings, progress: bool = True) -> tuple[Run, dict | None]:
    """(run, checks). For the committed run's settings, when the sweep and the weights are at
    hand: the sweep's entry with the model loaded and its final state (losses, scores, ablation,
    correlations) evaluated now from the weights, and checks = {"weights": check_weights(...),
    "exact": whether this machine has the producer's CPU numerics, "provenance": the sweep's,
    "weights_path"}; DataFileError
    (one line) when the weights are not the entry's run. For any other settings (fast mode, a
    change), or when a file is missing: training.train_cached(settings), checks None."""
    from andrea_edu.heads import text_runs as TR
    if not isinstance(settings, S.Settings):
        raise TypeError(f"settings must be a training.Settings, got {type(settings).__name__}")
    if settings != committed_settings():
        return S.train_cached(settings, progress=progress), None
    prov, stored = _sweep_entry(settings)
    toy_path = find_data(TR.TOY_FILE, verify=False)  # load_toy checks it
    if stored is None or toy_path is None:
        print(f"{'the sweep entry' if stored is None else TR.TOY_FILE} not found "
              f"({where_looked(TR.TOY_FILE)}): training the run now", flush=True)
        return S.train_cached(settings, progress=progress), None
    toy_s, _, model, _ = TR.load_toy(toy_path)
    same = {"eval_every", "n_probes"}  # evaluations and probes draw no randomness
    if {k: v for k, v in dataclasses.asdict(toy_s).items() if k not in same} != \
            {k: v for k, v in dataclasses.asdict(settings).items() if k not in same}:
        raise DataFileError(f"{toy_path}: its settings are not the chapter run's "
                              f"({toy_s} vs {settings})")
    exact = same_cpu_numerics(cpu_provenance(), prov.get("cpu_numerics"))
    now = final_state(model, settings)
    weights = check_weights(now, stored, exact)
    if not weights["ok"]:
        worst = max(weights["diff"], key=lambda k: weights["diff"][k] / weights["allowed"][k])
        raise DataFileError(f"{toy_path}: the weights evaluated now differ from the sweep "
                              f"entry's final {worst} by {weights['diff'][worst]:.2g} (allowed "
                              f"{weights['allowed'][worst]:.2g}): not the run the sweep records")
    run = dataclasses.replace(
        stored, eval_loss=np.vstack([stored.eval_loss[:-1], now["eval_loss"]]),
        scores=np.concatenate([stored.scores[:-1], now["scores"][None]]),
        ablation=now["ablation"], correlations=now["correlations"], model=model)
    return run, {"weights": weights, "exact": exact, "provenance": prov,
                 "weights_path": toy_path}
