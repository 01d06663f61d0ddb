"""Nothing a file's name or a leftover journal says reaches outside its data folder (issue 42,
severity 1): a journal or a manifest names only plain file names of its own folder; anything
else (a separator, '..', an absolute path, a control character) is refused in one line and never
acted on; every file name a command writes is checked the same way before work. Also: leftovers
of a killed writer whose pid was reused are still finished (severity 3)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from andrea_edu.data import MANIFEST, DataFileError, name_problem, unfinished_unit
from andrea_lab import store

REPO = Path(__file__).resolve().parents[1]

# a journal's pairs, each planted as [temporary, target, backup]: every one names a place
# outside the folder, or a name no writer makes
ATTACKS = {
    "parent": ["../victim.ipynb"],
    "absolute": ["{abs}"],
    "nested": ["sub/../../victim.ipynb"],
    "backslash": ["..\\victim.ipynb"],
    "newline": ["x.json\n" + "0" * 64 + "  y.json"],
    "escape": ["x\x1b[2J.json"],
    "nul": ["x\x00.json"],
    "dotdot": [".."],
}


def _folder(tmp_path: Path) -> tuple[Path, Path]:
    data = tmp_path / "book" / "data"
    data.mkdir(parents=True)
    store.write_json_atomic(data / "a.json", {"x": 1}, manifest=True)
    victim = tmp_path / "book" / "victim.ipynb"
    victim.write_text("the chapter\n")
    return data, victim


def _plant(data: Path, journal: dict, pid: int = 999999) -> Path:
    p = data / f".andrea-unit.andrea-{pid}-ab.json"
    p.write_text(json.dumps(journal))
    return p


def _pairs(kind: str, role: str, victim: Path) -> list:
    name = ATTACKS[kind][0].replace("{abs}", str(victim))
    tmp, target, bak = ".g.andrea-999999-ab.tmp", "g.json", None
    if role == "target":
        target = name
    elif role == "temporary":
        tmp = name
    else:
        bak = name
    return [[tmp, target, bak]]


@pytest.mark.parametrize("mode", ["back", "forward"])
@pytest.mark.parametrize("role", ["target", "temporary", "backup"])
@pytest.mark.parametrize("kind", sorted(ATTACKS))
def test_a_planted_journal_is_refused_and_never_acted_on(tmp_path, kind, role, mode):
    data, victim = _folder(tmp_path)
    if role == "temporary" and kind in ("parent", "absolute", "nested"):
        # forward mode would move this file over the target: it must stay where it is
        victim.with_name("g.tmp").write_text("outside\n")
    planted = _plant(data, {"mode": mode, "done": 1, "pairs": _pairs(kind, role, victim)})
    before = sorted(os.listdir(data)), victim.read_text()
    with pytest.raises(DataFileError, match="journal names only plain file names") as e:
        store.write_json_atomic(data / "b.json", {"y": 2})  # every writer recovers first
    assert "\n" not in str(e.value)
    with pytest.raises(DataFileError):
        with store.folder_lock(data):
            store.recover_units(data)
    assert (sorted(os.listdir(data)), victim.read_text()) == before  # nothing acted on
    assert planted.exists() and not (data / "b.json").exists()


def test_the_issue_s_journal_through_the_command_line(tmp_path):
    """The issue's exact case: `store recover` on a journal naming ../victim.ipynb exits 1 with
    one line and deletes nothing; an absolute path likewise."""
    data, victim = _folder(tmp_path)
    for target in ("../victim.ipynb", str(victim)):
        planted = _plant(data, {"mode": "back", "done": 1, "pairs": [["g.tmp", target, None]]})
        r = subprocess.run([sys.executable, "-m", "andrea_lab.store", "recover", str(data)],
                           capture_output=True, text=True, cwd=REPO, timeout=120)
        assert r.returncode == 1 and victim.exists(), r
        assert r.stderr.count("\n") == 1 and "not acted on" in r.stderr
        assert "Traceback" not in r.stderr
        planted.unlink()


@pytest.mark.parametrize("journal", [
    {"mode": "sideways", "pairs": []}, {"mode": "back", "done": 7, "pairs": []},
    {"mode": "back", "done": "1", "pairs": []}, {"pairs": [["a", "b"]]}, {"pairs": "x"}, [1],
])
def test_a_journal_with_a_mode_or_count_no_writer_writes_is_refused(tmp_path, journal):
    data, _ = _folder(tmp_path)
    _plant(data, journal)
    with pytest.raises(DataFileError, match="not acted on"):
        with store.folder_lock(data):
            store.recover_units(data)


@pytest.mark.parametrize("name", ["x.json\n" + "0" * 64 + "  y.json", "x\r.json", "..",
                                  "a\u2028b.json", " x.json", "x" * 256 + ".json", MANIFEST,
                                  ".andrea-unit.x.json"])
def test_a_writer_refuses_a_file_name_that_is_not_plain(tmp_path, name):
    data, _ = _folder(tmp_path)
    before = (data / MANIFEST).read_bytes()
    with pytest.raises(ValueError, match="path=.*its file name") as e:
        store.write_json_atomic(data / name, {"x": 2})
    assert "\n" not in str(e.value)
    assert (data / MANIFEST).read_bytes() == before


def test_a_unit_lies_in_one_folder(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    with pytest.raises(ValueError, match="a unit lies in one folder, not 2"):
        store.write_files_as_unit([(tmp_path / "a" / "x.json", lambda p: p.write_text("1")),
                                   (tmp_path / "b" / "y.json", lambda p: p.write_text("2"))])
    assert not list((tmp_path / "a").iterdir()) and not list((tmp_path / "b").iterdir())


def test_sealing_refuses_a_file_whose_name_would_split_the_manifest(tmp_path):
    (tmp_path / "ok.json").write_text("{}")
    (tmp_path / ("evil\n" + "0" * 64 + "  x.json")).write_text("{}")
    with pytest.raises(ValueError, match="holds the control character"):
        store.seal_folder(tmp_path)
    assert not (tmp_path / MANIFEST).exists()


@pytest.mark.parametrize("out", ["DATA/evil\n" + "0" * 64 + "  x_run.json", "DATA/a\tb.json",
                                 "DATA/x\u2029.json"])
def test_check_out_file_refuses_a_name_with_a_control_character(tmp_path, out):
    from andrea_lab.arg_checks import check_out_file
    why = check_out_file("--out", out.replace("DATA", str(tmp_path)), "x.json")
    assert why and why.startswith("--out: the file name") and "control character" in why


def test_name_problem_accepts_plain_names():
    for ok in ("realtext_run.json", "a b.json", "é.pt", ".hidden", "x..y"):
        assert name_problem(ok) is None, ok


# ---------------------------------------------------------------- a reused pid (severity 3)
def test_leftovers_of_a_writer_whose_pid_was_reused_are_finished(tmp_path):
    """A killed writer's journal names a pid now alive (reused: here this very process). No
    writer holds the folder's lock, so the reader names the half-done unit (not 'damage') and
    `store recover` rolls it forward."""
    data, _ = _folder(tmp_path)
    pid = os.getpid()
    tmp = data / f".a.json.andrea-{pid}-cd.tmp"
    tmp.write_text(json.dumps({"x": 9}) + "\n")
    _plant(data, {"mode": "forward", "pairs": [[tmp.name, "a.json", None]]}, pid=pid)
    line = unfinished_unit(data)
    assert line is not None and "store recover" in line
    with store.folder_lock(data):
        done = store.recover_units(data)
    assert len(done) == 1 and json.loads((data / "a.json").read_text()) == {"x": 9}
    assert not [n for n in os.listdir(data) if n.startswith(".")]


def test_a_live_writer_s_files_are_left_alone(tmp_path):
    """While a writer holds the lock, its files (its pid alive) are not another writer's
    leftovers: the reader does not call them unfinished."""
    data, _ = _folder(tmp_path)
    _plant(data, {"mode": "forward", "pairs": []}, pid=os.getpid())
    with store.folder_lock(data):  # this process is the live writer
        assert unfinished_unit(data) is None
    assert unfinished_unit(data) is not None  # let go, its journal still there: dead


# ---------------------------------------------------------------- sizes before reading (severity 3)
@pytest.mark.parametrize("name", ["realtext_run.json", "realtext_model.pt"])
def test_an_oversize_sparse_file_is_refused_before_it_is_read(tmp_path, monkeypatch, name):
    """A sparse file far larger than any data file (nothing real on disk) is refused from its
    size: load_run and load() never read it whole (the issue measured 2.8 GB resident)."""
    import resource
    import shutil

    from andrea_edu import data as bookdata
    from andrea_edu.heads import text_runs as TR
    data = REPO / "book" / "data"
    for n in ("realtext_run.json", "realtext_model.pt"):
        shutil.copy(data / n, tmp_path / n)
    with open(tmp_path / name, "r+b") as f:
        f.truncate(2 * 2**30)  # 2 GiB, above both caps
    import hashlib
    sha = hashlib.sha256((tmp_path / "realtext_run.json").read_bytes()).hexdigest()
    (tmp_path / MANIFEST).write_text(f"{sha}  realtext_run.json\n{'0' * 64}  realtext_model.pt\n")
    monkeypatch.setenv("ANDREA_DATA_DIR", str(tmp_path))
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    for call in (lambda: TR.load_run(tmp_path / "realtext_run.json"),
                 lambda: bookdata.load("realtext_run")):
        with pytest.raises(DataFileError, match="MiB, above the") as e:
            call()
        assert "\n" not in str(e.value)
    grown_mib = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    assert grown_mib < 256, grown_mib
