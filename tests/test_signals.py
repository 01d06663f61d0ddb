"""Signals reach the work: a command that re-runs itself in a child (bench, pipeline.timing)
passes SIGTERM/SIGINT on to it, and the child dies with the process the user sees, kill -9
included; a sweep's pool workers end with their parent. The processes here load env.py alone
(standard library only), so each test costs well under a second of CPU."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from andrea_edu import env

REPO = Path(__file__).resolve().parents[1]
LOAD_ENV = (f"import importlib.util as u, sys; s = u.spec_from_file_location('env', "
            f"{str(REPO / 'andrea_edu' / 'env.py')!r}); env = u.module_from_spec(s); "
            f"sys.modules['env'] = env; s.loader.exec_module(env)\n")
pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="PR_SET_PDEATHSIG is Linux's")


def _gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return True
    return "\nState:\tZ" in state  # a zombie no one has reaped yet does no work


def _wait_for(path: Path, timeout: float = 30) -> str:
    t0 = time.monotonic()
    while not (path.exists() and path.read_text().strip()):
        assert time.monotonic() - t0 < timeout, f"{path} never appeared"
        time.sleep(0.02)
    return path.read_text().strip()


def _gone_within(pid: int, seconds: float) -> bool:
    t0 = time.monotonic()
    while not _gone(pid):
        if time.monotonic() - t0 > seconds:
            return False
        time.sleep(0.02)
    return True


def _parent(tmp: Path, child_code: str) -> subprocess.Popen:
    child = ("import os, pathlib, signal, sys, time\n"
             f"tmp = pathlib.Path({str(tmp)!r})\n" + textwrap.dedent(child_code))
    code = LOAD_ENV + (f"rc = env.run_child([sys.executable, '-c', {child!r}])\n"
                       f"print(rc)\n")
    return subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)


def test_kill_9_of_the_visible_process_stops_its_child(tmp_path):
    parent = _parent(tmp_path, """
        (tmp / "pid").write_text(str(os.getpid()))
        time.sleep(1.5)
        (tmp / "written").write_text("the child outlived its parent")
    """)
    pid = int(_wait_for(tmp_path / "pid"))
    parent.kill()
    parent.communicate()
    assert _gone_within(pid, 2.0), "the child still runs after kill -9 of its parent"
    time.sleep(0.2)
    assert not (tmp_path / "written").exists()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_sigterm_and_sigint_are_passed_on_once(tmp_path, sig):
    parent = _parent(tmp_path, """
        got = []
        def note(s, f):
            got.append(s)
        signal.signal(signal.SIGTERM, note)
        signal.signal(signal.SIGINT, note)
        (tmp / "pid").write_text(str(os.getpid()))
        t0 = time.monotonic()
        while not got and time.monotonic() - t0 < 20:
            time.sleep(0.01)
        time.sleep(0.2)  # a second delivery would land here
        (tmp / "got").write_text(",".join(map(str, got)))
        sys.exit(3)
    """)
    _wait_for(tmp_path / "pid")
    parent.send_signal(sig)
    out, _ = parent.communicate(timeout=30)
    assert out.strip() == "3"  # the child's own exit status comes back
    assert (tmp_path / "got").read_text() == str(int(sig))


def test_a_pool_worker_ends_when_its_parent_is_killed(tmp_path):
    code = LOAD_ENV + textwrap.dedent(f"""
        import os, time
        from concurrent.futures import ProcessPoolExecutor
        with ProcessPoolExecutor(1, initializer=env.die_with_parent,
                                 initargs=(os.getpid(),)) as ex:
            pid = ex.submit(os.getpid).result()
            open({str(tmp_path / 'pid')!r}, 'w').write(str(pid))
            ex.submit(time.sleep, 60).result()
    """)
    parent = subprocess.Popen([sys.executable, "-c", code])
    pid = int(_wait_for(tmp_path / "pid"))
    parent.kill()
    parent.wait()
    assert _gone_within(pid, 2.0), "the pool worker still runs after kill -9 of its parent"


def test_the_timing_commands_rerun_through_run_child(monkeypatch):
    seen: list = []

    def record(cmd, env=None) -> int:
        seen.append((cmd, env))
        return 0
    monkeypatch.setattr(env, "timing_process_is_pinned", lambda: True)
    monkeypatch.setattr(env, "run_child", record)
    assert env.rerun_unpinned("andrea_lab.bench") == 0
    (cmd, child_env), = seen
    assert cmd[1:3] == ["-m", "andrea_lab.bench"] and child_env["ANDREA_CPU_ISA"] == "native"
