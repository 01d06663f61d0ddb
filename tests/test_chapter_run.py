"""The chapter's main run read from committed data (andrea_edu.heads.chapter_run): the weights and
the sweep entry make one run, each check fails on another run's numbers, other settings are
trained as before, and the run's first steps train alike again (andrea_lab.make_sweep.recheck)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from andrea_edu.data import DataFileError
import torch

from andrea_edu.heads import chapter_run as CR
from andrea_edu.heads import text_runs as TR
from andrea_edu.heads import training as S
from andrea_edu.heads.sweep import load_sweep
from andrea_lab import make_sweep as MS

DATA = Path(__file__).resolve().parents[1] / "book" / "data"


@pytest.fixture(scope="module")
def stored():
    _, runs = load_sweep(DATA / "specialization_sweep.json")
    return runs[(4, S.CHAPTER_SEED)]


@pytest.fixture(scope="module")
def weights_now(stored):
    _, _, model, _ = TR.load_toy(DATA / TR.TOY_FILE)
    return model, CR.final_state(model, stored.settings)


def test_the_committed_settings_are_the_chapters_and_the_sweeps(stored):
    assert CR.committed_settings() == stored.settings
    assert CR.committed_settings() == S.default_settings(4, seed=S.CHAPTER_SEED, fast=False)


def test_the_committed_weights_give_the_entrys_final_state(stored, weights_now):
    _, now = weights_now
    ok = CR.check_weights(now, stored, exact=False)
    assert ok["ok"], ok
    assert set(ok["diff"]) == {"eval_loss", "scores", "ablation", "correlations"}


def test_another_runs_weights_are_told_apart(stored, weights_now):
    _, _, other, _ = TR.load_toy(DATA / TR.TOY_FILE)  # a fresh copy, changed below
    with torch.no_grad():  # one head's W_O rows scaled by 1.01: another run, nearly the same
        other.blocks[1].attn.W_O[16:32] *= 1.01
    got = CR.check_weights(CR.final_state(other, stored.settings), stored, exact=False)
    assert not got["ok"], got


def test_weights_that_are_not_the_entrys_stop_the_chapter_in_one_line(monkeypatch, stored):
    def off(model, s):
        return {"eval_loss": stored.eval_loss[-1] + 0.01, "scores": stored.scores[-1],
                "ablation": stored.ablation, "correlations": stored.correlations}
    monkeypatch.setattr(CR, "final_state", off)
    monkeypatch.setattr(S, "train", lambda *a, **k: pytest.fail("trained before the check"))
    with pytest.raises(DataFileError) as e:
        CR.chapter_run(CR.committed_settings(), progress=False)
    assert "eval_loss" in str(e.value) and "\n" not in str(e.value)


def test_the_assembled_run_is_the_entry_with_its_model(stored):
    run, checks = CR.chapter_run(CR.committed_settings(), progress=False)
    assert checks is not None and checks["weights"]["ok"] and "retrain" not in checks
    assert run.model is not None and run.settings == stored.settings
    assert np.array_equal(run.scores[:-1], stored.scores[:-1])  # the history is the entry's
    assert np.abs(run.scores[-1] - stored.scores[-1]).max() <= 5e-4 + CR.OTHER_NUMERICS
    assert run.grad_norm is not None
    assert len(run.probes) == stored.settings.n_probes and run.grad_norm.shape[0] == 10


def test_the_chapters_run_trains_alike_again_for_its_first_steps(stored):
    """The re-check the chapter once ran live (now the laboratory's: andrea_lab.make_sweep):
    the committed run's first steps, trained again, against its sweep entry."""
    prov, _ = load_sweep(DATA / "specialization_sweep.json")
    live = S.train(CR.committed_settings(), progress=False, stop_after=5)
    chk = MS.recheck(live, stored, prov, 5)
    assert chk["ok"] and chk["first_steps"] == 5, chk


def test_other_settings_are_trained_not_read():
    s = S.Settings(n_head=2, d_model=16, n_layer=1, seq_len=12, batch_size=4, steps=3,
                   eval_every=1, eval_batch=8, n_probes=1, probe_batch=4)
    run, checks = CR.chapter_run(s, progress=False)
    assert checks is None and run.model is not None and len(run.train_loss) == 3


def test_the_gradient_figure_draws_a_stored_run_per_probe_window(stored):
    from andrea_edu.figures import why_heads_specialize as figs
    fig = figs.fig_grad_norms(stored)
    ax = fig.axes[0]
    assert len(ax.patches) == 8  # one staircase per head (2 layers x 4)
    assert "probe window, 150 steps" in ax.get_ylabel()
    from andrea_edu.figures.verdicts import VERDICTS
    from andrea_edu.heads.gradient_pressure import gradient_pressure
    fig = figs.fig_grad_norms(stored, gradient_pressure(stored))  # no verdict in a figure title
    titles = [ax.get_title() for ax in fig.axes] + [fig._suptitle.get_text()]
    assert len(fig.axes) == 2 and not [t for t in titles for v in VERDICTS if v in t], titles
