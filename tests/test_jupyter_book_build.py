"""scripts/jupyter_book_build.py: the book's build command reads (and executes) in parallel.

A small book of seven Markdown pages is built the way scripts/build_book.sh builds the book; with
two workers Sphinx must read in parallel: if an extension Jupyter Book loads is not declared safe,
Sphinx falls back to a serial read and warns, which -W turns into a failed build.
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "scripts" / "jupyter_book_build.py"


def _run(args, env_jobs, cwd):
    import os
    env = dict(os.environ, ANDREA_BUILD_JOBS=env_jobs)
    return subprocess.run([sys.executable, str(SCRIPT), *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("bad", ["0", "-1", "two", "65"])
def test_a_bad_job_count_is_refused_in_one_line(tmp_path, bad):
    proc = _run([str(tmp_path)], bad, tmp_path)
    assert proc.returncode != 0
    assert proc.stderr.strip() == f"ANDREA_BUILD_JOBS: {bad!r} is not allowed; an integer in 1..64"


def test_a_small_book_is_read_in_parallel_without_warnings(tmp_path):
    book = tmp_path / "b"
    book.mkdir()
    for i in range(1, 8):
        (book / f"p{i}.md").write_text(f"# Page {i}\n\ntext {i}\n")
    (book / "_toc.yml").write_text("format: jb-book\nroot: p1\nchapters:\n"
                                   + "".join(f"- file: p{i}\n" for i in range(2, 8)))
    (book / "_config.yml").write_text("title: t\n")
    proc = _run([str(book), "--all", "-W", "-n", "--keep-going"], "2", tmp_path)
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log[-2000:]
    assert "executing the chapters with 2 workers" in log
    assert "serial read" not in log and "WARNING" not in log, log[-2000:]
    assert all((book / "_build" / "html" / f"p{i}.html").exists() for i in range(1, 8))


def _jbb():
    sys.path.insert(0, str(SCRIPT.parent))
    try:
        import jupyter_book_build
    finally:
        sys.path.remove(str(SCRIPT.parent))
    return jupyter_book_build


def test_the_longest_chapters_start_first_in_sphinxs_own_scheduler(tmp_path, monkeypatch):
    """The chunks go through Sphinx's real ParallelTasks (two workers); each task appends its
    name to a file as it starts: the start order must be LONGEST_FIRST, then by size."""
    from sphinx.util.parallel import ParallelTasks

    jbb = _jbb()
    (tmp_path / "book").mkdir()
    for name, size in (("small", 10), ("large", 1000), ("middle", 100)):
        (tmp_path / "book" / f"{name}.ipynb").write_text("x" * size)
    monkeypatch.setattr(jbb, "SOURCE", tmp_path)
    longest = list(jbb.LONGEST_FIRST)
    docs = ["book/intro", "book/middle", "book/small", "book/large", *longest]
    want = longest + ["book/large", "book/middle", "book/small", "book/intro"]
    assert jbb.start_order(docs) == want
    log = tmp_path / "started.txt"

    def task(chunk):
        with open(log, "a") as f:
            f.write(chunk[0] + "\n")
        import time
        time.sleep(0.3)
        return chunk[0]

    tasks = ParallelTasks(2)
    for chunk in jbb.one_document_per_batch(docs, 2):
        tasks.add_task(task, chunk)
    tasks.join()
    assert log.read_text().split() == want


def test_each_chapter_kernel_gets_the_cores_divided_by_the_workers(monkeypatch):
    """Two workers on two cores: one thread a kernel; four on eight: two; a variable the caller
    set is left as it is."""
    jbb = _jbb()
    for v in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        monkeypatch.delenv(v, raising=False)
    assert jbb.kernel_threads(2, cores=2) == {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    assert jbb.kernel_threads(4, cores=8) == {"OMP_NUM_THREADS": "2", "MKL_NUM_THREADS": "2"}
    assert jbb.kernel_threads(4, cores=2)["OMP_NUM_THREADS"] == "1"
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert jbb.kernel_threads(2, cores=2) == {"MKL_NUM_THREADS": "1"}
