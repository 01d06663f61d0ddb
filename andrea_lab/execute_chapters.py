"""Run chapters headless without stalls: python -m andrea_lab.execute_chapters book/*.ipynb

    python -m andrea_lab.execute_chapters book/why_heads_specialize.ipynb --timeout 600
    python -m andrea_lab.execute_chapters book/*.ipynb --fast --out /tmp/executed

Plain nbclient / nbconvert --execute now and then sits idle after a cell has finished: the
kernel's reply is there, but a ZeroMQ wake-up was missed in the asyncio poll that
jupyter_client's AsyncZMQSocketChannel.get_msg awaits, and pyzmq's poller looks again only when
its timeout fires (seen about once in 12 to 30 runs on a 2-core machine; a whole 600 s per-cell
timeout lost each time). `patch_zmq_poll` keeps get_msg's contract (a message, or queue.Empty
once `timeout` seconds have passed with none) but polls in slices of at most SLICE_S seconds, so
a missed wake-up costs half a second. The book build and the tests load the same function
(book/_ext/andrea_zmq_poll.py); this command gives it to readers who execute chapters
themselves. Each notebook runs in its own folder (where chapters find book/data), with the CPU
instruction sets pinned (andrea_edu.env) and a per-cell timeout. Exit status: 0 every notebook
ran, 1 a cell failed or timed out (one line per notebook saying which cell and why), 2 bad
arguments. Tooling of the tests, the scripts and the book build, kept out of the reader's
package: a chapter never imports it.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from queue import Empty
from time import monotonic

SLICE_S = 0.5


def patch_zmq_poll() -> None:
    """Make jupyter_client's AsyncZMQSocketChannel.get_msg poll in SLICE_S slices (idempotent)."""
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

    setattr(get_msg, "_andrea_sliced", True)  # the mark that makes this patch idempotent
    setattr(AsyncZMQSocketChannel, "get_msg", get_msg)  # a method replaced on the class


def execute_nb(nb, folder, timeout: float = 600, kernel: str = "python3",
               name: str | None = None) -> dict:
    """Execute an in-memory notebook in `folder` (outputs land in nb); returns {seconds, ok,
    error}. error: "cell N: Name: message" for the first failing cell, or the timeout, or
    "cell N (`first line`): the kernel died (killed by SIGKILL ...)", else None. `name` (the
    notebook's path) goes into a DeadKernelError's own message."""
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError, CellTimeoutError

    from andrea_edu.env import cap_threads, pin_cpu_isa

    patch_zmq_poll()
    patch_dead_kernel_message()
    pin_cpu_isa(warn=False)  # the kernel inherits the settings: committed results' bits
    cap_threads()  # and the thread caps (unless set): a loaded machine does not kill it
    client = NotebookClient(nb, timeout=timeout, kernel_name=kernel, allow_errors=False,
                            resources={"metadata": {"path": str(Path(folder).resolve())}})
    setattr(client, "andrea_notebook", name)  # read by patch_dead_kernel_message
    t0, error, cell_known = time.perf_counter(), None, False
    try:
        client.execute()
    except CellTimeoutError:
        error = f"a cell ran past the per-cell timeout of {timeout:g} s"
    except CellExecutionError as e:
        error = f"{e.ename}: {str(e.evalue).splitlines()[0] if e.evalue else ''}"
    except Exception as e:  # noqa: BLE001  (a kernel that died or never started)
        error = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
        if type(e).__name__ == "DeadKernelError":
            cell_known = hasattr(e, "andrea_cell")
            error = getattr(e, "andrea_cell", None) or dead_kernel_reason(client)
    if error and not cell_known:
        idx = next((i for i, c in enumerate(nb.cells) for o in c.get("outputs", [])
                    if o.get("output_type") == "error"), None)
        if idx is None:  # the cell that was running when time ran out
            idx = next((i for i, c in reversed(list(enumerate(nb.cells)))
                        if c.get("cell_type") == "code" and c.get("execution_count")), None)
        error = f"cell {idx}: {error}" if idx is not None else error
    return {"seconds": round(time.perf_counter() - t0, 1), "ok": error is None, "error": error}


