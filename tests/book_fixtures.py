"""Session fixtures shared by every test of the built book (tests/test_book*.py): one build of
the whole book (ANDREA_BOOK_BUILD=1 ANDREA_FAST=1, -W -n), a local HTTP server over it, and
Debian's chromium driven by playwright. Registered in conftest.py.

Set ANDREA_BUILT_BOOK=<folder with index.html> to test an existing build instead of building.

When something dies, one test says so in one line and the others do not pile up tracebacks:
- a build that stops (a notebook kernel that died, a timeout) fails test_book_builds_without_
  warnings with one line (`book_build.failure`, for a dead kernel: the notebook, the cell that
  was running and the signal, from book/_ext/andrea_kernel_deaths.py), and every test of the
  built pages skips with one shared reason pointing at it (the `built_book` fixture);
- a crashed page or browser (Chromium's "Target crashed", a killed browser process) fails the
  test that was using it with one line saying which page and how (`Chromium.guard`); Chromium is
  then restarted once and the tests go on; after a second crash the remaining browser tests
  skip with one shared reason naming the first crash.
"""
from __future__ import annotations

import contextlib
import functools
import http.server
import json
import os
import re
import shlex
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from book_toc import REPO

ARTIFACTS = REPO / "test-artifacts"
# Debian's chromium; ANDREA_CHROMIUM names another build (the CI workflow's, from playwright).
CHROMIUM = Path(os.environ.get("ANDREA_CHROMIUM") or "/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu",
                 "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run", "--disable-quic"]
BUILD_TIMEOUT_S = 900


@dataclass
class BuiltBook:
    html: Path
    rc: int
    log: str
    seconds: float | None
    report: dict = field(default_factory=dict)
    failure: str | None = None  # one line: why the build stopped (None: it ran to the end)


# The one line a stopped build is reported with: the exception Sphinx printed last ("Exception
# occurred:" and the traceback's last line), e.g. "nbclient.exceptions.DeadKernelError:
# book/x.ipynb: cell 7 (`import torch`): the kernel died (killed by SIGKILL (killed), often the
# out-of-memory killer)" (book/_ext/andrea_kernel_deaths.py writes that line).
_EXCEPTION_LINE = re.compile(
    r"^(?:[A-Za-z_][\w.]*\.)?([A-Z]\w*(?:Error|Exception|Interrupt)): (.+)$")


def build_failure(log: str, rc: int) -> str | None:
    """One line saying why the build stopped, from its log; None when rc == 0. The line of a
    kernel that died wins; else the first exception line after Sphinx's "Exception occurred:";
    else the last line of the log (a build that ended on warnings: -W)."""
    if rc == 0:
        return None
    lines = [re.sub(r"\x1b\[[0-9;]*m", "", ln).strip() for ln in log.splitlines()]
    for ln in lines:
        m = _EXCEPTION_LINE.match(ln)
        if m and m.group(1) == "DeadKernelError":
            return f"a notebook kernel died during the book build: {m.group(2)}"
    if "Exception occurred:" in lines:
        after = lines[lines.index("Exception occurred:") + 1:]
        m = next((m for m in map(_EXCEPTION_LINE.match, after) if m), None)
        if m:
            return f"the book build stopped: {m.group(1)}: {m.group(2)}"
    last = next((ln for ln in reversed(lines) if ln and not set(ln) <= set("=")), "")
    return f"the book build failed (rc={rc}): {last[:300]}"


def _save_report(book: BuiltBook) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    (ARTIFACTS / "book_report.json").write_text(json.dumps(book.report, indent=1) + "\n")


@pytest.fixture(scope="session")
def book_build(tmp_path_factory):
    """The build, whatever became of it (test_book_builds_without_warnings judges it)."""
    prebuilt = os.environ.get("ANDREA_BUILT_BOOK")
    if prebuilt:
        book = BuiltBook(html=Path(prebuilt), rc=0, log="", seconds=None)
        book.report["build"] = {"prebuilt": prebuilt}
        yield book
        _save_report(book)
        return
    out = tmp_path_factory.mktemp("book")
    env = dict(os.environ, ANDREA_BOOK_BUILD="1", ANDREA_FAST="1")
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    # The build command of scripts/build_book.sh: jupyter-book build, chapters on every core.
    cmd = [sys.executable, str(REPO / "scripts" / "jupyter_book_build.py"), str(REPO), "--all",
           "-W", "-n", "--keep-going", "--path-output", str(out)]
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True,
                              timeout=BUILD_TIMEOUT_S)
        rc, log = proc.returncode, proc.stdout + proc.stderr
        failure = build_failure(log, rc)
    except subprocess.TimeoutExpired as e:
        rc = -9
        log = "".join(x.decode(errors="replace") if isinstance(x, bytes) else (x or "")
                      for x in (e.stdout, e.stderr))
        running = re.findall(r"(\S+\.ipynb): Executing notebook", log)
        failure = (f"the book build ran past {BUILD_TIMEOUT_S} s and was stopped"
                   + (f" while executing {running[-1]}" if running else ""))
    seconds = time.perf_counter() - t0
    ARTIFACTS.mkdir(exist_ok=True)
    (ARTIFACTS / "book_build.log").write_text(log)
    book = BuiltBook(html=out / "_build" / "html", rc=rc, log=log, seconds=seconds,
                     failure=failure)
    book.report["build"] = {"seconds": round(seconds, 1), "rc": rc, "failure": failure,
                            "command": " ".join(cmd[1:])}
    print(f"[book] built in {seconds:.1f} s (rc={rc})" + (f": {failure}" if failure else ""))
    yield book
    _save_report(book)


