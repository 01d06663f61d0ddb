"""Every command line refuses bad arguments in one line with exit status 2, before any long work
(tests/cli_probe.py holds the table and runs each command's main in this process), and none of
them touches the book's committed files."""
from __future__ import annotations

import pytest

import cli_probe

ROWS = cli_probe.table()


@pytest.fixture(scope="module")
def book_before():
    return {p: p.stat().st_mtime_ns for p in (cli_probe.REPO / "book").rglob("*") if p.is_file()
            and "_build" not in p.parts}


@pytest.fixture(autouse=True)
def _scratch(tmp_path, monkeypatch):
    import matplotlib
    matplotlib.use("Agg")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("ANDREA_OUT_DIR", str(tmp_path / "out"))
    monkeypatch.setenv("ANDREA_FAST", "1")
    monkeypatch.setenv("_ANDREA_PINNED", "1")  # commands that re-exec themselves pinned do not
    monkeypatch.setenv("_ANDREA_NATIVE", "1")


@pytest.mark.parametrize("entry, argv", ROWS, ids=[f"{e[2:]} {' '.join(a)}"[:70] for e, a in ROWS])
def test_a_bad_invocation_is_refused_in_one_line_before_any_work(entry, argv, book_before):
    outcome, rc, err, secs = cli_probe.invoke(entry, argv)
    assert outcome == "clean", (outcome, rc, err[-400:])
    now = {p: p.stat().st_mtime_ns for p in book_before if p.exists()}
    assert now == book_before, "a refused command changed the book"
