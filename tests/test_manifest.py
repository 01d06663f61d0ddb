"""The manifest (SHA256SUMS) fails closed: parsed strictly, required where the book reads data,
every file listed; a unit (weights + JSON, then the manifest last) cut by kill -9 at any step is
read whole or refused in one line naming `git checkout -- <folder>`, never read half new; a
writer's stray temporary files are never read and the next write removes them."""
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


# ---------------------------------------------------------------- kill -9 at every step
# the children load data.py and the lab's store.py alone (they import only the standard
# library): 50 ms, not torch's 2 s
_LOAD_ENV = ("import importlib.util as u, sys\n"
             "def _load(name, path):\n"
             "    s = u.spec_from_file_location(name, path); m = u.module_from_spec(s)\n"
             "    sys.modules[name] = m; s.loader.exec_module(m); return m\n"
             f"bookdata = _load('andrea_edu.data', {str(REPO / 'andrea_edu' / 'data.py')!r})\n"
             f"store = _load('andrea_lab.store', {str(REPO / 'andrea_lab' / 'store.py')!r})\n")
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


def _loads(folder: Path) -> dict[str, str]:
    """What the book reads of each file after a kill: its value ('old' or 'new') when the
    manifest vouches for it, else 'refused' (and then the line names the file's folder and
    the remedy, on one line)."""
    out = {}
    for name in ("w.pt", "r.json"):
        text = (folder / name).read_text()
        value = (text.split()[1] if name == "w.pt" else json.loads(text)["weights"].split()[1])
        problem = bookdata.manifest_problem(folder / name)
        if problem is None:
            out[name] = value
            continue
        assert "\n" not in problem and "differs from the sha256" in problem, problem
        assert f"git checkout -- {folder}" in problem and "re-run" in problem, problem
        assert value == "new", (name, problem)  # only a file the unit changed is refused
        out[name] = "refused"
    return out


def test_a_unit_cut_at_any_step_is_read_whole_or_refused(tmp_path):
    """kill -9 at every fsync and rename of a unit (weights, JSON, then SHA256SUMS last): after
    k of its n renames, every file the unit changed is refused in one line naming the folder
    and `git checkout -- <folder>`; a file not yet renamed reads as the old one; once the
    unit runs to its end, both read new. Never a mixture read as whole. The writer's temporary
    files a kill leaves are hidden, never read, and the next write removes them."""
    first = _unit(tmp_path, -1, "old")
    assert first.returncode == 0, first.stderr
    n_steps = int(first.stdout)
    seen = []
    for at in range(n_steps):
        r = _unit(tmp_path, at, "new")
        assert r.returncode == -signal.SIGKILL, (at, r.stderr)
        got = _loads(tmp_path)
        read = {v for v in got.values() if v != "refused"}
        assert len(read) <= 1, got  # never an old file beside a new one, both vouched for
        seen.append(tuple(got.values()))
        assert sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith(".")) == \
            [MANIFEST, "r.json", "w.pt"]
        assert all(store.is_temporary(p.name) for p in tmp_path.iterdir()
                   if p.name.startswith("."))  # a kill leaves at most temporary files
        again = _unit(tmp_path, -1, "old")  # the remedy: the writer run again
        assert again.returncode == 0, again.stderr
        assert _loads(tmp_path) == {"w.pt": "old", "r.json": "old"}
        assert sorted(p.name for p in tmp_path.iterdir()) == [MANIFEST, "r.json", "w.pt"]
    # the kills reached every state: before any rename, after one (weights new, JSON old),
    # after both data renames but before the manifest's (both refused)
    assert ("old", "old") in seen and ("refused", "old") in seen, seen
    assert ("refused", "refused") in seen and n_steps >= 5, (seen, n_steps)
    assert _unit(tmp_path, -1, "new").returncode == 0  # not cut: the manifest vouches for both
    assert _loads(tmp_path) == {"w.pt": "new", "r.json": "new"}


def test_the_manifest_rewritten_makes_the_unit_read(tmp_path):
    """Cut after its data renames (the manifest not yet rewritten): refused; the manifest
    rewritten over the new files (the commit point): they read."""
    store.write_files_as_unit([(tmp_path / "a.json", lambda p: p.write_text('{"v": 1}\n'))],
                              manifest=True)
    (tmp_path / "a.json").write_text('{"v": 2}\n')  # renamed into place, manifest not yet
    problem = bookdata.manifest_problem(tmp_path / "a.json") or ""
    assert "differs from the sha256" in problem and "git checkout --" in problem, problem
    store.seal_folder(tmp_path)  # the manifest's rename: what the writer does last
    assert bookdata.manifest_problem(tmp_path / "a.json") is None


def test_a_stray_temporary_file_is_ignored_by_loads_and_removed_by_the_next_write(
        tmp_path, monkeypatch):
    from andrea_edu.bench import results as R
    _copy_data(tmp_path, ["bench_layout_cpu.json"])
    store.seal_folder(tmp_path)
    stray = [tmp_path / ".bench_layout_cpu.json.andrea-4242-0badcafe.tmp",
             tmp_path / f".{MANIFEST}.andrea-4242-0badcafe.tmp"]
    for p in stray:
        p.write_text("half a file")
    assert all(store.is_temporary(p.name) for p in stray)
    monkeypatch.setenv("ANDREA_DATA_DIR", str(tmp_path))
    assert R.load_results("layout", "cpu") is not None  # the stray files are not read
    assert bookdata.load("bench_layout", device="cpu") is not None
    store.write_json_atomic(tmp_path / "x.json", {"v": 1})  # the next write into the folder
    assert not any(p.exists() for p in stray)
    assert sorted(p.name for p in tmp_path.iterdir()) == [MANIFEST, "bench_layout_cpu.json",
                                                          "x.json"]
    assert bookdata.manifest_problem(tmp_path / "x.json") is None


def test_a_writer_refuses_a_damaged_manifest_before_writing(tmp_path):
    (tmp_path / MANIFEST).write_text("not a manifest\n")
    with pytest.raises(DataFileError, match="line 1 is not"):
        store.write_json_atomic(tmp_path / "x.json", {"v": 1})
    assert sorted(p.name for p in tmp_path.iterdir()) == [MANIFEST]


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
