"""One run type for both laboratories (issue 31): `heads.run.Run` is what the toy lab and the
real-text lab train, save and load, and its JSON record reproduces the committed files key for key
and value for value: the toy format (the sweep's runs) and the real-text format (the run JSON,
less the weights entry the writer adds)."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from andrea_edu.heads import text_runs, training
from andrea_edu.heads.run import Run
from andrea_lab import path_ablation

DATA = Path(__file__).resolve().parents[1] / "book" / "data"


def _sweep_records() -> list[dict]:
    return json.loads((DATA / "specialization_sweep.json").read_text())["runs"]


def test_every_committed_toy_record_is_reproduced_by_the_one_run_type():
    records = _sweep_records()
    assert len(records) >= 9  # the sweep: n_head 1, 2, 4, 8, 16 x seeds
    for d in records:
        run = Run.from_dict(d, training.Settings(**d["settings"]))
        assert run.lab == "toy" and isinstance(run.settings, training.Settings)
        # the sweep file adds its grid keys beside the run's own record
        assert run.to_dict() == {k: v for k, v in d.items() if k not in ("n_head", "seed")}


def test_the_committed_real_text_record_is_reproduced_by_the_one_run_type():
    d = json.loads((DATA / text_runs.RUN_FILE).read_text())
    loaded = text_runs.load_run(DATA / text_runs.RUN_FILE, with_model=False)
    read = Run.from_dict(d, text_runs.TextSettings(**d["settings"]))
    assert type(loaded) is Run and loaded.lab == read.lab == "text"
    want = {k: v for k, v in d.items() if k != "weights"}
    assert loaded.to_dict() == want and read.to_dict() == want
    assert loaded.ablation_se is not None and read.ablation_se is not None
    for a, b in ((loaded.baseline, read.baseline), (loaded.scores, read.scores),
                 (loaded.ablation_se, read.ablation_se)):
        assert np.array_equal(a, b, equal_nan=True)


def test_the_toy_baseline_is_its_chance_scores_by_name():
    d = _sweep_records()[0]
    run = Run.from_dict(d, training.Settings(**d["settings"]))
    assert run.chance == d["chance"]
    assert list(run.chance) == list(training.PATTERN_NAMES)


def test_a_lab_specific_reading_refuses_the_other_labs_run():
    d = _sweep_records()[0]
    toy = Run.from_dict(d, training.Settings(**d["settings"]))
    with pytest.raises(ValueError, match="no ablation standard errors"):
        toy.summary(0.01)
    with pytest.raises(ValueError, match="run: a real-text run .* this is a toy run"):
        path_ablation.ablation_windows(toy, corpus=None)  # type: ignore[arg-type]
