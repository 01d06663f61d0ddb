"""Signals reach the work: a command that re-runs itself in a child (bench, pipeline.timing)
passes SIGTERM/SIGINT on to it, and the child dies with the process the user sees, kill -9
included; a sweep's pool workers end with their parent; a sweep or a training stopped by
SIGTERM says in one line how far it got and what was left unwritten, and exits 128 + 15. The
processes here load andrea_edu.env and andrea_lab.process alone (standard library only), so each
test costs well under a second of CPU; the commands' tests run in this process with their long work planted (the toy training's
first AdamW costs torch's one-time import of its compiler, about 4 s, in a process that has not
trained before)."""
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
from andrea_lab import process

REPO = Path(__file__).resolve().parents[1]
LOAD_ENV = (f"import sys; sys.path.insert(0, {str(REPO)!r})\n"
            f"from andrea_edu import env\nfrom andrea_lab import process\n")
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
    code = LOAD_ENV + (f"rc = process.run_child([sys.executable, '-c', {child!r}])\n"
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
        with ProcessPoolExecutor(1, initializer=process.die_with_parent,
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
    monkeypatch.setattr(process, "timing_process_is_pinned", lambda: True)
    monkeypatch.setattr(process, "run_child", record)
    assert process.rerun_unpinned("andrea_lab.bench") == 0
    (cmd, child_env), = seen
    assert cmd[1:3] == ["-m", "andrea_lab.bench"] and child_env["ANDREA_CPU_ISA"] == "native"


# ---------------------------------------------------------------- one line says what was left unwritten
# In this process: the command's main, with its long work replaced by a plant that sends the
# process a real SIGTERM part-way (process.sigterm_interrupts turns it into KeyboardInterrupt).
def _sigterm_self() -> None:
    os.kill(os.getpid(), signal.SIGTERM)
    raise AssertionError("SIGTERM did not stop the work")  # the handler raises before this


def test_a_sweep_stopped_by_sigterm_says_how_far_it_got_and_writes_nothing(tmp_path,
                                                                         monkeypatch, capsys):
    from andrea_edu.heads import sweep as W
    from andrea_lab import make_sweep as lab_sweep
    calls: list = []

    def planted_train(settings, progress=True):
        calls.append(settings)
        if len(calls) == 2:
            _sigterm_self()
        return object()  # a run (never saved: the sweep stops at the next one)
    monkeypatch.setattr(W, "train", planted_train)
    out = tmp_path / "sweep.json"
    rc = lab_sweep.main(["--n-heads", "1", "2", "--seeds", "0", "1", "2", "--workers", "1",
                 "--out", str(out)])
    err = capsys.readouterr().err.strip()
    assert rc == 128 + signal.SIGTERM and len(err.splitlines()) == 1, err
    assert f"stopped by SIGTERM: 1 of 6 runs done, nothing written to {out}" in err, err
    assert not out.exists() and signal.getsignal(signal.SIGTERM) == signal.SIG_DFL


def _sleeping_run(args):  # a pool worker's run that would take a minute
    (Path(os.environ["_ANDREA_TEST_DIR"]) / f"w{os.getpid()}").write_text(str(os.getpid()))
    time.sleep(60)


def test_a_parallel_sweep_stopped_by_sigterm_ends_its_workers_at_once(tmp_path, monkeypatch,
                                                                    capsys):
    import threading

    from andrea_lab import make_sweep as lab_sweep
    monkeypatch.setenv("_ANDREA_TEST_DIR", str(tmp_path))
    monkeypatch.setattr(lab_sweep, "_one", _sleeping_run)  # forked workers find it in this module

    def stop_once_a_worker_runs():
        t0 = time.monotonic()
        while not list(tmp_path.glob("w*")) and time.monotonic() - t0 < 30:
            time.sleep(0.02)
        os.kill(os.getpid(), signal.SIGTERM)
    threading.Thread(target=stop_once_a_worker_runs, daemon=True).start()
    rc = lab_sweep.main(["--n-heads", "1", "2", "--seeds", "0", "--workers", "2",
                 "--out", str(tmp_path / "s.json")])
    err = capsys.readouterr().err.strip()
    assert rc == 128 + signal.SIGTERM and "0 of 2 runs done, nothing written" in err, err
    pids = [int(p.read_text()) for p in tmp_path.glob("w*")]
    assert pids and all(_gone_within(pid, 5.0) for pid in pids), "a worker still runs"


@pytest.mark.parametrize("flag", ["--out", "--toy-out", "text_longer"])
def test_a_training_stopped_by_sigterm_says_what_was_left_unwritten(flag, tmp_path, monkeypatch,
                                                                   capsys):
    from andrea_edu.heads import text_training as TT
    from andrea_edu.heads import training
    from andrea_lab import make_realtext_run as lab_tt
    monkeypatch.setenv("_ANDREA_PINNED", "1")  # no re-exec of this process with the pins
    if flag in ("--out", "text_longer"):  # the real-text trainings: stopped inside train
        monkeypatch.setattr(TT, "train", lambda s, progress=True: _sigterm_self())
    else:  # the toy training, real (fast settings), stopped at its step 2 inside fit
        fit = training.fit

        def fit_stopped_at_2(model, s, n_steps, next_batch, bar, before_step=None, *rest):
            def before(step):
                if step == 2:
                    os.kill(os.getpid(), signal.SIGTERM)
                if before_step is not None:
                    before_step(step)
            return fit(model, s, n_steps, next_batch, bar, before, *rest)
        monkeypatch.setattr(training, "fit", fit_stopped_at_2)
        tiny = training.default_settings(2, fast=True, d_model=16, n_layer=1, seq_len=8,
                                         batch_size=4, n_probes=1, probe_batch=4,
                                         eval_batch=4, eval_every=120)
        monkeypatch.setattr(TT, "toy_settings", lambda: tiny)
    out = tmp_path / "run.json"
    if flag == "text_longer":
        from andrea_edu.heads import text_longer as TL
        from andrea_lab import make_realtext_variant as lab_tl
        with pytest.raises(SystemExit) as stop:
            lab_tl.main(["--out", str(out)])
        rc, prog = stop.value.code, f"python -m {TL.MODULE}"
    else:
        rc, prog = lab_tt.main([flag, str(out)]), lab_tt.PROG
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 128 + signal.SIGTERM and err, err
    last = err[-1]  # (a progress bar may write above it)
    assert last.startswith(f"{prog}: stopped by SIGTERM") and "nothing written" in last, last
    assert str(out) in last and ".pt" in last, last
    if flag == "--toy-out":
        assert "at training step 2 of " in last, last
    assert list(tmp_path.iterdir()) == []