@pytest.fixture(scope="session")
def built_book(book_build):
    """The built book's pages. A build that stopped before writing them skips every test of the
    pages with one shared reason (test_book_builds_without_warnings fails, saying why); a build
    that only warned still wrote its pages: they are tested too."""
    if not (book_build.html / "index.html").exists():
        pytest.skip("no built pages to test: the book build stopped, "
                    "test_book_builds_without_warnings says why")
    return book_build


class _Handler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):  # keep the test output quiet
        pass


@pytest.fixture(scope="session")
def site(built_book):
    """Base URL of the built HTML, served on 127.0.0.1 at a free port."""
    handler = functools.partial(_Handler, directory=str(built_book.html))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()
    server.server_close()
    thread.join()


# ------------------------------------------------------------------------------ the browser
# What playwright says when a page's renderer process died.
_PAGE_CRASH_WORDS = ("Target crashed", "Page crashed")
# Lines of Chromium's stderr that tell why something died (its log prefix is dropped); the
# crashpad lines are noise of a machine without cpufreq files.
_WHY_LINE = re.compile(r"FATAL|Check failed|crash|terminat|out of memory|Thread creation|"
                       r"Resource temporarily unavailable", re.I)


@dataclass
class Watch:
    where: str
    crash: str | None = None  # one line: which page and how it died; None when nothing died


