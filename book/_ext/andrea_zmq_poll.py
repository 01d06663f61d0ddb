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
"""
from __future__ import annotations

from queue import Empty
from time import monotonic

SLICE_S = 0.5


def patch() -> None:
    from jupyter_client.channels import AsyncZMQSocketChannel

    if getattr(AsyncZMQSocketChannel.get_msg, "_andrea_sliced", False):
        return

    async def get_msg(self, timeout: float | None = None):
        assert self.socket is not None
        deadline = None if timeout is None else monotonic() + timeout
        while True:
            left = SLICE_S if deadline is None else min(SLICE_S, deadline - monotonic())
            if left > 0 and await self.socket.poll(max(1, int(left * 1000))):
                return await self._recv()
            if left <= 0 and await self.socket.poll(0):  # one last look at the deadline
                return await self._recv()
            if deadline is not None and monotonic() >= deadline:
                raise Empty

    get_msg._andrea_sliced = True
    AsyncZMQSocketChannel.get_msg = get_msg


def setup(app):
    patch()
    return {"version": "0.1", "parallel_read_safe": True, "parallel_write_safe": True}
