"""The live notebooks in a real JupyterLab (headless Chromium): what a reader who runs them gets.

Two chapters in fast mode (ANDREA_FAST=1), opened in ``jupyter lab`` and run with JupyterLab's
own Run All command: no cell ends with an error, every widget renders (none left as its text
repr or as "Loading widget"), every slider move with the keyboard puts a new figure on screen,
every live figure has alt text, and the page logs no console error. Driven by the same functions
as scripts/live_bench.py, which also reports the move latencies; this test asserts behaviour
only, never times (those are measured and reported by the benchmark).

Skips, saying why, where Chromium, playwright or JupyterLab are missing. When Chromium crashes
on a chapter (a page's renderer or the whole browser, e.g. on a loaded machine), that chapter's
first test fails with one line saying which chapter and how (tests/book_fixtures.py's Chromium)
and its other tests skip pointing at it; Chromium is restarted once for the next chapter.
"""
from __future__ import annotations

import importlib.util
import json
import sys
from dataclasses import dataclass, field

import pytest

from book_toc import REPO

_spec = importlib.util.spec_from_file_location("live_bench", REPO / "scripts" / "live_bench.py")
assert _spec is not None and _spec.loader is not None  # a .py file: a source loader
live_bench = importlib.util.module_from_spec(_spec)
sys.modules["live_bench"] = live_bench  # its dataclasses look their module up by name
_spec.loader.exec_module(live_bench)

CHAPTERS = ["output_projection", "one_kernel_many_heads"]


@dataclass
class LabRuns:
    runs: dict = field(default_factory=dict)     # chapter -> live_bench.ChapterRun
    crashes: dict = field(default_factory=dict)  # chapter -> one line: how Chromium died on it
    skipped: dict = field(default_factory=dict)  # chapter -> why it did not run (Chromium gone)

    def __getitem__(self, chapter: str):
        """The chapter's run; a crash fails its first test in one line and skips the others."""
        return self.get(chapter, first=False)

    def get(self, chapter: str, first: bool):
        if chapter in self.skipped:
            pytest.skip(self.skipped[chapter])
        if chapter in self.crashes:
            if first:
                pytest.fail(self.crashes[chapter], pytrace=False)
            pytest.skip(f"Chromium crashed on {chapter}: see "
                        f"test_run_all_in_jupyterlab_has_no_error_output[{chapter}]")
        return self.runs[chapter]


@pytest.fixture(scope="module")
def runs(request):
    why = live_bench.missing_requirements()
    if why:
        pytest.skip(f"no real JupyterLab test here: {why}")
    # The session's one chromium (tests/book_fixtures.py): playwright's sync API cannot start a
    # second driver while the book tests' one is running in this process.
    browser = request.getfixturevalue("browser")
    browser.check()  # Chromium did not start, or crashed twice already: one line
    out = LabRuns()
    with live_bench.jupyter_lab(REPO, fast=True) as lab:
        for chapter in CHAPTERS:
            if browser.gave_up:
                out.skipped[chapter] = browser.gave_up
                continue
            with browser.watch(f"JupyterLab, {chapter}.ipynb") as watch:
                # No pause between moves and no burst: behaviour, not pacing, is under test.
                out.runs[chapter] = live_bench.bench_chapter(browser, lab, chapter, pause_s=0,
                                                             move_timeout_s=30, burst=False)
            if watch.crash:
                then = ("the remaining browser tests skip" if browser.gave_up
                        else "Chromium was restarted for the next chapter")
                out.crashes[chapter] = f"{watch.crash}; {then}"
    live_bench.ARTIFACTS.mkdir(exist_ok=True)
    (live_bench.ARTIFACTS / "jupyterlab_test.json").write_text(json.dumps(
        {ch: r.summary() for ch, r in out.runs.items()}, indent=1) + "\n")
    return out


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_run_all_in_jupyterlab_has_no_error_output(runs, chapter):
    run = runs.get(chapter, first=True)
    assert run.problem is None, run.problem
    assert run.run_all_s is not None
    assert run.error_outputs == [], run.error_outputs


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_every_widget_renders(runs, chapter):
    run = runs[chapter]
    assert run.widget_text == [], run.widget_text
    assert run.boxes >= 1, "no live slider box in the page"


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_every_slider_move_changes_the_figure(runs, chapter):
    run = runs[chapter]
    assert run.moves, "no slider was moved"
    stuck = [m for m in run.moves if m.ms is None]
    assert stuck == [], f"{len(stuck)} moves left the old figure: {stuck[:3]}"
    # Through every position and back: each position was shown at least twice.
    assert sum(m.first_visit for m in run.moves) == sum(not m.first_visit for m in run.moves)
    assert run.missing_alt == 0


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_no_console_error(runs, chapter):
    assert runs[chapter].console_errors == [], runs[chapter].console_errors
