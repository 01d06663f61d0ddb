"""Commands that write data: every output named after --out, written as one unit (all or
nothing), never replacing an existing file without --replace, every argument checked before any
work (exit 2, one line), a child killed by a signal reported in one line."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from andrea_edu import data as bookdata
from andrea_lab import process, store
from andrea_edu.heads import text_runs as TR
from andrea_edu.heads import text_training as TT
from andrea_lab.run_writers import save_run, toy_weights_path

REPO = Path(__file__).resolve().parents[1]
DATA = REPO / "book" / "data"


def _main(module: str, args, capsys, monkeypatch):
    """Run a command's main(argv) in this process (its checks come before any import-heavy
    work or training): (exit status, stderr)."""
    import importlib
    monkeypatch.chdir(REPO)
    rc = importlib.import_module(module).main(list(args))
    return rc, capsys.readouterr().err


def _one_line_exit_2(rc, err, *words):
    err = err.strip()
    assert rc == 2 and len(err.splitlines()) == 1, (rc, err)
    for w in words:
        assert w in err, err
    return err


# ---------------------------------------------------------------- the weights' name
def test_weights_are_named_after_the_run_file():
    assert TR.weights_path(Path("d/realtext_run.json")) == Path("d/realtext_model.pt")
    assert TR.weights_path(Path("d/my_experiment.json")) == Path("d/my_experiment_model.pt")
    assert toy_weights_path(Path("d/toy_lab_model.json")) == Path("d/toy_lab_model.pt")
    committed = json.loads((DATA / TR.RUN_FILE).read_text())["weights"]["file"]
    assert committed == TR.weights_path(DATA / TR.RUN_FILE).name  # the committed pair keeps its name


class _Run:  # what save_run reads of a run
    def __init__(self, model):
        self.model = model

    def to_dict(self):
        return {"schema": TR.SCHEMA, "x": 1, "provenance": {}}


def _stand_in(model) -> Any:  # a _Run passed where save_run expects a Run
    return _Run(model)


def _tiny_model():
    from andrea_edu.config import AndreaConfig
    from andrea_edu.model import AndreaModel
    return AndreaModel(AndreaConfig(d_model=8, n_head=2, n_layer=1, vocab_size=5, block_size=4))


def test_save_run_refuses_existing_files_and_writes_both_beside(tmp_path):
    path = tmp_path / "my_experiment.json"
    written = save_run(_stand_in(_tiny_model()), path)
    assert written == [tmp_path / "my_experiment_model.pt", path]
    d = json.loads(path.read_text())
    assert d["weights"]["file"] == "my_experiment_model.pt"
    before = {p: p.read_bytes() for p in written}
    with pytest.raises(FileExistsError, match="replace"):
        save_run(_stand_in(_tiny_model()), path)
    assert {p: p.read_bytes() for p in written} == before  # nothing touched
    save_run(_stand_in(_tiny_model()), path, replace=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == [bookdata.MANIFEST, "my_experiment.json",
                                                          "my_experiment_model.pt"]
    assert bookdata.manifest_problem(path) is None  # the pair is listed in the folder's manifest


def test_a_failed_unit_write_is_refused_and_leaves_no_temporary_file(tmp_path, monkeypatch):
    """The weights renamed, then the JSON's rename fails (a full disk): the manifest, rewritten
    last, still lists the old pair, so the new weights are refused in one line naming the folder
    and `git checkout -- <folder>`, the old JSON still reads, and no temporary file is left."""
    a, b = tmp_path / "w.pt", tmp_path / "r.json"
    store.write_files_as_unit([(a, lambda p: p.write_text("old a")), (b, lambda p: p.write_text("old b"))],
                              manifest=True)
    before = (tmp_path / bookdata.MANIFEST).read_bytes()
    real = os.replace

    def fail_on_json(src, dst):  # the weights are renamed, then the JSON's rename fails
        if str(dst).endswith("r.json"):
            raise OSError("disk full")
        return real(src, dst)
    monkeypatch.setattr(os, "replace", fail_on_json)
    with pytest.raises(OSError, match="disk full"):
        store.write_files_as_unit([(a, lambda p: p.write_text("new a")),
                                 (b, lambda p: p.write_text("new b"))])
    monkeypatch.setattr(os, "replace", real)
    assert (tmp_path / bookdata.MANIFEST).read_bytes() == before  # not committed
    assert a.read_text() == "new a" and b.read_text() == "old b"
    problem = bookdata.manifest_problem(a) or ""
    assert "differs from the sha256" in problem and f"git checkout -- {tmp_path}" in problem
    assert "\n" not in problem and bookdata.manifest_problem(b) is None
    assert sorted(p.name for p in tmp_path.iterdir()) == [bookdata.MANIFEST, "r.json", "w.pt"]


def test_a_writer_that_fails_before_the_renames_leaves_nothing(tmp_path):
    def boom(p):
        raise RuntimeError("training crashed while saving")
    with pytest.raises(RuntimeError):
        store.write_files_as_unit([(tmp_path / "w.pt", lambda p: p.write_text("w")),
                                 (tmp_path / "r.json", boom)])
    assert list(tmp_path.iterdir()) == []


def test_writers_keep_a_folders_manifest_current(tmp_path):
    (tmp_path / bookdata.MANIFEST).write_text("")
    path = store.write_json_atomic(tmp_path / "x.json", {"v": 1})
    assert bookdata.manifest_problem(path) is None and "x.json" in bookdata.read_manifest(tmp_path)
    path.write_text('{"v": 2}\n')  # edited behind the writer's back
    problem = bookdata.manifest_problem(path)
    assert problem is not None and "differs from the sha256" in problem


# ---------------------------------------------------------------- the real-text command
@pytest.mark.parametrize("args, words", [
    (["--out", "book/data/realtext_run.json", "--steps", "2"], ["exist", "--replace"]),
    (["--out", "/dev/null/x.json", "--steps", "2"], ["--out", "not a folder"]),
    (["--out", "x.json", "--steps", "0"], ["--steps", "1..1000000"]),
    (["--out", "x.json", "--steps", "-3"], ["--steps", "1..1000000"]),
    (["--out", "x.json", "--steps", str(10**12)], ["--steps", "1..1000000"]),
    (["--out", "x.json", "--settings", '{"steps": 1000000000}'], ["steps=1000000000 is above"]),
    (["--out", ""], ["--out", "empty"]),
    (["--recheck", "2", "--settings", "{bad"], ["--settings", "not valid JSON"]),
    (["--recheck", "2", "--settings", '{"stepz": 3}'], ["unknown key", "stepz"]),
    (["--recheck", "2", "--settings", '{"steps": "a"}'], ["steps", "integer"]),
    (["--recheck", "2", "--settings", '{"threads": 100000}'], ["threads", "CPU count"]),
    (["--recheck", "0"], ["--recheck"]),
])
def test_text_training_checks_every_argument_before_training(args, words, capsys, monkeypatch):
    before = {p.name: p.stat().st_mtime_ns for p in DATA.iterdir()}
    monkeypatch.setattr(TT, "train", None)  # any training would fail loudly
    _one_line_exit_2(*_main("andrea_lab.make_realtext_run", args, capsys, monkeypatch), *words)
    assert {p.name: p.stat().st_mtime_ns for p in DATA.iterdir()} == before
    assert not Path(REPO / "x.json").exists()


def test_sweep_command_refuses_to_replace_the_committed_sweep(capsys, monkeypatch):
    # named by hand: its default --out is andrea_runs/, never the book's data
    _one_line_exit_2(*_main("andrea_lab.make_sweep", ["--out", str(DATA / "specialization_sweep.json")],
                            capsys, monkeypatch), "exists", "--replace")


@pytest.mark.parametrize("args, words", [
    (["layout", "--threads", "100000"], ["--threads", "1.."]),
    (["layout", "--out", ""], ["--out", "empty"]),
])
def test_bench_checks_threads_and_out(args, words, capsys, monkeypatch):
    _one_line_exit_2(*_main("andrea_lab.bench.cli", args, capsys, monkeypatch), *words)


def test_a_child_killed_by_a_signal_is_reported_in_one_line(capfd):
    rc = subprocess.run([sys.executable, "-c",
                         "import os, signal; os.kill(os.getpid(), signal.SIGSEGV)"]).returncode
    assert rc == -signal.SIGSEGV
    assert process.child_status("python -m andrea_lab.bench", rc) == 128 + signal.SIGSEGV
    err = capfd.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "SIGSEGV" in err and "andrea_lab.bench" in err
    assert process.child_status("x", 0) == 0 and process.child_status("x", 2) == 2


def test_settings_from_json_and_check():
    s = TT.TextSettings.from_json('{"steps": 7}', base=TT.default_settings(False))
    assert s.steps == 7 and s.n_head == TT.TextSettings().n_head
    with pytest.raises(TT.SettingsError, match=r"n_head=3 does not divide d_model=128"):
        TT.TextSettings.from_json('{"n_head": 3}')
    with pytest.raises(TT.SettingsError, match="lr"):
        TT.TextSettings.from_json('{"lr": -1}')


def test_bench_refuses_to_replace_committed_results(capsys, monkeypatch, tmp_path):
    from andrea_lab.bench import cli
    from andrea_lab.bench.writer import write_results

    def no_measuring(*a, **k):
        raise AssertionError("measured before refusing")
    monkeypatch.setattr(cli.bench_cases, "run_suite", no_measuring)
    monkeypatch.delenv("ANDREA_DATA_DIR", raising=False)
    _one_line_exit_2(*_main("andrea_lab.bench.cli", ["layout", "--device", "cpu", "--out",
                                                     str(DATA)], capsys, monkeypatch),
                     "committed data", "--replace")
    assert store.default_out_dir() == REPO / "andrea_runs"  # the default is never book/data
    obj = json.loads((DATA / "bench_layout_cpu.json").read_text())
    with pytest.raises(FileExistsError, match="committed data"):
        write_results(obj, DATA)
    write_results(obj, tmp_path)  # anywhere else: written
    assert (tmp_path / "bench_layout_cpu.json").is_file()
