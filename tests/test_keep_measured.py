"""Validate before work, keep what was measured: a case budget that lowers the repeats is
recorded and accepted; a run stopped after measuring saves what it measured, labelled
incomplete, apart from the data; nothing is replaced."""
from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from andrea_edu.bench import results as R, timing
from andrea_lab.bench import cli

DATA = Path(__file__).resolve().parents[1] / "book" / "data"


def test_a_budget_that_lowered_the_repeats_is_accepted_and_more_than_asked_is_not():
    obj = json.loads((DATA / "bench_layout_cpu.json").read_text())
    asked = copy.deepcopy(obj)
    asked["settings"]["repeats"] = 500  # `bench layout --repeats 500`: the budget ran fewer
    R.validate_result(asked)
    fewer = copy.deepcopy(obj)
    fewer["settings"]["repeats"] = 1
    with pytest.raises(ValueError, match="at most the repeats asked for"):
        R.validate_result(fewer)


def test_a_run_stopped_after_measuring_saves_what_it_measured(tmp_path, monkeypatch, capsys):
    import torch

    from andrea_edu.bench import suites
    from andrea_edu.bench.runner import _params

    def one_case_then_sigterm(r, fast, progress):  # the real runner, a tiny case, then a stop
        x = torch.ones(4)
        for case in ("c1", "c2"):
            r.check(case, "reference", _params(dtype_t=torch.float32), lambda: (x * 1, {}), x,
                    flops=4.0)
            if case == "c2":
                raise KeyboardInterrupt("signal SIGTERM")
            r.time_queued()
    monkeypatch.setattr(suites, "_suites", lambda: {"layout": one_case_then_sigterm})
    rc = cli.main(["layout", "--no-progress", "--device", "cpu", "--out", str(tmp_path),
                   "--repeats", "3", "--warmup", "0"])
    err = capsys.readouterr().err
    assert rc == 1 and "labelled incomplete" in err and "nothing replaced" in err, err
    assert len(err.strip().splitlines()) == 1
    assert not (tmp_path / "bench_layout_cpu.json").exists()  # never a results file
    part = json.loads((tmp_path / "incomplete_bench_layout_cpu.json").read_text())
    assert "KeyboardInterrupt" in part["incomplete"]
    c1, c2 = part["records"]
    from andrea_edu.bench.timing import CPU_MIN_REPEATS  # a CPU timing takes at least this many
    assert c1["status"] == "ok" and c1["repeats"] == max(3, CPU_MIN_REPEATS)
    assert c1["median_ms"] is not None
    assert c2["status"] == "skipped" and "stopped" in c2["reason"]


@pytest.mark.parametrize("planted", ["error", "sigterm"])
def test_pipeline_timing_stopped_after_a_measured_pass_saves_it_labelled_incomplete(
        planted, tmp_path, monkeypatch, capsys):
    """A failure (or SIGTERM) in the second timed pass of `python -m andrea_lab.pipeline_timing`
    (tiny: ANDREA-12M at T=8): the first pass is saved apart, labelled incomplete, and no
    pipeline_cpu.json is written; one line says so."""
    import os
    import signal

    from andrea_edu.pipeline import timing as PT
    from andrea_lab import pipeline_timing as lab_pt
    real, calls = PT._time_forward, []

    def second_pass_fails(model, idx, dev):  # called once per timed pass, after its steps
        calls.append(1)
        if len(calls) == 2:
            if planted == "sigterm":
                os.kill(os.getpid(), signal.SIGTERM)
            raise RuntimeError("planted failure")
        return real(model, idx, dev)
    monkeypatch.setattr(PT, "_time_forward", second_pass_fails)
    rc = lab_pt.main(["--config", "ANDREA-12M", "-T", "8", "--repeats", "3", "--device", "cpu",
                  "--backend", "reference", "--out", str(tmp_path)])
    err = capsys.readouterr().err.strip()
    assert rc == (128 + signal.SIGTERM if planted == "sigterm" else 1), err
    assert len(err.splitlines()) == 1 and "labelled incomplete" in err and "not written" in err
    assert ("stopped by SIGTERM" if planted == "sigterm" else "planted failure") in err, err
    assert not (tmp_path / "pipeline_cpu.json").exists()
    part = json.loads((tmp_path / "incomplete_pipeline_cpu.json").read_text())
    assert part["incomplete"] and part["repeats"] == 1 and part["steps"], part["incomplete"]
    assert all(s["min_ms"] == s["median_ms"] for s in part["steps"])  # one pass each
    assert PT.load_pipeline_timing("cpu", data_dir_=tmp_path) is None  # never read as data
