"""Every chapter notebook executes (fast mode) with no error output; notebooks are committed clean.

Notebooks run one after another (2 cores), each in a fresh ``python3`` kernel whose working
directory is ``book/`` (as in the book build), with ANDREA_FAST=1 and without ANDREA_BOOK_BUILD,
so the live ipywidgets path of the sliders runs here and the static path in test_book.py.
Per-notebook times go to test-artifacts/notebook_times.json and to the test output (-s / -rA).
"""
from __future__ import annotations

import json
import subprocess
import time

import nbformat
import pytest

from book_toc import REPO, source_of, toc_docnames, toc_notebooks
from lesson_words import LESSONS, main_and_appendix_words

ARTIFACTS = REPO / "test-artifacts"
TIMEOUT_S = 600  # per cell; fast mode should need seconds


def _error_outputs(nb) -> list[str]:
    found = []
    for i, cell in enumerate(nb.cells):
        for out in cell.get("outputs", []):
            if out.get("output_type") == "error":
                found.append(f"cell {i}: {out.get('ename')}: {out.get('evalue')}")
    return found


def _record_time(name: str, seconds: float) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    path = ARTIFACTS / "notebook_times.json"
    try:
        times = json.loads(path.read_text())
    except (OSError, ValueError):
        times = {}
    times[name] = round(seconds, 2)
    path.write_text(json.dumps(times, indent=1, sort_keys=True) + "\n")


def execute_chapter(path, name: str, timeout: float = TIMEOUT_S):
    """Execute the notebook at `path` in its folder, errors recorded as outputs; returns the
    executed notebook. A kernel that dies fails the test in one line: the notebook, the cell
    that was running (index and first line) and the signal (andrea_edu.notebook.execute)."""
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError, DeadKernelError

    from andrea_edu.notebook.execute import patch_dead_kernel_message

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


@pytest.mark.parametrize("docname", toc_notebooks())
def test_notebook_executes_without_errors(docname, monkeypatch, record_property):
    monkeypatch.setenv("ANDREA_FAST", "1")
    monkeypatch.delenv("ANDREA_BOOK_BUILD", raising=False)
    path = REPO / (docname + ".ipynb")
    t0 = time.perf_counter()
    nb = execute_chapter(path, docname + ".ipynb")
    elapsed = time.perf_counter() - t0
    _record_time(docname, elapsed)
    record_property("seconds", round(elapsed, 2))
    print(f"[notebook] {docname}: {elapsed:.1f} s (fast mode)")
    errors = _error_outputs(nb)
    assert not errors, f"{docname} has error outputs:\n" + "\n".join(errors)
    stem = docname.rsplit("/", 1)[-1]
    if stem in LESSONS:  # a lesson's main text, as executed, within its word aim (issue 30)
        main, appendix = main_and_appendix_words(nb)
        print(f"[notebook] {docname}: {main} words of main text, {appendix} in the appendix")
        assert main <= LESSONS[stem], f"{docname}: {main} words before its appendix, aim " \
                                      f"{LESSONS[stem]}"


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
