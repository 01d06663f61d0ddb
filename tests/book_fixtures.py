"""Session fixtures shared by every test of the built book (tests/test_book*.py): one build of
the whole book (ANDREA_BOOK_BUILD=1 ANDREA_FAST=1, -W -n), a local HTTP server over it, and
Debian's chromium driven by playwright. Registered in conftest.py.

Set ANDREA_BUILT_BOOK=<folder with index.html> to test an existing build instead of building.
"""
from __future__ import annotations

import functools
import http.server
import json
import os
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

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


def _save_report(book: BuiltBook) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    (ARTIFACTS / "book_report.json").write_text(json.dumps(book.report, indent=1) + "\n")


@pytest.fixture(scope="session")
def built_book(tmp_path_factory):
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
    cmd = [str(Path(sys.executable).with_name("jupyter-book")), "build", str(REPO), "--all",
           "-W", "-n", "--keep-going", "--path-output", str(out)]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=BUILD_TIMEOUT_S)
    seconds = time.perf_counter() - t0
    log = proc.stdout + proc.stderr
    ARTIFACTS.mkdir(exist_ok=True)
    (ARTIFACTS / "book_build.log").write_text(log)
    book = BuiltBook(html=out / "_build" / "html", rc=proc.returncode, log=log, seconds=seconds)
    book.report["build"] = {"seconds": round(seconds, 1), "rc": proc.returncode,
                            "command": " ".join(cmd[1:])}
    print(f"[book] built in {seconds:.1f} s (rc={proc.returncode})")
    yield book
    _save_report(book)


class _Handler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):  # keep the test output quiet
        pass


@pytest.fixture(scope="session")
def site(built_book):
    """Base URL of the built HTML, served on 127.0.0.1 at a free port."""
    # A build that only warned still wrote its pages: test them too (the build test fails).
    if not (built_book.html / "index.html").exists():
        pytest.fail(f"the book build wrote no index.html (rc={built_book.rc}; see "
                    f"test_book_builds_without_warnings)")
    handler = functools.partial(_Handler, directory=str(built_book.html))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()
    server.server_close()
    thread.join()


@pytest.fixture(scope="session")
def browser():
    if not CHROMIUM.exists():
        pytest.skip(f"{CHROMIUM} is missing: install Debian's chromium (scripts/test.sh does, "
                    f"as root: apt-get install -y chromium) to run the browser tests")
    from playwright.sync_api import sync_playwright

    pw = sync_playwright().start()
    b = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
    yield b
    b.close()
    pw.stop()
