"""The longer real-text runs, trained and committed (andrea_edu.heads.text_longer holds the
variants and reads the committed runs):

    python -m andrea_lab.make_realtext_variant --variant deep --out book/data/realtext_deep_run.json

re-executes itself with the CPU instruction-set pins of text_training.CPU_PINS, trains with one
torch thread, writes the run JSON and its weights as one unit (an existing file is refused
unless --replace).
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from pathlib import Path

from andrea_edu.heads import text_longer as TL
from andrea_edu.heads import text_runs as R
from andrea_edu.heads import text_training as TT
from andrea_lab.arg_checks import check_out_file
from andrea_lab.make_realtext_run import pinned_env
from andrea_lab.run_writers import outputs_exist, save_variant


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog=f"python -m {TL.MODULE}",
                                 description=TL.__doc__.splitlines()[0])
    ap.add_argument("--variant", default="long", help=f"one of {', '.join(TL.VARIANTS)}")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--replace", action="store_true", help="replace existing output files")
    ap.add_argument("--steps", type=int, help="fewer steps (a test of this command)")
    args = ap.parse_args(argv)
    raw = sys.argv[1:] if argv is None else argv
    if args.variant not in TL.VARIANTS:
        ap.error(f"--variant {args.variant!r}: allowed {', '.join(TL.VARIANTS)}")
    if args.out.suffix != ".json":
        ap.error(f"--out {args.out} must end in .json (the weights go beside it as .pt)")
    unwritable = check_out_file("--out", str(args.out), "realtext_long_run.json")
    if unwritable:  # before training, not after it
        ap.error(unwritable)
    there = outputs_exist([args.out, R.weights_path(args.out)])
    if there and not args.replace:
        ap.error(f"--out: {', '.join(map(str, there))} exist(s): committed data is not "
                 f"overwritten; pass --replace, or choose another path")
    from andrea_lab.make_realtext_run import MAX_STEPS
    if args.steps is not None and not 1 <= args.steps <= MAX_STEPS:
        ap.error(f"--steps {args.steps}: allowed an integer 1..{MAX_STEPS}")
    if args.steps is not None:  # the settings' own bounds, before a re-exec and a long run
        try:
            dataclasses.replace(TL.variant_settings(args.variant, False), steps=args.steps,
                                eval_every=max(1, args.steps // 2)).check()
        except (ValueError, TypeError) as e:
            ap.error(f"--steps {args.steps}: {str(e).splitlines()[0]}")
    if not os.environ.get("_ANDREA_PINNED"):
        env = pinned_env()
        env["_ANDREA_PINNED"] = "1"
        os.execve(sys.executable, [sys.executable, "-m", TL.MODULE, *raw], env)
    s = TL.variant_settings(args.variant, False)
    if args.steps:
        s = dataclasses.replace(s, steps=args.steps, eval_every=max(1, args.steps // 2))
    from andrea_lab.process import sigterm_interrupts
    from andrea_lab.make_realtext_run import _stopped
    written: list = []
    try:
        with sigterm_interrupts():  # SIGTERM as Ctrl-C: one line says what was left unwritten
            run = TT.train(s, progress=True)
            save_variant(run, args.variant, args.out, args.replace)  # all or nothing
            written = [args.out, R.weights_path(args.out)]
            over = run.cpu_seconds > TL.CPU_BUDGET
            print(f"wrote {args.out}: {run.wall_seconds:.0f} s wall, {run.cpu_seconds:.0f} s CPU"
                  + (f" (OVER the {TL.CPU_BUDGET:.0f} s budget)" if over else "") + "; "
                  + "; ".join(f"{x['pattern']}: L{x['head'][0]}H{x['head'][1]} {x['score']:.3f} "
                              f"({x['ratio']:.1f}x uniform, {x['verdict']})"
                              for x in run.summary(TT.SCORE_TOL)))
    except KeyboardInterrupt as e:
        sys.exit(_stopped(e, args, written, prog=ap.prog))


if __name__ == "__main__":  # its CPU numbers are committed: pinned (it re-runs itself so)
    main()
