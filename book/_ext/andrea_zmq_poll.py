"""Notebook execution without 600-second stalls: poll the kernel's sockets in short slices.

What we saw: now and then nbclient sat idle for exactly its per-cell timeout (600 s) right after
a cell had finished (the kernel idle, its reply already sent), then went on with no error. The
cause is in the asyncio poll that jupyter_client's AsyncZMQSocketChannel.get_msg awaits: when a
ZeroMQ wake-up is missed, pyzmq's poller only looks at the socket again when the timeout fires,
finds the reply there, and returns it as if nothing had happened. Seen about once in 30
notebook runs on this 2-core machine, with ipykernel 6 and 7 alike.

The patch keeps get_msg's contract (a message, or queue.Empty once `timeout` seconds have passed
with none) but polls in slices of at most 0.5 s, so a missed wake-up costs half a second.
It is loaded as a Sphinx extension by the book build (_config.yml) and by tests/conftest.py.
The code lives in the laboratory's chapter runner (andrea_lab.execute_chapters.patch_zmq_poll),
where whoever executes chapters headless gets it too: python -m andrea_lab.execute_chapters
book/*.ipynb.
"""
from __future__ import annotations

from andrea_lab.execute_chapters import SLICE_S, patch_zmq_poll as patch  # noqa: F401


def setup(app):
    patch()
    return {"version": "0.1", "parallel_read_safe": True, "parallel_write_safe": True}
