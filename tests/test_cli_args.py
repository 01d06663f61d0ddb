"""Every command line checks its arguments before any work: one line naming the flag and what is
allowed, exit status 2; --help describes every option (what it does in words of its own, its
default, its choices); an all-skipped bench run exits 1."""
from __future__ import annotations

import argparse
import json
import re
import shutil
from pathlib import Path

import pytest
import torch

from andrea_lab.bench import cli as bench_cli
from andrea_edu.bench import runner
from andrea_lab.bench import gpucheck
from andrea_edu.heads import sweep
from andrea_lab import make_sweep as lab_sweep
from andrea_edu.pipeline import timing as pipeline_timing
from andrea_lab import pipeline_timing as lab_timing

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture()
def no_work(monkeypatch):
    """Any real work fails the test: the refusals must come first."""
    def boom(*a, **k):
        raise AssertionError("work started before the arguments were checked")
    monkeypatch.setattr(runner._Runner, "check", boom)
    monkeypatch.setattr(sweep, "run_sweep", boom)
    monkeypatch.setattr(lab_sweep, "make_runs", boom)
    monkeypatch.setattr(pipeline_timing, "time_steps", boom)
    monkeypatch.setattr(gpucheck, "run_sweep", boom)


def _one_line(capsys, *words):
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    for w in words:
        assert w in err, err
    return err


BENCH_BAD = [(["--repeats", "-3"], "--repeats", "1..100000"), (["--repeats", "0"], "--repeats", "1..100000"),
             (["--warmup", "-1"], "--warmup", "0..1000"), (["--threads", "-2"], "--threads", "in 1.."),
             (["--threads", "0"], "--threads", "in 1.."), (["--budget-s", "-1"], "--budget-s", "> 0"),
             (["--budget-s", "nan"], "--budget-s", "finite")]


@pytest.mark.parametrize("extra, flag, allowed", BENCH_BAD)
def test_bench_refuses_bad_numbers(no_work, capsys, tmp_path, extra, flag, allowed):
    assert bench_cli.main(["all", "--out", str(tmp_path), *extra]) == 2
    _one_line(capsys, flag, allowed)


def test_bench_refuses_unusable_out_and_missing_gpu(no_work, capsys, tmp_path):
    f = tmp_path / "file"
    f.write_text("x")
    assert bench_cli.main(["layout", "--out", str(f)]) == 2
    _one_line(capsys, "--out", "is a file")
    assert bench_cli.main(["layout", "--out", str(f / "below")]) == 2
    _one_line(capsys, "--out", "not a folder")
    if not torch.cuda.is_available():
        assert bench_cli.main(["layout", "--device", "cuda", "--out", str(tmp_path)]) == 2
        _one_line(capsys, "--device", "auto or cpu")


def test_bench_fast_does_not_replace_full_data(no_work, capsys, tmp_path):
    shutil.copy(REPO / "book" / "data" / "bench_layout_cpu.json", tmp_path)
    assert bench_cli.main(["layout", "--fast", "--device", "cpu", "--out", str(tmp_path)]) == 2
    _one_line(capsys, "--fast", "full-size", "--replace")


def test_bench_all_skipped_exits_nonzero_and_writes_nothing(capsys, tmp_path):
    assert bench_cli.main(["layout", "--fast", "--no-progress", "--budget-s", "1e-9",
                           "--out", str(tmp_path)]) == 1
    assert "nothing measured" in capsys.readouterr().err
    assert not list(tmp_path.glob("*.json"))


@pytest.mark.parametrize("argv, flag, allowed", [
    (["--n-heads", "3"], "--n-heads", "1 2 4 8 16 32 64"),
    (["--n-heads", "0"], "--n-heads", "divide"), (["--seeds", "-1"], "--seeds", "0..4294967295"),
    (["--workers", "0"], "--workers", "1.."), (["--out", "/"], "--out", "folder")])
def test_sweep_refuses_bad_arguments(no_work, capsys, argv, flag, allowed):
    assert lab_sweep.main(argv) == 2
    _one_line(capsys, flag, allowed)


@pytest.mark.parametrize("argv, flag", [
    (["-B", "0"], "-B"), (["-T", "0"], "-T"), (["-T", "100000"], "-T"),
    (["--repeats", "-1"], "--repeats"), (["--out", "/dev/null"], "--out")])
def test_pipeline_timing_refuses_bad_arguments(no_work, capsys, argv, flag):
    assert lab_timing.main(argv) == 2
    _one_line(capsys, flag)


