"""Shared test setup: the CPU instruction sets pinned before torch loads (results re-checked
against committed ones are then the same bits on every x86-64 machine; andrea_edu.env), and
notebook execution polls the kernel in short slices (see the extension)."""
import sys
from pathlib import Path

import pytest

from andrea_edu.env import pin_cpu_isa  # noqa: E402  (andrea_edu pins before importing torch)

pin_cpu_isa()  # warns if a plugin imported torch first; notebooks' kernels inherit the settings

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "book" / "_ext"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import andrea_zmq_poll  # noqa: E402

andrea_zmq_poll.patch()

from book_fixtures import book_build, browser, built_book, site  # noqa: E402,F401 (fixtures)


# Files whose tests share nothing (each runs its own notebook kernel): spread test by test.
SPREAD = {"tests/test_notebooks.py", "tests/test_exercises.py"}


def pytest_collection_modifyitems(config, items):
    """Under pytest-xdist (scripts/test.sh runs `-n` workers with `--dist loadgroup`), keep each
    test file on one worker (its module fixtures are then built once), and every test of the built
    book or the browser on one worker (the session's one book build and one Chromium); the tests of
    SPREAD files go to whichever worker is free."""
    shared = {"book_build", "built_book", "browser", "site"}
    for item in items:
        path = item.nodeid.split("::")[0]
        if shared & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.xdist_group(name="book"))
        elif path not in SPREAD:
            item.add_marker(pytest.mark.xdist_group(name=path))
