"""A laboratory command's process: it re-runs itself in a child with the CPU pins filled in or
dropped, passes signals on to that child, and exits as a shell reports a process a signal ended.

    rerun_pinned(module)      a command whose CPU results are committed (make_sweep,
                              make_realtext_paths), started without every pin: run it again pinned
    rerun_unpinned(module)    a timing command (bench, pipeline_timing) whose torch loaded pinned:
                              run it again at this CPU's own speed (native_isa_env)
    run_child(cmd, env)       a child that dies with this process and receives its SIGTERM/SIGINT
    child_status, signal_name a child's exit status, a killing signal said in one line
    sigterm_interrupts()      SIGTERM/SIGHUP as Ctrl-C, so a command saves what it measured;
    stop_signal(e)            which signal that was (the command exits 128 + it)
    die_with_parent(parent)   the kernel SIGKILLs this process when its parent dies (a child's
                              preexec_fn, a process pool's initializer)
The pins themselves (PINNED_ISA, pin_cpu_isa, pinning_wanted) stay in andrea_edu.env: the
chapters use them too. Only the laboratory's commands, scripts and tests import this module.
Standard library only.
"""
from __future__ import annotations

import contextlib
import os
import sys

from andrea_edu.env import ISA_KNOBS, PINNED_ISA, is_x86, pinning_wanted


def die_with_parent(parent: int | None = None) -> bool:
    """Ask the kernel to SIGKILL this process when its parent dies (Linux prctl
    PR_SET_PDEATHSIG, through ctypes): a child doing a command's work then stops when the
    process the user sees is killed, kill -9 included. `parent`: the pid the caller expects as
    its parent; if it is already gone (it died before the call), exit at once. True when set
    (False off Linux). Used as a subprocess preexec_fn and as a process pool's initializer."""
    if not sys.platform.startswith("linux"):
        return False
    import ctypes
    import signal
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        ok = libc.prctl(1, int(signal.SIGKILL), 0, 0, 0) == 0  # 1 = PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return False
    if parent is not None and os.getppid() != parent:
        os._exit(137)  # the parent died between the fork and the prctl
    return ok


def rerun_pinned(module: str) -> int | None:
    """For the __main__ of a command whose CPU results are committed: when pinning is wanted and
    this process did not start with every knob set (torch is loaded by now, too late to pin), run
    the same command again in a child with the pins filled in and return its exit status; None
    when the knobs are in place (then the caller goes on). The mirror of `rerun_unpinned`."""
    if not pinning_wanted() or all(k in os.environ for k in ISA_KNOBS):
        return None
    child = dict(os.environ)
    for k, v in PINNED_ISA.items():
        child.setdefault(k, v)
    rc = run_child([sys.executable, "-m", module, *sys.argv[1:]], env=child)
    return child_status(f"python -m {module}", rc)


def rerun_unpinned(module: str) -> int | None:
    """For a timing command's __main__: when this process's torch was loaded pinned, run the
    same command again in a child with `native_isa_env` and return its exit status; None when
    the process is already unpinned (then the caller goes on)."""
    if not timing_process_is_pinned():
        return None
    rc = run_child([sys.executable, "-m", module, *sys.argv[1:]], env=native_isa_env())
    return child_status(f"python -m {module}", rc)


def native_isa_env(environ=None) -> dict[str, str]:
    """A copy of the environment for a child process that must run at this CPU's full speed
    (timings): ANDREA_CPU_ISA=native and the pinned knobs removed. Why: the oneDNN cap makes
    bfloat16 matmuls fall back to a reference path (measured: 736 ms instead of 2.8 ms for
    512x768 @ 768x2304 on an AVX512-BF16 Xeon), and MKL's AVX2 path costs fp32 sgemm about 1.5x.
    Timings are measured unpinned; their provenance says so."""
    env = dict(os.environ if environ is None else environ)
    for k, v in PINNED_ISA.items():
        if env.get(k) == v:
            env.pop(k)
    env["ANDREA_CPU_ISA"] = "native"
    return env


