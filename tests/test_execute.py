"""Headless execution without stalls (issue 12, item 7): the sliced ZeroMQ poll and the
python -m andrea_lab.execute_chapters command with its per-cell timeout."""
from __future__ import annotations

import asyncio
import threading
from typing import Any
from queue import Empty

import nbformat
import pytest

from andrea_lab import execute_chapters as X


class _MissedWakeupSocket:
    """A socket whose message is there from the `arrives`-th poll on, but whose poll is never
    woken by it: each poll only records the timeout it was given and returns at once (no real
    waiting, so a busy machine cannot change the outcome)."""

    def __init__(self, arrives: int):
        self.arrives = arrives
        self.timeouts_ms: list[int] = []

    async def poll(self, timeout_ms: int = 0):
        self.timeouts_ms.append(timeout_ms)
        return len(self.timeouts_ms) >= self.arrives


class _Channel:
    def __init__(self, socket):
        self.socket = socket

    async def _recv(self):
        return {"msg_type": "execute_reply"}


def _run(coro):
    """asyncio.run in a thread of its own: the session's playwright (tests/book_fixtures.py)
    may already run an event loop in this thread, where asyncio.run refuses to start."""
    box = {}

    def target():
        try:
            box["value"] = asyncio.run(coro)
        except BaseException as e:  # noqa: BLE001  (re-raised in the caller's thread)
            box["error"] = e

    t = threading.Thread(target=target)
    t.start()
    t.join()
    if "error" in box:
        raise box["error"]
    return box["value"]


def test_sliced_poll_asks_for_at_most_a_slice_each_time():
    from jupyter_client.channels import AsyncZMQSocketChannel
    X.patch_zmq_poll()
    get_msg: Any = AsyncZMQSocketChannel.get_msg  # the patched function, called on stand-ins
    assert get_msg._andrea_sliced
    sock = _MissedWakeupSocket(arrives=3)
    msg = _run(get_msg(_Channel(sock), timeout=60))
    assert msg["msg_type"] == "execute_reply"
    # Polled until the message was there, never once for longer than a slice: an unsliced poll
    # would ask for the whole 60 000 ms and a missed wake-up would cost all of it.
    assert len(sock.timeouts_ms) == 3
    assert all(1 <= t <= X.SLICE_S * 1000 for t in sock.timeouts_ms), sock.timeouts_ms
    with pytest.raises(Empty):  # the contract: Empty once the timeout has passed
        _run(get_msg(_Channel(_MissedWakeupSocket(10**9)), timeout=0.3))


def test_the_book_build_uses_the_same_patch():
    import andrea_zmq_poll  # book/_ext, on sys.path through conftest
    assert andrea_zmq_poll.patch is X.patch_zmq_poll


def _notebook(path, *sources):
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(s) for s in sources]
    nbformat.write(nb, path)
    return path


def test_execute_runs_in_the_notebook_folder_pinned_and_writes_copies(tmp_path, capsys):
    src = tmp_path / "book"
    src.mkdir()
    nb = _notebook(src / "a.ipynb", "import os; print(os.getcwd())",
                   "print('ISA', os.environ.get('ATEN_CPU_CAPABILITY', 'unset'))")
    out = tmp_path / "out"
    assert X.main([str(nb), "--timeout", "120", "--out", str(out)]) == 0
    assert "a.ipynb: ok" in capsys.readouterr().out
    done = nbformat.read(out / "a.ipynb", as_version=4)
    text = "".join(o.get("text", "") for c in done.cells for o in c.outputs)
    assert str(src) in text
    import os
    assert f"ISA {os.environ.get('ATEN_CPU_CAPABILITY', 'unset')}" in text  # the pins reach it
    assert nbformat.read(nb, as_version=4).cells[0].outputs == []  # the source is untouched


def test_a_cell_past_the_timeout_fails_with_one_line(tmp_path, capsys):
    nb = _notebook(tmp_path / "slow.ipynb", "x = 1", "import time; time.sleep(30)")
    assert X.main([str(nb), "--timeout", "3"]) == 1
    out = capsys.readouterr().out
    assert "slow.ipynb: FAILED, cell 1: a cell ran past the per-cell timeout of 3 s" in out


def test_an_error_names_the_cell(tmp_path, capsys):
    nb = _notebook(tmp_path / "err.ipynb", "x = 1", "raise ValueError('no data here')")
    assert X.main([str(nb)]) == 1
    assert "cell 1: ValueError: no data here" in capsys.readouterr().out


@pytest.mark.parametrize("argv, flag", [(["--timeout", "0"], "--timeout"),
                                        (["--timeout", "-5"], "--timeout")])
def test_bad_arguments_fail_fast(tmp_path, capsys, argv, flag):
    nb = _notebook(tmp_path / "a.ipynb", "1")
    assert X.main([str(nb), *argv]) == 2
    assert flag in capsys.readouterr().err
    assert X.main([str(tmp_path / "missing.ipynb")]) == 2