def execute_notebook(path, timeout: float = 600, kernel: str = "python3", out_dir=None) -> dict:
    """Execute one notebook in its own folder; returns {path, seconds, ok, error, written}.
    error: "cell N: Name: message" for the first failing cell, or the timeout, else None."""
    import nbformat

    path = Path(path)
    nb = nbformat.read(path, as_version=4)
    r = execute_nb(nb, path.parent, timeout, kernel, name=str(path))
    written = None
    if out_dir is not None:
        written = Path(out_dir) / path.name
        text = nbformat.writes(nb)  # temporary file + rename: the old copy or the new, whole
        written.parent.mkdir(parents=True, exist_ok=True)
        tmp = written.with_name(f".{written.name}.{os.getpid()}.tmp")
        try:
            tmp.write_text(text, encoding="utf-8")
            os.replace(tmp, written)  # an executed notebook, not committed data: no manifest
        finally:
            tmp.unlink(missing_ok=True)
    return {"path": str(path), **r, "written": str(written) if written else None}


def dead_kernel_reason(client) -> str:
    """One line for a kernel that died: the signal that killed it when its process can still
    be asked (SIGKILL: most often the out-of-memory killer), else its exit code (1 is what
    libgomp exits with when it cannot create its threads on a loaded machine: "libgomp: Thread
    creation failed: Resource temporarily unavailable", measured with a thread limit), else that
    it is unknown."""
    from andrea_lab.process import signal_name
    proc = getattr(getattr(getattr(client, "km", None), "provisioner", None), "process", None)
    rc = proc.poll() if proc is not None and hasattr(proc, "poll") else None
    if rc is None:
        how = "no exit status could be read"
    elif rc < 0:
        how = f"killed by {signal_name(rc)}"
        if rc == -9:
            how += ", often the out-of-memory killer"
    else:
        how = f"exit status {rc}"
        if rc == 1:
            how += "; libgomp exits so when it cannot create threads on a loaded machine"
    return f"the kernel died ({how})"


# The notebook the Sphinx extension book/_ext/andrea_kernel_deaths.py says is being executed
# (myst-nb's NotebookClient is not told its file name); a client's own `andrea_notebook`
# attribute wins over it.
CURRENT_NOTEBOOK: list[str | None] = [None]


def _first_line(cell) -> str:
    lines = [ln.strip() for ln in str(cell.get("source", "")).splitlines() if ln.strip()]
    first = lines[0] if lines else ""
    return first if len(first) <= 60 else first[:57] + "..."


def patch_dead_kernel_message() -> None:
    """Make nbclient's DeadKernelError say in one line which notebook and cell were running and
    how the kernel died: '<notebook>: cell N (`first line`): the kernel died (killed by SIGKILL,
    ...)', where it used to say only "Kernel died" (idempotent).
    The book build (book/_ext/andrea_kernel_deaths.py), the tests and execute_nb install it."""
    from nbclient import NotebookClient
    from nbclient.exceptions import DeadKernelError

    orig = NotebookClient.async_execute_cell
    if getattr(orig, "_andrea_dead_kernel", False):
        return

    async def async_execute_cell(self, cell, cell_index, execution_count=None,
                                 store_history=True):
        try:
            return await orig(self, cell, cell_index, execution_count, store_history)
        except DeadKernelError as e:
            if not str(e).startswith("Kernel died"):  # already said (a nested client)
                raise
            how = dead_kernel_reason(self)  # asked now: the kernel manager is cleaned up next
            name = getattr(self, "andrea_notebook", None) or CURRENT_NOTEBOOK[0] or "a notebook"
            where = f"cell {cell_index} (`{_first_line(cell)}`)"
            err = DeadKernelError(f"{name}: {where}: {how}")
            setattr(err, "andrea_cell", f"{where}: {how}")  # execute_nb's error, without the name
            raise err from None

    setattr(async_execute_cell, "_andrea_dead_kernel", True)
    setattr(NotebookClient, "async_execute_cell", async_execute_cell)


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m andrea_lab.execute_chapters",
                                 description="Execute chapter notebooks headless, without the "
                                             "ZeroMQ stall, with a per-cell timeout.")
    ap.add_argument("notebooks", nargs="+", help="the .ipynb files to execute, e.g. book/*.ipynb")
    ap.add_argument("--timeout", type=float, default=600.0,
                    help="seconds one cell may run, a number > 0 (default 600)")
    ap.add_argument("--out", default=None,
                    help="folder for the executed copies (default: none written; the "
                         "notebooks themselves are never changed: a folder that would put a "
                         "copy over a committed file, book/ included, is refused)")
    ap.add_argument("--replace", action="store_true",
                    help="allow --out to write over committed files (a chapter in book/)")
    ap.add_argument("--fast", action="store_true",
                    help="ANDREA_FAST=1: shrunk sizes, seconds per chapter (numbers not "
                         "meaningful)")
    ap.add_argument("--kernel", default="python3", help="Jupyter kernel name (default python3)")
    return ap


