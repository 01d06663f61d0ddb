"""Shared test setup: the CPU instruction sets pinned before torch loads (results re-checked
against committed ones are then the same bits on every x86-64 machine; andrea_edu.env), and
notebook execution polls the kernel in short slices (see the extension)."""
import importlib.util
import sys
from pathlib import Path

import pytest

from andrea_edu.env import pin_cpu_isa  # noqa: E402  (andrea_edu.env does not load torch)

pin_cpu_isa()  # warns if a plugin imported torch first; notebooks' kernels inherit the settings

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "book" / "_ext"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import andrea_zmq_poll  # noqa: E402

andrea_zmq_poll.patch()

from book_fixtures import book_build, browser, built_book, site  # noqa: E402,F401 (fixtures)


# How scripts/test.sh's pytest-xdist workers share the tests (`xdist_scope`): each test file stays
# on one worker (its module fixtures are built once); the files that use the session's one book
# build or one Chromium share one scope; SPREAD files (each test its own notebook kernel, nothing
# shared) go test by test to whichever worker is free. (xdist's own `--dist loadgroup` marks do
# not reach the scheduler under pytest 9, which builds node ids itself: hence a scheduler here.)
BOOK_FILES = {"tests/test_book.py", "tests/test_book_offline.py", "tests/test_browser_crashes.py",
              "tests/test_publish.py"}
SPREAD = {"tests/test_notebooks.py", "tests/test_exercises.py"}
SHARED_FIXTURES = {"book_build", "built_book", "browser", "site"}


def xdist_scope(nodeid: str) -> str:
    path = nodeid.split("::")[0]
    if path in BOOK_FILES:
        return "book"
    return nodeid if path in SPREAD else path


def pytest_collection_modifyitems(config, items):
    """A test of the built book or the shared browser outside BOOK_FILES would build the book a
    second time on another worker: refuse to run, naming the file."""
    stray = sorted({it.nodeid.split("::")[0] for it in items
                    if SHARED_FIXTURES & set(getattr(it, "fixturenames", ()))} - BOOK_FILES)
    if stray:
        raise pytest.UsageError(f"tests/conftest.py: add {', '.join(stray)} to BOOK_FILES (they "
                                f"use {', '.join(sorted(SHARED_FIXTURES))})")


if importlib.util.find_spec("xdist") is not None:
    def pytest_xdist_make_scheduler(config, log):
        from xdist.scheduler import LoadScopeScheduling

        class ByScope(LoadScopeScheduling):
            def _split_scope(self, nodeid: str) -> str:
                return xdist_scope(nodeid)

        return ByScope(config, log)
