"""Notebooks are committed clean, and the table of contents and book/ agree; `execute_chapter`,
the runner other tests use (a fresh ``python3`` kernel whose working directory is ``book/``, as in
the book build; a dead kernel fails in one line).

Every chapter is executed once per test run, in the book build (ANDREA_FAST=1, static sliders):
tests/test_book.py::test_every_chapter_ran_in_the_build fails on a chapter that did not run, a
cell without an execution count or an error output, and writes the build's per-notebook times to
test-artifacts/notebook_times.json. The reader's path (live ipywidgets sliders, no
ANDREA_BOOK_BUILD) runs in tests/test_exercises.py (each runnable exercise executes its chapter's
prefix that way), tests/test_jupyterlab.py (one chapter, Run All in a real JupyterLab) and the
live slider's own tests in tests/test_viz.py.
"""
from __future__ import annotations

import subprocess

import nbformat
import pytest

from book_toc import REPO, source_of, toc_docnames

TIMEOUT_S = 600  # per cell; fast mode should need seconds


def execute_chapter(path, name: str, timeout: float = TIMEOUT_S):
    """Execute the notebook at `path` in its folder, errors recorded as outputs; returns the
    executed notebook. A kernel that dies fails the test in one line: the notebook, the cell
    that was running (index and first line) and the signal (andrea_lab.execute_chapters)."""
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError, DeadKernelError

    from andrea_lab.execute_chapters import patch_dead_kernel_message

    patch_dead_kernel_message()
    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(nb, timeout=timeout, kernel_name="python3", allow_errors=True,
                            resources={"metadata": {"path": str(path.parent)}})
    setattr(client, "andrea_notebook", name)  # named in a dead kernel's one line
    try:
        client.execute()
    except DeadKernelError as e:  # "from None": not nbclient's traceback under the line
        raise pytest.fail.Exception(str(e), pytrace=False) from None
    except CellExecutionError as e:  # only raised for errors allow_errors does not cover
        pytest.fail(f"{name}: {e}")
    return nb


def _git_notebooks() -> list[str]:
    try:
        out = subprocess.run(["git", "ls-files", "*.ipynb"], cwd=REPO, capture_output=True,
                             text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError) as e:
        pytest.skip(f"git ls-files is unavailable here ({e}); hygiene needs a git checkout")
    return [line for line in out.splitlines() if line]


def test_committed_notebooks_have_no_outputs():
    dirty = []
    for rel in _git_notebooks():
        nb = nbformat.read(REPO / rel, as_version=4)
        for i, cell in enumerate(nb.cells):
            if cell.cell_type != "code":
                continue
            if cell.get("outputs"):
                dirty.append(f"{rel} cell {i}: {len(cell.outputs)} outputs")
            if cell.get("execution_count") is not None:
                dirty.append(f"{rel} cell {i}: execution_count={cell.execution_count}")
        spec = nb.metadata.get("kernelspec", {})
        if spec.get("name") != "python3":
            dirty.append(f"{rel}: kernelspec name {spec.get('name')!r}, expected 'python3'")
    assert not dirty, "clear outputs before committing:\n" + "\n".join(dirty)


def test_toc_and_book_folder_agree():
    listed = toc_docnames()
    missing = [d for d in listed if source_of(d) is None]
    assert not missing, f"_toc.yml lists pages with no .ipynb/.md source: {missing}"
    on_disk = {str(p.relative_to(REPO).with_suffix("")) for p in (REPO / "book").glob("*.ipynb")}
    unlisted = sorted(on_disk - set(listed))
    assert not unlisted, f"notebooks in book/ that _toc.yml does not list: {unlisted}"
    assert len(listed) == len(set(listed)), f"_toc.yml lists a page twice: {listed}"