def _kernel_problem(kernel: str) -> str | None:
    """One line when no Jupyter kernel of that name is installed (before any notebook runs)."""
    try:
        from jupyter_client.kernelspec import KernelSpecManager
        names = sorted(KernelSpecManager().find_kernel_specs())
    except Exception:  # noqa: BLE001  (jupyter_client missing or broken: execute_nb says so)
        return None
    if kernel not in names:
        return f"--kernel: {kernel!r} is not an installed Jupyter kernel; allowed: {', '.join(names)}"
    return None


def notebook_problem(path) -> str | None:
    """One line when `path` is not a notebook nbformat reads and validates (cut short, JSON
    that is no notebook, a cell that is no cell, larger than MAX_NOTEBOOK_BYTES, nested deeper
    than a parser may recurse), else None: what a command checks before it starts a kernel."""
    import nbformat

    from andrea_edu.data import json_depth_problem
    p = Path(path)
    try:
        size = p.stat().st_size
        if size > MAX_NOTEBOOK_BYTES:
            return (f"{path} is {size / 2**20:.0f} MiB, above the {MAX_NOTEBOOK_BYTES // 2**20} "
                    f"MiB a chapter may be")
        deep = json_depth_problem(p.read_bytes())
        if deep:
            return f"{path} {deep}"
        nb = nbformat.read(p, as_version=4)
        nbformat.validate(nb)
    except (OSError, ValueError, TypeError, AttributeError, KeyError, RecursionError,
            nbformat.ValidationError) as e:
        why = str(e).strip().splitlines()[0][:120] if str(e).strip() else type(e).__name__
        return f"{path} is not a notebook nbformat reads ({type(e).__name__}: {why})"
    return None


MAX_NOTEBOOK_BYTES = 64 * 2**20  # the book's chapters are < 1 MiB without outputs


def main(argv=None) -> int:
    from andrea_lab.arg_checks import (check_not_committed, check_number, check_out_dir, fail,
                                       first_problem)

    ap = _parser()
    a = ap.parse_args(argv)
    missing = next((n for n in a.notebooks if not (Path(n).is_file() and n.endswith(".ipynb"))),
                   None)
    problem = first_problem(
        f"notebooks: {missing} is not an .ipynb file" if missing else None,
        check_number("--timeout", a.timeout, 0.0), check_out_dir("--out", a.out),
        check_not_committed("--out", [Path(a.out) / Path(n).name for n in a.notebooks]
                            if a.out is not None else [], a.replace))
    if problem is None:  # before a kernel starts: each notebook read and validated
        problem = next(filter(None, map(notebook_problem, a.notebooks)), None)
    if problem is None:
        problem = _kernel_problem(a.kernel)
    if problem:
        return fail(ap.prog, problem)
    if a.fast:
        os.environ["ANDREA_FAST"] = "1"
    bad = 0
    for n in a.notebooks:
        r = execute_notebook(n, a.timeout, a.kernel, a.out)
        bad += not r["ok"]
        print(f"[execute] {r['path']}: {'ok' if r['ok'] else 'FAILED, ' + r['error']} "
              f"({r['seconds']} s)" + (f" -> {r['written']}" if r["written"] else ""), flush=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