def timing_process_is_pinned() -> bool:
    """True when torch in this process was loaded with a pinned knob (so timings would be slow)."""
    return is_x86() and any(os.environ.get(k) == v for k, v in PINNED_ISA.items())


def run_child(cmd: list[str], env: dict | None = None) -> int:
    """Run cmd as a child that does this command's work, and return its exit status (negative:
    the signal that ended it). The child dies with this process (`die_with_parent`: kill -9 of
    the visible process stops the work, and the child writes nothing more) and runs in its own
    process group; SIGTERM, SIGINT and SIGHUP sent to this process are passed on to it once, so
    that it can save what it measured and say so in one line."""
    import signal
    import subprocess
    me = os.getpid()

    def setup() -> None:  # in the child, before exec
        os.setpgid(0, 0)  # Ctrl-C reaches the child once, through this process
        die_with_parent(me)
    proc = subprocess.Popen(cmd, env=env, preexec_fn=setup if os.name == "posix" else None)
    passed = (signal.SIGTERM, signal.SIGINT) + ((signal.SIGHUP,) if hasattr(signal, "SIGHUP")
                                                 else ())
    old = {}

    def forward(signum, frame):
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signum)
    try:
        for s in passed:
            with contextlib.suppress(ValueError, OSError):  # not the main thread
                old[s] = signal.signal(s, forward)
        while True:
            try:
                return proc.wait()
            except KeyboardInterrupt:  # a handler not installed: pass it on and wait
                forward(signal.SIGINT, None)
    finally:
        for s, h in old.items():
            with contextlib.suppress(ValueError, OSError):
                signal.signal(s, h)
        if proc.poll() is None:  # this process is leaving (an exception): the child too
            proc.kill()
            proc.wait()


def child_status(what: str, rc: int) -> int:
    """A child's exit status for the parent to return: a child killed by a signal is reported in
    one line on stderr (which signal) and becomes 128 + its number, as a shell reports it."""
    name = signal_name(rc)
    if name is None:
        return rc
    print(f"{what}: the process died from {name}; nothing it was writing was replaced "
          f"(writes are atomic)", file=sys.stderr)
    return 128 - rc


def signal_name(rc: int) -> str | None:
    """'SIGSEGV (segmentation fault)' for a child's negative return code, else None."""
    import signal
    if rc >= 0:
        return None
    try:
        sig = signal.Signals(-rc)
    except ValueError:
        return f"signal {-rc}"
    desc = signal.strsignal(sig) if hasattr(signal, "strsignal") else None
    return f"{sig.name} ({desc.lower()})" if desc else sig.name


@contextlib.contextmanager
def sigterm_interrupts():
    """While inside, SIGTERM (and SIGHUP) stop this process as Ctrl-C does, with
    KeyboardInterrupt, so that a command can save what it measured and say in one line what was
    left unwritten (the default action ends the process on the spot); the previous handlers
    come back on leaving. Only from the main thread; elsewhere a no-op."""
    import signal

    def stop(signum, frame):
        raise KeyboardInterrupt(f"signal {signal.Signals(signum).name}")
    old = {}
    for s in (signal.SIGTERM, getattr(signal, "SIGHUP", None)):
        if s is not None:
            with contextlib.suppress(ValueError, OSError):
                old[s] = signal.signal(s, stop)
    try:
        yield
    finally:
        for s, h in old.items():
            with contextlib.suppress(ValueError, OSError):
                signal.signal(s, h)


def stop_signal(e: BaseException) -> int:
    """The signal that stopped a command, from the KeyboardInterrupt it raised: SIGTERM or SIGHUP
    under `sigterm_interrupts` (its message names the signal), else SIGINT (Ctrl-C). A command
    exits with 128 + this number, as a shell reports a process the signal ended."""
    import signal
    words = str(e).split()
    if len(words) == 2 and words[0] == "signal" and words[1] in signal.Signals.__members__:
        return int(signal.Signals[words[1]])
    return int(signal.SIGINT)
