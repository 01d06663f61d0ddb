"""When Chromium dies under the browser tests, one test says so in one line and the rest go on.

Real crashes, not mocks: a page navigated to chrome://crash (Chromium's own debug URL: the
renderer dereferences a null pointer), a renderer process killed with SIGSEGV, and the browser
process killed with SIGKILL (what the out-of-memory killer sends). Each test drives its own
Chromium (tests/book_fixtures.py's guard, on the session's playwright driver: the sync API allows
one driver per process), so that the crashes here do not spend the session browser's one
restart. Checked: the failure is one line naming the page and how it died (the signal, where
Chromium's exit status says it), Chromium is restarted once, and after a second crash a later
test skips with one line that names the first crash.

The last test runs a small pytest session in a subprocess (six browser tests, two of which crash
their page) and checks its whole report: two one-line failures, four skips with one shared
reason, no traceback.
"""
from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from book_fixtures import CHROMIUM, Chromium

pytestmark = pytest.mark.book

HERE = Path(__file__).resolve().parent


def _processes() -> dict[int, tuple[int, list[str]]]:
    """pid -> (parent pid, argv) of every process this user can see (Linux /proc)."""
    out = {}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
            argv = [a.decode(errors="replace") for a in (d / "cmdline").read_bytes().split(b"\0")
                    if a]
        except (OSError, IndexError, ValueError):
            continue
        out[int(d.name)] = (ppid, argv)
    return out


def _chromium_pids(chromium: Chromium) -> tuple[int, list[int]]:
    """The browser process of this Chromium (the child of its wrapper script) and its
    renderer processes."""
    procs = _processes()
    wrapper = str(chromium.workdir / f"chromium-{chromium.launches}.sh")
    main = [pid for pid, (ppid, argv) in procs.items()
            if wrapper in procs.get(ppid, (0, []))[1] and argv
            and "--type=" not in " ".join(argv)]
    assert len(main) == 1, f"expected one browser process under {wrapper}, found {main}"

    def under(pid: int) -> bool:
        while pid > 1:
            pid = procs.get(pid, (0, []))[0]
            if pid == main[0]:
                return True
        return False

    # (Chromium retitles its zygote's children: their cmdline is one space-joined string.)
    renderers = [pid for pid, (_, argv) in procs.items()
                 if "--type=renderer" in " ".join(argv) and under(pid)]
    return main[0], renderers


@pytest.fixture
def chromium(browser, tmp_path):
    """A Chromium of this test's own, on the session's playwright driver."""
    if browser.browser is None:
        pytest.skip(f"Chromium does not start here: {browser.gave_up}")
    own = Chromium(browser.playwright, CHROMIUM, tmp_path)
    assert own.browser is not None, own.gave_up
    yield own
    own.close()


def _one_line(excinfo) -> str:
    msg = str(excinfo.value)
    assert "\n" not in msg, f"more than one line:\n{msg}"
    return msg


def _a_page_works(chromium: Chromium, where: str) -> None:
    with chromium.guard(where):
        context = chromium.new_context()
        page = context.new_page()
        page.set_content("<p id=x>still here</p>")
        assert page.inner_text("#x") == "still here"
        context.close()


def test_a_crashed_page_fails_in_one_line_then_chromium_restarts_and_gives_up_at_the_second(
        chromium):
    with pytest.raises(pytest.fail.Exception) as failed:
        with chromium.guard("book/toy.html"):
            page = chromium.new_page()
            page.set_content("<p>a page about to crash</p>")
            with contextlib.suppress(Exception):  # net::ERR_ABORTED: the renderer is gone
                page.goto("chrome://crash")
            page.evaluate("1 + 1")  # playwright: "Target crashed"
    msg = _one_line(failed)
    print(f"[crash 1] {msg}")
    assert msg.startswith("book/toy.html: the page crashed"), msg
    assert "Intentionally crashing (with null pointer dereference)" in msg  # Chromium's words
    assert msg.endswith("Chromium was restarted for the next tests"), msg
    assert chromium.launches == 2 and len(chromium.crashes) == 1 and not chromium.gave_up
    _a_page_works(chromium, "book/after_the_restart.html")

    # A second crash, this time the renderer killed from outside (as a loaded machine might).
    with pytest.raises(pytest.fail.Exception) as failed:
        with chromium.guard("book/toy2.html"):
            page = chromium.new_page()
            page.set_content("<p>another page</p>")
            _, renderers = _chromium_pids(chromium)
            assert renderers, "no renderer process found"
            for pid in renderers:
                os.kill(pid, signal.SIGSEGV)
            page.wait_for_timeout(2000)  # playwright: "Target crashed" (or the crash event)
            page.evaluate("1 + 1")
    msg = _one_line(failed)
    print(f"[crash 2] {msg}")
    assert msg.startswith("book/toy2.html: the page crashed"), msg
    assert msg.endswith("the remaining browser tests skip"), msg
    assert chromium.gave_up and chromium.launches == 2

    with pytest.raises(pytest.skip.Exception) as skipped:
        _a_page_works(chromium, "book/later.html")
    reason = _one_line(skipped)
    print(f"[skip] {reason}")
    assert reason.startswith("Chromium crashed twice, so the remaining browser tests skip; "
                             "the first crash: book/toy.html: the page crashed"), reason
    with pytest.raises(pytest.skip.Exception):  # unguarded tests skip too
        chromium.new_context()


