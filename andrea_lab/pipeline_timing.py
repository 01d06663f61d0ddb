"""Time every step of one ANDREA forward pass and write pipeline_<device>.json: the
measurement "The final picture" reads (andrea_edu.pipeline.timing measures and reads it).

    python -m andrea_lab.pipeline_timing --config ANDREA-120M -B 8 -T 1024 --dtype bfloat16
    save_timing(t, out_dir)    # t = andrea_edu.pipeline.timing.time_steps(...)
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

from andrea_edu.pipeline import timing as PT
from andrea_edu.pipeline.timing import DTYPES, StepTiming, pipeline_file_name
from andrea_lab.store import committed_reason, default_out_dir, stamped, write_json_atomic


def save_timing(timing: StepTiming, out_dir=None, replace: bool = False) -> Path:
    """Write `timing` as pipeline_<device_slug>.json into out_dir (default:
    `store.default_out_dir()`,
    andrea_runs/, never the book's data folder), with the folder's SHA256SUMS, as one unit.
    An existing file is replaced only with replace=True (FileExistsError otherwise), and
    committed data (andrea_lab.store.committed_reason: the committed data folder, book/data,
    whose SHA256SUMS and pins a new file changes too) is written only with replace=True."""
    out = Path(out_dir) if out_dir is not None else default_out_dir()
    path = out / timing.file_name()
    d = dict(timing.to_dict(), provenance=stamped(timing.provenance))  # + the commit
    StepTiming.from_dict(d)  # what is written must load again
    why = None if replace else committed_reason(path)
    if why:
        raise FileExistsError(f"{path} {why}; a timing is written there only when asked "
                              f"(replace=True, on the command line --replace)")
    if path.exists() and not replace:
        raise FileExistsError(f"{path} exists; a new timing does not replace it unless asked "
                              f"(replace=True, on the command line --replace, or another "
                              f"--out)")
    return write_json_atomic(path, d, manifest=True, indent=1)


def _parser(presets) -> argparse.ArgumentParser:
    from andrea_edu.dispatch import BACKENDS

    ap = argparse.ArgumentParser(prog="python -m andrea_lab.pipeline_timing",
                                 description="Time each step of one ANDREA forward pass and write "
                                             "pipeline_<device>.json (atomically).")
    ap.add_argument("--config", default="ANDREA-120M", choices=sorted(presets),
                    help="model preset (default %(default)s)")
    ap.add_argument("-B", type=int, default=1, help="batch size, an integer >= 1 (default 1)")
    ap.add_argument("-T", type=int, default=128,
                    help="sequence length, 1..the preset's block_size (default 128)")
    ap.add_argument("--dtype", default="float32", choices=sorted(DTYPES),
                    help="parameter and activation dtype (default %(default)s)")
    ap.add_argument("--backend", default="auto", choices=BACKENDS,
                    help="attention backend (default auto: the dispatcher decides)")
    ap.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"),
                    help="auto = cuda when torch sees a GPU; cuda without one is refused")
    ap.add_argument("--repeats", type=int, default=5,
                    help="timed forward passes, an integer >= 1 (default 5)")
    ap.add_argument("--out", default=None,
                    help="folder for the JSON (default: $ANDREA_OUT_DIR, else andrea_runs/; "
                         "never the book's data unless named here)")
    ap.add_argument("--replace", action="store_true",
                    help="allow the run to replace an existing pipeline_<device>.json (a "
                         "committed one included)")
    return ap


def forward_bytes(cfg, B: int, T: int, dtype: str) -> int:
    """A lower bound of what one forward pass holds at once: the parameters, one layer's
    activations (about 16 x B x T x d_model values), its attention scores (B x n_head x T x T, as
    the reference backend builds them) and the logits (B x T x vocab_size)."""
    from andrea_edu.config import param_counts
    size = torch.tensor([], dtype=DTYPES[dtype]).element_size()
    return size * (param_counts(cfg).total + 16 * B * T * cfg.d_model
                   + B * cfg.n_head * T * T + B * T * cfg.vocab_size)


def _too_big(cfg, B: int, T: int, dtype: str) -> str | None:
    """One line when a forward of this size cannot fit in this machine's memory, else None."""
    import os
    try:
        ram = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None
    need = forward_bytes(cfg, B, T, dtype)
    if need > ram:
        return (f"-B/-T: B={B}, T={T} needs at least {need / 2**30:.0f} GiB for one forward "
                f"pass of {cfg.name} in {dtype}; this machine has {ram / 2**30:.0f} GiB")
    return None


def main(argv=None) -> int:
    from andrea_lab.arg_checks import (check_device, check_int, check_out_dir, fail,
                                       first_problem)
    from andrea_edu.config import PRESETS
    from andrea_edu.dispatch import Backend
    from andrea_edu.model import AndreaModel

    ap = _parser(PRESETS)
    a = ap.parse_args(argv)
    cfg = PRESETS[a.config]
    problem = first_problem(check_int("-B", a.B, 1), check_int("-T", a.T, 1, cfg.block_size),
                            check_int("--repeats", a.repeats, 1),
                            check_device("--device", a.device), check_out_dir("--out", a.out))
    if problem is None:
        problem = _too_big(cfg, a.B, a.T, a.dtype)
    if problem:  # before building a 120M-parameter model: one line, exit status 2
        return fail(ap.prog, problem)
    from andrea_edu.bench.timing import pick_device

    dev = pick_device(a.device)
    if a.backend.startswith("cuda") and dev != "cuda":
        return fail(ap.prog, f"--backend: {a.backend} needs a CUDA GPU and this run is on the "
                             f"CPU; allowed here: auto, reference, sdpa, emulator")
    from andrea_edu.bench.timing import device_slug
    slug = device_slug(torch.cuda.get_device_properties(0).name) if dev == "cuda" else "cpu"
    target = Path(a.out if a.out is not None else default_out_dir()) / pipeline_file_name(slug)
    if target.exists() and not a.replace:  # before measuring: the target is known
        return fail(ap.prog, f"--out: {target} exists; add --replace to replace it, or give "
                             f"another --out")
    from andrea_lab.arg_checks import check_not_committed
    committed = check_not_committed("--out", [target], a.replace)  # a new file in book/data too
    if committed:
        return fail(ap.prog, committed)
    from andrea_lab.process import sigterm_interrupts, stop_signal
    t: StepTiming | None = None
    wrote: Path | None = None
    try:
        with sigterm_interrupts():
            # built on the CPU (its seeded initialisation uses a CPU generator), then moved
            model = AndreaModel(cfg, attn=Backend(a.backend)).to(device=dev, dtype=DTYPES[a.dtype])
            t = PT.time_steps(model, a.B, a.T, repeats=a.repeats, warmup=2)
            print(t.label())
            for k, v in t.shares().items():
                print(f"  {k:28s} {100 * v:5.1f} %")
            wrote = save_timing(t, a.out, replace=a.replace)  # all or nothing
            print(f"wrote {wrote}")
    except (Exception, KeyboardInterrupt) as e:
        if wrote is not None:  # stopped after the write: it is whole
            print(f"{ap.prog}: stopped ({type(e).__name__}) after writing {wrote} whole",
                  file=sys.stderr)
            return 128 + stop_signal(e) if isinstance(e, KeyboardInterrupt) else 1
        return _stopped(ap.prog, e, t, a.out, target, stop_signal(e))
    return 0


def _stopped(prog: str, e: BaseException, t: StepTiming | None, out, target: Path,
             signum: int) -> int:
    """After a failure or a signal: what was measured is saved apart, labelled incomplete, as
    bench does (andrea_lab.bench.cli._save_incomplete), and one line says so; the exit status
    is 128 + the signal's number, 2 for a refusal before anything was measured, 1 otherwise."""
    import signal

    from andrea_lab.arg_checks import fail
    from andrea_lab.bench.cli import _save_incomplete
    interrupted = isinstance(e, KeyboardInterrupt)
    why = (f"stopped by {signal.Signals(signum).name}" if interrupted else
           f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
    partial = getattr(e, "partial", None)
    if partial is None and t is not None:  # measured whole, then the report or the write failed
        partial = dict(t.to_dict(), incomplete=why)
    if partial is None:
        if interrupted:
            print(f"{prog}: {why} before a pass was measured; {target} was not written",
                  file=sys.stderr)
            return 128 + signum
        if isinstance(e, ValueError):  # e.g. a backend that cannot run this dtype or device
            return fail(prog, str(e).splitlines()[0])
        raise e
    try:
        where = _save_incomplete(partial, out, name=f"incomplete_{target.name}")
    except OSError as e2:  # the disk is full, the folder gone: say so, in the same line
        print(f"{prog}: {why}; what was measured could not be saved either ({e2}); {target} "
              f"was not written", file=sys.stderr)
        return 128 + signum if interrupted else 1
    print(f"{prog}: {why} after measuring {partial['repeats']} pass(es); what was measured is "
          f"saved, labelled incomplete, in {where}; {target} was not written", file=sys.stderr)
    return 128 + signum if interrupted else 1


if __name__ == "__main__":
    from andrea_lab.process import rerun_unpinned
    rc = rerun_unpinned("andrea_lab.pipeline_timing")  # 0 is a child's success: not "go on"
    raise SystemExit(main() if rc is None else rc)
