"""The manifest (SHA256SUMS) fails closed: parsed strictly, required where the book reads data,
every file listed; its writers take the folder's lock; a unit (weights + JSON + manifest entry)
is all or nothing under kill -9 at any point, and nothing of the writer is left behind."""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from andrea_edu import data as bookdata
from andrea_lab import store
from andrea_edu.data import MANIFEST, DataFileError

REPO = Path(__file__).resolve().parents[1]
DATA = REPO / "book" / "data"
ENV = {**os.environ, "PYTHONPATH": str(REPO)}


def _sha(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


# ---------------------------------------------------------------- strict parsing
@pytest.mark.parametrize("cut", [700, 65, 1])
def test_a_manifest_cut_mid_line_is_an_error_naming_its_line(tmp_path, cut):
    (tmp_path / MANIFEST).write_bytes((DATA / MANIFEST).read_bytes()[:cut])
    with pytest.raises(DataFileError, match=r"SHA256SUMS: line \d+ is cut short") as e:
        bookdata.read_manifest(tmp_path)
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("line, words", [
    ("0" * 63 + "  x.json\n", "line 1 is not"),
    ("0" * 64 + " x.json\n", "line 1 is not"),
    ("0" * 64 + "  \n", "line 1 names '', which is empty"),
    ("0" * 64 + "  sub/x.json\n", "line 1 names 'sub/x.json', which names a folder"),
    ("0" * 64 + "  ../victim.ipynb\n", "line 1 names '../victim.ipynb', which names a folder"),
    ("0" * 64 + "  /etc/passwd\n", "line 1 names '/etc/passwd', which names a folder"),
    ("0" * 64 + "  ..\\x.json\n", "which names a folder"),
    ("0" * 64 + "  C:x.json\n", "which names a folder"),
    ("0" * 64 + "  ..\n", "line 1 names '..', which is '..', a folder"),
    ("0" * 64 + "  x\ry.json\n", "holds the control character '\\\\r'"),
    ("0" * 64 + "  x\x1b[2Jy.json\n", "holds the control character"),
    ("0" * 64 + "  x\u2028y.json\n", "holds the control character"),
    ("0" * 64 + "   x.json\n", "begins or ends with a space"),
    ("0" * 64 + "  " + "x" * 256 + "\n", "longer than 255 bytes"),
    ("A" * 64 + "  x.json\n", "line 1 is not"),
    ("\n", "line 1 is not"),
    ("0" * 64 + "  x.json\n" + "1" * 64 + "  x.json\n", "line 2 lists x.json a second time"),
    ("0" * 64 + "  x.json\r\n", "Windows line endings .CRLF.: git converted"),
])
def test_a_malformed_manifest_is_an_error_naming_its_line(tmp_path, line, words):
    (tmp_path / MANIFEST).write_text(line, newline="")
    with pytest.raises(DataFileError, match=words):
        bookdata.read_manifest(tmp_path)


def test_the_committed_manifest_parses_and_lists_every_data_file():
    sums = bookdata.read_manifest(DATA, required=True)
    assert sorted(sums) == sorted(p.name for p in DATA.iterdir()
                                  if p.name != MANIFEST and not p.name.startswith("."))
    assert all(_sha(DATA / n) == h for n, h in sums.items())


def _copy_data(tmp: Path, names) -> Path:
    for n in names:
        shutil.copy(DATA / n, tmp / n)
    return tmp


@pytest.mark.parametrize("state", ["deleted", "truncated", "missing a line", "intact"])
def test_where_the_book_reads_data_the_manifest_is_required(tmp_path, monkeypatch, state):
    from andrea_edu.bench import results as R
    _copy_data(tmp_path, ["bench_layout_cpu.json"])
    text = (DATA / MANIFEST).read_text()
    if state == "truncated":
        (tmp_path / MANIFEST).write_text(text[:700])
    elif state == "missing a line":
        (tmp_path / MANIFEST).write_text("".join(ln for ln in text.splitlines(True)
                                                 if "bench_layout_cpu.json" not in ln))
    elif state == "intact":
        shutil.copy(DATA / MANIFEST, tmp_path / MANIFEST)
    monkeypatch.setenv("ANDREA_DATA_DIR", str(tmp_path))
    if state == "intact":
        assert R.load_results("layout", "cpu") is not None
        return
    with pytest.raises(DataFileError) as e:
        R.load_results("layout", "cpu")
    msg = str(e.value)
    assert "\n" not in msg and str(tmp_path) in msg and MANIFEST in msg, msg
    want = {"deleted": "missing", "truncated": "cut short", "missing a line": "not listed"}[state]
    assert want in msg, msg


def test_a_scratch_folder_needs_no_manifest_but_a_listed_one_must_match(tmp_path):
    p = tmp_path / "x.json"
    p.write_text("{}")
    assert bookdata.manifest_problem(p) is None  # not a data folder: the loaders' value checks only
    store.seal_folder(tmp_path)
    assert bookdata.manifest_problem(p) is None
    (tmp_path / "y.json").write_text("{}")
    assert "not listed" in (bookdata.manifest_problem(tmp_path / "y.json") or "")


# ---------------------------------------------------------------- the lock
# the children load data.py and the lab's store.py alone (they import only the standard
# library): 50 ms, not torch's 2 s
_LOAD_ENV = ("import importlib.util as u, sys\n"
             "def _load(name, path):\n"
             "    s = u.spec_from_file_location(name, path); m = u.module_from_spec(s)\n"
             "    sys.modules[name] = m; s.loader.exec_module(m); return m\n"
             f"bookdata = _load('andrea_edu.data', {str(REPO / 'andrea_edu' / 'data.py')!r})\n"
             f"store = _load('andrea_lab.store', {str(REPO / 'andrea_lab' / 'store.py')!r})\n")
_WRITER = _LOAD_ENV + textwrap.dedent("""
    import sys
    from pathlib import Path
    write_json_atomic = store.write_json_atomic
    folder, who, n = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
    for i in range(n):
        write_json_atomic(folder / f"{who}_{i % 10}.json", {"who": who, "i": i}, manifest=True)
""")


def test_two_concurrent_writers_lose_no_manifest_entry(tmp_path):
    procs = [subprocess.Popen([sys.executable, "-c", _WRITER, str(tmp_path), w, "50"], env=ENV)
             for w in ("a", "b")]
    assert [p.wait(timeout=120) for p in procs] == [0, 0]
    sums = bookdata.read_manifest(tmp_path, required=True)
    files = sorted(p.name for p in tmp_path.iterdir() if p.name != MANIFEST)
    assert sorted(sums) == files and len(files) == 20
    assert all(_sha(tmp_path / n) == h for n, h in sums.items())  # none stale
    assert {json.loads((tmp_path / f"{w}_9.json").read_text())["i"] for w in "ab"} == {49}


# ---------------------------------------------------------------- kill -9 at every step
_UNIT = _LOAD_ENV + textwrap.dedent("""
    import os, signal, sys
    from pathlib import Path
    folder, at, value = Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    steps = [0]
    def step(fn):
        def wrapped(*a, **k):
            if steps[0] == at:
                os.kill(os.getpid(), signal.SIGKILL)
            steps[0] += 1
            return fn(*a, **k)
        return wrapped
    os.replace = step(os.replace)
    os.link = step(os.link)
    store._fsync_file = step(store._fsync_file)
    def weights(tmp):
        tmp.write_text("weights " + value)
    def run(tmp):
        tmp.write_text('{"weights": "weights %s"}' % value)
    store.write_files_as_unit([(folder / "w.pt", weights), (folder / "r.json", run)], manifest=True)
    print(steps[0])
""")


def _unit(folder: Path, at: int, value: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", _UNIT, str(folder), str(at), value], env=ENV,
                          capture_output=True, text=True, timeout=60)


def _state(folder: Path) -> str:
    """'old' or 'new' when the folder holds one whole set and its manifest agrees."""
    if any(p.name.startswith(".andrea-unit.") for p in folder.iterdir()):  # a decided unit
        problem = bookdata.manifest_problem(folder / "r.json") or ""  # the book only reads:
        assert "python -m andrea_lab.store recover" in problem, problem  # it refuses, naming
    with store.folder_lock(folder):                                  # what finishes it
        store.recover_units(folder)
    names = sorted(p.name for p in folder.iterdir())
    assert names == [MANIFEST, "r.json", "w.pt"], names  # no .tmp, .bak or journal left
    w = (folder / "w.pt").read_text().split()[1]
    r = json.loads((folder / "r.json").read_text())["weights"].split()[1]
    assert w == r, (w, r)  # never a mixture
    assert bookdata.manifest_problem(folder / "r.json") is None
    assert bookdata.manifest_problem(folder / "w.pt") is None
    return w


def test_a_unit_is_all_or_nothing_under_kill_9_at_every_step(tmp_path):
    first = _unit(tmp_path, -1, "old")
    assert first.returncode == 0, first.stderr
    n_steps = int(first.stdout)
    seen = set()
    for at in range(n_steps):
        r = _unit(tmp_path, at, "new")
        assert r.returncode == -signal.SIGKILL, (at, r.stderr)
        seen.add(_state(tmp_path))
        if _state(tmp_path) == "new":  # back to the old set for the next kill
            assert _unit(tmp_path, -1, "old").returncode == 0
    assert seen == {"old", "new"} and n_steps >= 8  # both ends were reached


# ---------------------------------------------------------------- no command writes the book unasked
@pytest.mark.parametrize("out", ["book", "book/data", str(DATA.parent / "sub")])
def test_execute_refuses_an_out_in_the_book_unless_replace(out, capsys, monkeypatch):
    from andrea_lab import execute_chapters as X
    monkeypatch.chdir(REPO)
    monkeypatch.setattr(X, "execute_notebook", None)  # executing anything would fail loudly
    before = (REPO / "book" / "three_matrices.ipynb").read_bytes()
    assert X.main(["--fast", "--out", out, "book/three_matrices.ipynb"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--out" in err and "--replace" in err, err
    assert (REPO / "book" / "three_matrices.ipynb").read_bytes() == before


def test_pipeline_timing_writes_outside_the_book_and_replaces_only_when_asked(
        tmp_path, capsys, monkeypatch):
    from andrea_edu.pipeline import timing as PT
    from andrea_lab import pipeline_timing as lab_timing
    monkeypatch.setenv("ANDREA_OUT_DIR", str(tmp_path))
    (tmp_path / "pipeline_cpu.json").write_text("{}")
    monkeypatch.setattr(PT, "time_steps", None)  # measuring would fail loudly
    assert lab_timing.main(["--config", "ANDREA-12M", "--device", "cpu"]) == 2
    err = capsys.readouterr().err
    assert "exists" in err and "--replace" in err and len(err.strip().splitlines()) == 1
    monkeypatch.delenv("ANDREA_OUT_DIR")
    assert store.default_out_dir() != DATA and DATA not in store.default_out_dir().parents


def test_pipeline_timing_adds_no_file_to_the_committed_folder_unless_asked(tmp_path, capsys,
                                                                          monkeypatch):
    """Issue 42 item 3: `--out book/data` without --replace, no pipeline file there yet: refused
    before measuring (a new file changes the committed SHA256SUMS and is refused by the pins);
    save_timing refuses a pinned folder the same way."""
    from andrea_edu import data_pins
    from andrea_lab import pin_writer
    from andrea_edu.pipeline import timing as PT
    from andrea_lab import pipeline_timing as lab_timing
    before = (DATA / MANIFEST).read_bytes()
    timing = _a_timing()
    monkeypatch.setattr(PT, "time_steps", None)  # measuring would fail loudly
    assert lab_timing.main(["--config", "ANDREA-12M", "-T", "8", "--repeats", "1",
                            "--device", "cpu", "--out", str(DATA)]) == 2
    err = capsys.readouterr().err
    assert "lies in the book's folder" in err and len(err.strip().splitlines()) == 1
    assert (DATA / MANIFEST).read_bytes() == before and not (DATA / "pipeline_cpu.json").exists()
    pin_writer.pin_folder(tmp_path)
    with pytest.raises(FileExistsError, match="committed data folder"):
        lab_timing.save_timing(timing, tmp_path)
    assert [p.name for p in tmp_path.iterdir()] == [data_pins.MARKER]


def _a_timing():
    """A StepTiming as time_steps returns it, from the smallest forward on the CPU."""
    from andrea_edu.config import AndreaConfig
    from andrea_edu.model import AndreaModel
    from andrea_edu.pipeline import timing as PT
    cfg = AndreaConfig(d_model=16, n_head=2, n_layer=1, vocab_size=8, block_size=8, name="tiny")
    return PT.time_steps(AndreaModel(cfg), 1, 4, repeats=1, warmup=0)
