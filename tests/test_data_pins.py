"""The committed data's pins (andrea_edu/data_pins.py): a checkout's book/data cannot change
silently, even with SHA256SUMS regenerated over the change; a folder of synthetic data is not
pinned; new data is accepted only by a code change (scripts/pin_data.py, scripts/land_gpu_out.py).
Each test reads one small file or copies a few: well under a second."""
from __future__ import annotations

import hashlib
import importlib.util
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from andrea_edu import data_pins, env
from andrea_edu import data as bookdata
from andrea_edu.data import MANIFEST, DataFileError
from andrea_lab import pin_writer
from andrea_lab.store import seal_folder
from andrea_edu.heads import text_runs as TR

REPO = Path(__file__).resolve().parents[1]
DATA = REPO / "book" / "data"


def _script():
    spec = importlib.util.spec_from_file_location("_pin_data", REPO / "scripts" / "pin_data.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _checkout(tmp: Path, names) -> Path:
    """A clone's shape: <tmp>/repo/andrea_edu/data_pins.py beside <tmp>/repo/book/data."""
    (tmp / "repo" / "andrea_edu").mkdir(parents=True)
    (tmp / "repo" / "andrea_edu" / "data_pins.py").write_text("")
    data = tmp / "repo" / "book" / "data"
    data.mkdir(parents=True)
    for n in names:
        shutil.copy(DATA / n, data / n)
    seal_folder(data)
    return data


def test_the_committed_folder_is_pinned_by_its_place_and_synthetic_folders_are_not(tmp_path):
    assert data_pins.pinned(DATA) and not (DATA / data_pins.MARKER).exists()
    assert data_pins.committed_folder() == DATA
    assert not data_pins.pinned(tmp_path)
    (tmp_path / "book" / "data").mkdir(parents=True)  # book/data, but in no checkout
    assert not data_pins.pinned(tmp_path / "book" / "data")
    assert data_pins.pinned(_checkout(tmp_path, []))
    pin_writer.pin_folder(tmp_path)
    assert data_pins.pinned(tmp_path)
    # a synthetic folder the tests build and seal reads as before
    (tmp_path / "x").mkdir()
    (tmp_path / "x" / "realtext_run.json").write_text("{}")
    seal_folder(tmp_path / "x")
    assert bookdata.manifest_problem(tmp_path / "x" / "realtext_run.json") is None


def test_every_committed_file_matches_its_pin_and_the_check_command_says_so(capsys):
    assert data_pins.PINS == bookdata.read_manifest(DATA, required=True)
    for name in data_pins.PINS:
        assert bookdata.manifest_problem(DATA / name) is None
    assert bookdata.listed_but_missing(DATA, "*") is None
    assert _script().main([]) == 0
    assert "all 15 files match their pins" in capsys.readouterr().out


def test_a_regenerated_manifest_does_not_vouch_for_a_changed_committed_file(tmp_path,
                                                                          monkeypatch):
    """The issue's head-score swap in a clone's book/data, SHA256SUMS regenerated over it."""
    data = _checkout(tmp_path, ["realtext_run.json", "realtext_model.pt"])
    monkeypatch.setenv(bookdata.DATA_ENV, str(data))
    assert TR.load_run(data / "realtext_run.json").model is not None  # as committed: read
    d = json.loads((data / "realtext_run.json").read_text())
    last = d["scores"][-1][1]
    flat = np.array(last, dtype=float)
    (a, b), (c, e) = np.unravel_index(np.argsort(flat, axis=None)[[-1, 0]], flat.shape)
    last[a][b], last[c][e] = last[c][e], last[a][b]
    (data / "realtext_run.json").write_text(json.dumps(d))
    seal_folder(data)  # sha256sum over the damage
    with pytest.raises(DataFileError) as err:
        TR.load_run(data / "realtext_run.json")
    msg = str(err.value)
    assert "\n" not in msg and msg.startswith(str(data / "realtext_run.json")), msg
    for words in ("differs from its pin in andrea_edu/data_pins.py", "git checkout --",
                  "scripts/pin_data.py --accept"):
        assert words in msg, msg


def test_a_file_added_or_deleted_by_hand_is_refused(tmp_path, monkeypatch):
    data = _checkout(tmp_path, ["bench_layout_cpu.json", "toy_lab_model.json",
                                "toy_lab_model.pt"])
    monkeypatch.setenv(bookdata.DATA_ENV, str(data))
    from andrea_edu.bench import results as R
    assert R.load_results("layout", "cpu") is not None
    shutil.copy(DATA / "bench_layout_cpu.json", data / "bench_layout_my-gpu.json")
    seal_folder(data)  # listed, but pinned by no one
    with pytest.raises(DataFileError, match="has no pin in andrea_edu/data_pins.py"):
        R.read_results_file(data / "bench_layout_my-gpu.json")
    (data / "toy_lab_model.json").unlink()
    seal_folder(data)  # its line gone with it: the pins still know the file
    with pytest.raises(DataFileError, match="pinned in andrea_edu/data_pins.py but missing") as e:
        bookdata.find_data("toy_lab_model.json", verify=False)
    assert "\n" not in str(e.value) and str(data / "toy_lab_model.json") in str(e.value)


@pytest.fixture
def pin_copy(tmp_path, monkeypatch) -> Path:
    """pin_writer.accept() writes a copy of data_pins.py, and the table in memory is a copy too."""
    copy = tmp_path / "data_pins_copy.py"
    shutil.copy(data_pins.PIN_FILE, copy)
    monkeypatch.setattr(data_pins, "PIN_FILE", copy)
    monkeypatch.setattr(data_pins, "PINS", dict(data_pins.PINS))
    return copy


def _table(source: Path) -> dict:
    ns: dict = {"__file__": str(source), "__name__": "data_pins_copy"}
    exec(compile(source.read_text(), str(source), "exec"), ns)  # the rewritten module runs
    return ns["PINS"]


def test_accept_rewrites_the_table_in_code_and_nothing_else(tmp_path, pin_copy):
    folder = tmp_path / "data"
    folder.mkdir()
    pin_writer.pin_folder(folder)
    before = pin_copy.read_text()
    assert pin_writer.accept([]) == []
    assert pin_copy.read_text() == before  # nothing to pin: the same text
    new = folder / "bench_layout_my-gpu.json"
    new.write_text('{"x": 1}\n')
    seal_folder(folder)
    assert "has no pin" in (bookdata.manifest_problem(new) or "")  # refused until pinned
    lines = pin_writer.accept([new])
    assert lines[0].startswith("bench_layout_my-gpu.json: pinned")
    sha = hashlib.sha256(new.read_bytes()).hexdigest()
    assert _table(pin_copy) == data_pins.PINS and data_pins.PINS[new.name] == sha
    assert bookdata.manifest_problem(new) is None
    changed = pin_copy.read_text().splitlines()
    assert [ln for ln in changed if ln not in before.splitlines()] == \
        [f'    "{new.name}": "{sha}",']  # one line of code: what the review sees
    new.unlink()
    assert pin_writer.accept([new]) == [f"{new.name}: pin removed (the file is gone)"]
    assert pin_copy.read_text() == before
    with pytest.raises(ValueError, match="no such file, and no pin"):
        pin_writer.accept([new])
    with pytest.raises(ValueError, match="not in the committed data folder"):
        pin_writer.accept([tmp_path / "elsewhere.json"])


def test_pin_data_accepts_only_what_the_manifest_lists(tmp_path, pin_copy, monkeypatch, capsys):
    folder = tmp_path / "data"
    folder.mkdir()
    pin_writer.pin_folder(folder)
    f = folder / "pipeline_my-gpu.json"
    f.write_text("{}\n")
    seal_folder(folder)
    f.write_text('{"edited": true}\n')  # edited after the manifest was written
    before = pin_copy.read_text()
    assert _script().main(["--accept", str(f)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "differs from" in err and MANIFEST in err, err
    assert pin_copy.read_text() == before
    seal_folder(folder)
    assert _script().main(["--accept", str(f)]) == 0
    assert "pipeline_my-gpu.json" in _table(pin_copy)


# ---------------------------------------------------------------- issue 42: 4, 5, 6
def test_pins_apply_through_a_symlinked_book_data(tmp_path, monkeypatch):
    """A checkout whose book/data is a symbolic link to a folder of another name: the pins
    still apply (what the book reads is pinned, wherever its bytes lie). The same values
    re-serialized and re-manifested pass every value check, so only the pin refuses them."""
    real = tmp_path / "elsewhere" / "somefolder"
    real.mkdir(parents=True)
    for n in ("realtext_run.json", "realtext_model.pt"):
        shutil.copy(DATA / n, real / n)
    d = json.loads((real / "realtext_run.json").read_text())
    (real / "realtext_run.json").write_text(json.dumps(d, indent=2) + "\n")  # other bytes
    seal_folder(real)
    (tmp_path / "repo" / "andrea_edu").mkdir(parents=True)
    (tmp_path / "repo" / "andrea_edu" / "data_pins.py").write_text("")
    (tmp_path / "repo" / "book").mkdir()
    link = tmp_path / "repo" / "book" / "data"
    link.symlink_to(real, target_is_directory=True)
    assert data_pins.pinned(link)
    monkeypatch.setenv(bookdata.DATA_ENV, str(link))
    with pytest.raises(DataFileError, match="differs from its pin"):
        bookdata.load("realtext_run")


def test_pin_data_refuses_another_checkouts_file(tmp_path, pin_copy, capsys):
    """`pin_data.py --accept /elsewhere/book/data/F` (a data_pins.py beside it there) does not
    rewrite this checkout's pins from that checkout's file."""
    data = _checkout(tmp_path, ["toy_lab_model.json"])
    f = data / "toy_lab_model.json"
    f.write_text(f.read_text() + " ")
    seal_folder(data)
    before = pin_copy.read_text()
    assert _script().main(["--accept", str(f)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "another checkout" in err, err
    assert pin_copy.read_text() == before
    with pytest.raises(ValueError, match="another checkout"):
        pin_writer.accept([f])
    assert pin_copy.read_text() == before


def test_a_crlf_converted_file_is_named_with_a_remedy_that_works(tmp_path):
    """What core.autocrlf=true does to a clone: every line ending becomes CRLF. The refusal says
    so (not 'damaged'), and names `git -c core.autocrlf=false checkout`."""
    data = _checkout(tmp_path, ["toy_lab_model.json"])
    f = data / "toy_lab_model.json"
    f.write_bytes(f.read_bytes().replace(b"\n", b"\r\n"))
    assert "differs from its pin" in (bookdata.manifest_problem(f) or "")  # the book refuses it
    assert "git -c core.autocrlf=false checkout" in (pin_writer.diagnose(f) or "")  # and why
    (data / MANIFEST).write_bytes((data / MANIFEST).read_bytes().replace(b"\n", b"\r\n"))
    with pytest.raises(DataFileError, match="Windows line endings.*autocrlf=false checkout"):
        bookdata.read_manifest(data)


def test_a_clone_with_autocrlf_keeps_the_data_bytes(tmp_path):
    """The repository's .gitattributes keeps book/data byte-exact in a clone made with
    core.autocrlf=true (Git for Windows' default); the remedy the messages name restores a
    clone converted before."""
    import subprocess

    def git(*a, cwd):
        return subprocess.run(["git", "-c", "user.email=t@t", "-c", "user.name=t", *a], cwd=cwd,
                              capture_output=True, text=True, check=True, timeout=60)
    src = tmp_path / "src"
    (src / "book" / "data").mkdir(parents=True)
    shutil.copy(DATA / "toy_lab_model.json", src / "book" / "data")
    git("init", "-q", cwd=src)
    git("add", "book", cwd=src)
    git("commit", "-qm", "data", cwd=src)
    git("clone", "-q", "-c", "core.autocrlf=true", str(src), str(tmp_path / "before"), cwd=tmp_path)
    converted = tmp_path / "before" / "book" / "data" / "toy_lab_model.json"
    assert b"\r\n" in converted.read_bytes()  # what the issue saw
    git("-c", "core.autocrlf=false", "checkout", "--", "book/data", cwd=tmp_path / "before")
    assert converted.read_bytes() == (DATA / "toy_lab_model.json").read_bytes()  # the remedy
    shutil.copy(REPO / ".gitattributes", src)
    git("add", ".gitattributes", cwd=src)
    git("commit", "-qm", "attributes", cwd=src)
    git("clone", "-q", "-c", "core.autocrlf=true", str(src), str(tmp_path / "after"), cwd=tmp_path)
    assert (tmp_path / "after" / "book" / "data" / "toy_lab_model.json").read_bytes() == \
        (DATA / "toy_lab_model.json").read_bytes()
