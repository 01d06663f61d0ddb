"""A notebook kernel that dies is reported once, in one line: the notebook, the cell that was
running (index and first line) and how the kernel died (its signal or exit status).

A toy notebook whose cell 2 kills its own kernel (os.kill(os.getpid(), signal.SIGKILL), what
the out-of-memory killer sends) goes through each path a chapter takes: the executor
(python -m andrea_lab.execute_chapters), tests/test_notebooks.py's runner, and a tiny
jupyter-book build with book/_ext/andrea_kernel_deaths.py, whose log tests/book_fixtures.py
reads. Before, the same notebook gave "DeadKernelError: Kernel died" under two tracebacks
(jupyter-book 1.0.4, myst-nb 1.4, nbclient 0.11): no notebook, no cell, no signal.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from book_fixtures import build_failure
from book_toc import REPO

KILL = "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)"
SAID = ("cell 2 (`import os, signal`): the kernel died (killed by SIGKILL (killed), often the "
        "out-of-memory killer)")


def _toy(folder: Path, name: str = "dies.ipynb") -> Path:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell("# A kernel that dies"),
                nbformat.v4.new_code_cell("x = 1\nprint(x)"),
                nbformat.v4.new_code_cell(KILL),
                nbformat.v4.new_code_cell("print('never')")]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                 "language": "python"}
    folder.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, folder / name)
    return folder / name


def test_the_executor_names_the_cell_and_the_signal(tmp_path, capsys):
    from andrea_lab import execute_chapters as execute

    path = _toy(tmp_path)
    assert execute.main([str(path), "--timeout", "120"]) == 1
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 1, out
    assert out[0].startswith(f"[execute] {path}: FAILED, {SAID} ("), out[0]


def test_the_notebook_tests_fail_in_one_line(tmp_path):
    from test_notebooks import execute_chapter

    path = _toy(tmp_path)
    with pytest.raises(pytest.fail.Exception) as failed:
        execute_chapter(path, "book/dies.ipynb", timeout=120)
    assert str(failed.value) == f"book/dies.ipynb: {SAID}"
    assert failed.value.pytrace is False and failed.value.__suppress_context__


@pytest.mark.book
def test_the_book_build_names_the_notebook_the_cell_and_the_signal(tmp_path):
    book = tmp_path / "toybook"
    _toy(book)
    (book / "intro.md").write_text("# Intro\n")
    (book / "_toc.yml").write_text("format: jb-book\nroot: intro\nchapters:\n  - file: dies\n")
    (book / "_config.yml").write_text(
        "title: toy\nexecute:\n  execute_notebooks: force\n  timeout: 120\n"
        "  raise_on_error: true\n  allow_errors: false\n"
        f"sphinx:\n  local_extensions:\n    andrea_kernel_deaths: {REPO / 'book' / '_ext'}\n")
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.run([str(Path(sys.executable).with_name("jupyter-book")), "build",
                           str(book), "-W", "-n", "--keep-going", "--path-output",
                           str(tmp_path / "out")], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=300)
    log = proc.stdout + proc.stderr
    assert proc.returncode != 0, log[-2000:]
    line = build_failure(log, proc.returncode)
    print(line)
    assert line == f"a notebook kernel died during the book build: dies.ipynb: {SAID}", log[-3000:]


def test_build_failure_reads_other_stops_too():
    assert build_failure("anything", 0) is None
    log = ("reading sources... [ 50%] x\n\x1b[91mException occurred:\x1b[39;49;00m\n"
           '  File "a.py", line 3, in f\n    raise ValueError("no")\n'
           "ValueError: bad value in x.ipynb\nThe full traceback has been saved in /tmp/y.log\n")
    assert build_failure(log, 1) == "the book build stopped: ValueError: bad value in x.ipynb"
    assert build_failure("WARNING: a\n\nbuild finished with problems, 1 warning.\n==\n", 1) == \
        "the book build failed (rc=1): build finished with problems, 1 warning."