class Chromium:
    """The session's Chromium, launched through a small shell wrapper that keeps its stderr in
    a log file and its exit status in a file (playwright knows neither a killed browser's signal
    nor why a page crashed). Tests open pages with new_context() as with playwright's Browser and
    run their browser work inside guard(where) (watch(where) in a fixture), where a crash becomes
    one line: "<where>: the page crashed (...)" or "<where>: Chromium's browser process died
    (killed by SIGKILL ...)". After the first crash Chromium is restarted; after a second one
    `gave_up` says why and every later browser test skips with that one reason."""

    def __init__(self, playwright, executable: Path = CHROMIUM, workdir: Path | None = None):
        import tempfile

        self.playwright = playwright
        self.executable = executable
        self.workdir = Path(workdir or tempfile.mkdtemp(prefix="andrea-chromium-"))
        self.crashes: list[str] = []  # one line per crash, first first
        self.gave_up: str | None = None
        self.launches = 0
        self._page_crashes: list[str] = []  # URL of every page whose "crash" event came
        self._handled = 0  # page crashes already counted in self.crashes
        self._fail_once: str | None = None  # a launch failure, failed once, then skipped on
        self.browser: Any = None  # playwright's Browser, once launched
        try:
            self.browser = self._launch()
        except RuntimeError as e:
            self._fail_once = self.gave_up = str(e)

    # -- launching
    def _launch(self):
        self.launches += 1
        n = self.launches
        self.log = self.workdir / f"chromium-{n}.log"
        self.status = self.workdir / f"chromium-{n}.rc"
        wrapper = self.workdir / f"chromium-{n}.sh"
        exe, log, status = (shlex.quote(str(x)) for x in (self.executable, self.log, self.status))
        # Not exec: the shell outlives Chromium to write its exit status (128 + the signal).
        wrapper.write_text(f'#!/bin/sh\n{exe} "$@" 2>>{log}\nrc=$?\necho $rc > {status}\n'
                           f'exit $rc\n')
        wrapper.chmod(0o755)
        try:
            browser = self.playwright.chromium.launch(executable_path=str(wrapper),
                                                      args=CHROMIUM_ARGS)
        except Exception as e:  # playwright's Error: one line, with what Chromium said
            raise RuntimeError(f"Chromium ({self.executable}) did not start: "
                               f"{str(e).splitlines()[0]}; its last words: "
                               f"{self._why(0) or 'none'}") from None
        return browser

    def close(self) -> None:
        with contextlib.suppress(Exception):  # a browser that is already dead
            self.browser.close()

    def check(self) -> None:
        """Fail (once, in one line) when Chromium did not start; skip, with the one shared
        reason, once Chromium is given up on."""
        if self._fail_once:
            line, self._fail_once = self._fail_once, None
            pytest.fail(line, pytrace=False)
        if self.gave_up:
            pytest.skip(self.gave_up)

    # -- what the tests call
    def new_context(self, **kwargs):
        """browser.new_context(**kwargs), with its pages watched for crashes. A crash that an
        earlier, unguarded test met is counted here first (restart, or skip after two)."""
        self._count_unguarded_crash()
        self.check()
        context = self.browser.new_context(**kwargs)
        context.on("page", lambda page: page.on("crash", lambda p: self._page_crashes.append(
            p.url)))
        return context

    def new_page(self, **kwargs):
        return self.new_context(**kwargs).new_page()

    @contextlib.contextmanager
    def watch(self, where: str):
        """Run browser work; yields a Watch whose .crash is the one-line report of a crash of
        the page or the browser during the block (the crash's own exception is swallowed; any
        other exception passes through). Chromium is restarted or given up on after a crash."""
        self._count_unguarded_crash()
        w, seen, mark = Watch(where), len(self._page_crashes), self._log_size()
        try:
            yield w
        except Exception as e:
            if not self._crashed(seen, e):
                self._pump()  # a "crash" event may be on its way behind the exception
                if not self._crashed(seen, e):
                    raise
            w.crash = self._report(where, seen, mark)
        else:
            if self._crashed(seen, None):
                w.crash = self._report(where, seen, mark)
        if w.crash:
            self._handled = len(self._page_crashes)
            self._after_crash(w.crash)

    @contextlib.contextmanager
    def guard(self, where: str):
        """watch(where) for a test: a crash fails the test with its one line (no traceback);
        after two crashes the test skips with the shared reason."""
        self.check()
        with self.watch(where) as w:
            yield w
        if w.crash:
            then = ("the remaining browser tests skip" if self.gave_up
                    else "Chromium was restarted for the next tests")
            # Raised while the crash's own exception is being handled: without "from None"
            # pytest would print that one too ("During handling of the above exception").
            raise pytest.fail.Exception(f"{w.crash}; {then}", pytrace=False) from None

    # -- inside
    def _crashed(self, seen: int, e: Exception | None) -> bool:
        return (len(self._page_crashes) > seen or not self.browser.is_connected()
                or (e is not None and any(w in str(e) for w in _PAGE_CRASH_WORDS)))

    def _pump(self) -> None:
        """One round trip to Chromium, so that playwright delivers the events it holds."""
        with contextlib.suppress(Exception):
            self.browser.new_context().close()

    def _log_size(self) -> int:
        try:
            return self.log.stat().st_size
        except OSError:
            return 0

    def _why(self, mark: int) -> str | None:
        """The last line of Chromium's stderr since byte `mark` that says why something died."""
        try:
            with open(self.log, "rb") as fh:
                fh.seek(mark)
                text = fh.read().decode(errors="replace")
        except OSError:
            return None
        why = [re.sub(r"^\[[^\]]*\]\s*", "", ln).strip() for ln in text.splitlines()
               if _WHY_LINE.search(ln) and "crashpad" not in ln]
        return why[-1][:200] if why else None

    def _exit_status(self, wait_s: float = 3.0) -> int | None:
        deadline = time.monotonic() + wait_s  # the wrapper writes it just after Chromium ends
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError, ValueError):
                return int(self.status.read_text().strip())
            time.sleep(0.05)
        return None

    def _report(self, where: str, seen: int, mark: int) -> str:
        from andrea_lab.process import signal_name

        said = self._why(mark)
        if not self.browser.is_connected():
            rc = self._exit_status()
            if rc is None:
                how = "no exit status: the process may still be running, or it was killed " \
                      "with its wrapper"
            elif rc > 128:
                how = f"killed by {signal_name(128 - rc)}"
                how += ", often the out-of-memory killer" if rc == 137 else ""
            else:
                how = f"exit status {rc}"
            what = f"Chromium's browser process died ({how})"
        else:
            what = "the page crashed (its renderer process died; Chromium does not report " \
                   "the renderer's signal)"
            if len(self._page_crashes) > seen and self._page_crashes[-1] not in ("", "about:blank"):
                what += f" at {self._page_crashes[-1]}"
        return f"{where}: {what}" + (f"; Chromium logged: {said}" if said else "")

    def _count_unguarded_crash(self) -> None:
        if self.gave_up or self.browser is None:
            return
        if not self.browser.is_connected():
            self._after_crash(self._report("an earlier browser test", len(self._page_crashes), 0))
        elif len(self._page_crashes) > self._handled:
            self._handled = len(self._page_crashes)
            self._after_crash(f"{self._page_crashes[-1]}: the page crashed in an earlier test")

    def _after_crash(self, line: str) -> None:
        self.crashes.append(line)
        self.close()
        if len(self.crashes) >= 2:
            self.gave_up = (f"Chromium crashed twice, so the remaining browser tests skip; the "
                            f"first crash: {self.crashes[0]}")
            return
        try:
            self.browser = self._launch()
        except RuntimeError as e:
            self.gave_up = f"Chromium could not be restarted after a crash ({line}): {e}"
        self._handled = len(self._page_crashes)


@pytest.fixture(scope="session")
def browser(tmp_path_factory):
    if not CHROMIUM.exists():
        pytest.skip(f"{CHROMIUM} is missing: install Debian's chromium (scripts/test.sh does, "
                    f"as root: apt-get install -y chromium) to run the browser tests")
    from playwright.sync_api import sync_playwright

    pw = sync_playwright().start()
    chromium = Chromium(pw, CHROMIUM, tmp_path_factory.mktemp("chromium"))
    yield chromium
    chromium.close()
    pw.stop()
