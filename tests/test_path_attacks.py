"""Nothing a file's name says reaches outside its data folder (issue 42, severity 1): a manifest
names only plain file names of its own folder; anything else (a separator, '..', an absolute
path, a control character) is refused in one line and never acted on; every file name a command
writes is checked the same way before work; the removal of a writer's stray temporary files
touches only such entries of its own folder (a link so named is removed, never its target)."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from andrea_edu.data import MANIFEST, DataFileError, name_problem
from andrea_lab import store

REPO = Path(__file__).resolve().parents[1]


def _folder(tmp_path: Path) -> tuple[Path, Path]:
    data = tmp_path / "book" / "data"
    data.mkdir(parents=True)
    store.write_json_atomic(data / "a.json", {"x": 1}, manifest=True)
    victim = tmp_path / "book" / "victim.ipynb"
    victim.write_text("the chapter\n")
    return data, victim


def test_stray_temporaries_are_removed_only_in_their_own_folder(tmp_path):
    """The next write removes a killed writer's temporary files: only entries of its folder
    whose whole name is a writer's temporary name; a symbolic link so named is removed, never
    the file it points at; a folder so named, and names that only look alike, stay."""
    data, victim = _folder(tmp_path)
    link = data / ".victim.ipynb.andrea-1-ab.tmp"
    link.symlink_to(victim)
    (data / ".d.json.andrea-1-ab.tmp").mkdir()
    keep = [".a.json.andrea-1-ab.tmp.json", "a.json.andrea-1-ab.tmp", ".a.json.andrea-x-ab.tmp",
            ".a.json.andrea-1-AB.tmp"]
    for n in keep:
        (data / n).write_text("not a temporary file\n")
    (data / ".a.json.andrea-77-0f.tmp").write_text("half")
    store.write_json_atomic(data / "b.json", {"y": 2})
    assert victim.read_text() == "the chapter\n" and not os.path.lexists(link)
    assert sorted(os.listdir(data)) == sorted([MANIFEST, "a.json", "b.json",
                                              ".d.json.andrea-1-ab.tmp", *keep])


@pytest.mark.parametrize("name", ["x.json\n" + "0" * 64 + "  y.json", "x\r.json", "..",
                                  "a\u2028b.json", " x.json", "x" * 256 + ".json", MANIFEST,
                                  ".x.json.andrea-1-ab.tmp"])
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