def test_a_killed_browser_process_is_reported_with_its_signal_then_restarted(chromium):
    with pytest.raises(pytest.fail.Exception) as failed:
        with chromium.guard("book/three_matrices.html"):
            page = chromium.new_page()
            page.set_content("<p>hi</p>")
            main, _ = _chromium_pids(chromium)
            os.kill(main, signal.SIGKILL)
            deadline = time.monotonic() + 10
            while chromium.browser.is_connected() and time.monotonic() < deadline:
                with contextlib.suppress(Exception):
                    page.evaluate("1 + 1")  # playwright: "Target page, context or browser ..."
            page.evaluate("1 + 1")
    msg = _one_line(failed)
    print(f"[browser killed] {msg}")
    assert msg.startswith("book/three_matrices.html: Chromium's browser process died (killed by "
                          "SIGKILL (killed), often the out-of-memory killer)"), msg
    assert msg.endswith("Chromium was restarted for the next tests"), msg
    _a_page_works(chromium, "book/after_the_restart.html")
    assert chromium.crashes == [msg.rsplit("; Chromium was restarted", 1)[0]]


def test_an_unguarded_test_that_killed_the_browser_is_counted_at_the_next_page(chromium):
    main, _ = _chromium_pids(chromium)
    os.kill(main, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while chromium.browser.is_connected() and time.monotonic() < deadline:
        chromium._pump()
    _a_page_works(chromium, "book/next.html")  # restarted: the next test goes on
    assert chromium.launches == 2
    assert chromium.crashes[0].startswith("an earlier browser test: Chromium's browser process "
                                          "died (killed by SIGKILL"), chromium.crashes


def test_an_assertion_is_not_taken_for_a_crash(chromium):
    with pytest.raises(AssertionError, match="the page's own failure"):
        with chromium.guard("book/fine.html"):
            page = chromium.new_page()
            page.set_content("<p>fine</p>")
            raise AssertionError("the page's own failure")
    assert chromium.crashes == [] and chromium.launches == 1


_TOY_TESTS = '''
import contextlib
import pytest

@pytest.mark.parametrize("n", range(6))
def test_page(browser, n):
    with browser.guard(f"page{n}.html"):
        page = browser.new_page()
        page.set_content("<p>hi</p>")
        if n in (1, 3):  # two pages crash
            with contextlib.suppress(Exception):
                page.goto("chrome://crash")
            page.evaluate("1 + 1")
        assert page.evaluate("1 + 1") == 2
'''

_TOY_CONFTEST = f'''
import sys
sys.path.insert(0, {str(HERE)!r})
from book_fixtures import browser  # noqa: F401
'''


def test_a_session_where_two_pages_crash_reports_two_lines_and_skips_the_rest(browser, tmp_path):
    """Six browser tests in a pytest subprocess, pages 1 and 3 crash: page 0 and 2 pass, 1 and 3
    fail with one line each, 4 and 5 skip with one shared reason; no traceback anywhere."""
    if browser.browser is None:
        pytest.skip(f"Chromium does not start here: {browser.gave_up}")
    (tmp_path / "test_toy.py").write_text(_TOY_TESTS)
    (tmp_path / "conftest.py").write_text(_TOY_CONFTEST)
    env = dict(os.environ, COLUMNS="400", PYTHONPATH=str(HERE.parent) + os.pathsep
               + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rA", "-p", "no:cacheprovider",
                           "--rootdir", str(tmp_path), str(tmp_path / "test_toy.py")],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    out = proc.stdout + proc.stderr
    print(out)
    assert proc.returncode == 1, out
    assert "2 failed, 2 passed, 2 skipped" in out, out
    assert "Traceback" not in out and "During handling" not in out, out
    assert "Target crashed" not in out, out  # playwright's own error is not shown
    failed = [ln for ln in out.splitlines() if ln.startswith("FAILED")]
    assert len(failed) == 2, failed
    assert failed[0].startswith("FAILED test_toy.py::test_page[1] - Failed: page1.html: the page "
                                "crashed"), failed
    assert failed[1].startswith("FAILED test_toy.py::test_page[3] - Failed: page3.html: the page "
                                "crashed"), failed
    assert failed[1].endswith("the remaining browser tests skip"), failed[1]
    skipped = [ln for ln in out.splitlines() if ln.startswith("SKIPPED")]
    assert len(skipped) == 1 and skipped[0].startswith("SKIPPED [2] "), skipped
    assert "Chromium crashed twice, so the remaining browser tests skip; the first crash: " \
           "page1.html: the page crashed" in skipped[0], skipped
