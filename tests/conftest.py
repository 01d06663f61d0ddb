"""Shared test setup: notebook execution polls the kernel in short slices (see the extension)."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "book" / "_ext"))

import andrea_zmq_poll  # noqa: E402

andrea_zmq_poll.patch()