def test_pipeline_timing_refuses_a_cuda_backend_on_the_cpu(no_work, capsys):
    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    assert lab_timing.main(["--backend", "cuda-wmma", "--device", "cpu"]) == 2
    _one_line(capsys, "--backend", "emulator")


def test_gpucheck_refuses_an_unusable_out(no_work, capsys, tmp_path):
    f = tmp_path / "file"
    f.write_text("x")
    assert gpucheck.main(["--out", str(f)]) == 2
    _one_line(capsys, "--out")


def _parsers():
    from andrea_edu.config import PRESETS
    from andrea_lab import execute_chapters as execute

    yield "bench", bench_cli._parser()
    yield "sweep", lab_sweep._parser()
    yield "pipeline.timing", lab_timing._parser(PRESETS)
    yield "execute", execute._parser()


_STOP = {"a", "an", "the", "of", "to", "in", "on", "for", "and", "or", "is", "be", "by", "with",
         "default", "none", "s"}


def help_problems(p: argparse.ArgumentParser) -> list[str]:
    """What a parser's --help leaves undescribed: per option, a help text that only restates the
    option's own name, a default the text does not give, choices it does not list."""
    out = []
    for a in p._actions:
        if isinstance(a, (argparse._HelpAction, argparse._SubParsersAction)):
            continue
        name = "/".join(a.option_strings) or a.dest
        text = (a.help or "") % {**vars(a), "prog": p.prog} if a.help else ""
        own = set(re.findall(r"[a-z]+", " ".join([*a.option_strings, a.dest]).lower()))
        words = set(re.findall(r"[a-z]+", text.lower())) - own - _STOP
        if len(words) < 3:
            out.append(f"{name}: help {a.help!r} does not say what the option does")
        shown = a.default not in (None, False, argparse.SUPPRESS) and not a.required
        if shown and not isinstance(a.default, bool):
            given = a.default if isinstance(a.default, (list, tuple)) else [a.default]
            if not all(str(g) in text or f"{g:g}" in text if isinstance(g, float) else
                       str(g) in text for g in given):
                out.append(f"{name}: the default {a.default!r} is not in its help")
        if a.choices is not None and not isinstance(a.choices, dict):
            metavar_shows = a.metavar is None  # argparse prints {a,b,c} itself
            if not metavar_shows and not all(str(c) in text for c in a.choices):
                out.append(f"{name}: its choices are neither shown nor in its help")
    return out


def test_help_problems_are_found_in_a_planted_parser():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=5, help="repeats")
    ap.add_argument("--device", default="cpu", help="where the timing runs, cpu or cuda")
    ap.add_argument("--mode", choices=["a", "b"], metavar="M", help="which of the two ways runs")
    ap.add_argument("--out", help="folder the results file is written to")
    assert help_problems(ap) == [
        "--repeats: help 'repeats' does not say what the option does",
        "--repeats: the default 5 is not in its help",
        "--mode: its choices are neither shown nor in its help"]


@pytest.mark.parametrize("name, ap", list(_parsers()),
                         ids=lambda x: x if isinstance(x, str) else "")
def test_help_describes_every_option(name, ap):
    parsers = [ap]
    for a in ap._actions:
        if isinstance(a, argparse._SubParsersAction):
            parsers += list(a.choices.values())
    problems = [f"{p.prog} {msg}" for p in parsers for msg in help_problems(p)]
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("module, argv, prog", [
    ("andrea_lab.pipeline_timing", ["--help"], "python -m andrea_lab.pipeline_timing"),
    ("andrea_lab.make_sweep", ["--help"], "python -m andrea_lab.make_sweep"),
    ("andrea_lab.bench", ["gpu-check", "--help"], "python -m andrea_lab.bench gpu-check"),
    ("andrea_lab.execute_chapters", ["--help"], "python -m andrea_lab.execute_chapters"),
])
def test_each_command_runs_from_its_home_once(module, argv, prog):
    """The commands live in their subpackages (the root's shims are gone). A timing command
    started with the CPU pins runs itself again unpinned: the parent must then exit with the
    child's status, not run a second time (its help printed once)."""
    import os
    import subprocess
    import sys

    from andrea_edu.env import PINNED_ISA

    env = {**os.environ, **PINNED_ISA, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    out = subprocess.run([sys.executable, "-m", module, *argv], capture_output=True, text=True,
                         env=env, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.count(f"usage: {prog}") == 1, out.stdout[:2000]
