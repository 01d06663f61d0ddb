"""Shared test setup: notebook execution polls the kernel in short slices (see the extension)."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "book" / "_ext"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import andrea_zmq_poll  # noqa: E402

andrea_zmq_poll.patch()

from book_fixtures import browser, built_book, site  # noqa: E402,F401  (session fixtures)
