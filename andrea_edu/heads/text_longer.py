"""A second real-text run that asks whether induction heads appear with a longer context.

Introduced in the chapter "Heads on real text" (section "Circuits across layers"). The committed
run (`realtext_run.json`, 2 layers, 128-character windows, 1200 steps) has no induction head. This
run asks whether a longer context is what it takes, within a 10-minute CPU budget: windows of 256
characters (twice the distance over which a name can be seen again) in batches of 16 (the same
4,096 characters per step) for 1,000 steps instead of 1,200 (4.1M characters instead of 4.9M),
evaluations every 250 steps on 64 windows and the final ablation on 128 (twice as long as the
first run's, so about the same characters; evaluation changes no weight). Cost measured on the book's 2-core machine
(shared, under load): 0.52 s of CPU per step at 256 characters (the committed 128-character run: 0.31 per step,
evaluations included), plus about
80 s for the evaluations and the final ablation, so 1,200 steps would take about 12 minutes and
1,000 about 10. Everything else, the code included, is the committed run's: it calls
`text_training.train` and `text_runs.save_run` unchanged. If it grows an induction head on fewer
characters, context is what the first run lacked; if not, the question stays open.

    python -m andrea_edu.heads.text_longer --out book/data/realtext_long_run.json

re-executes itself with the CPU instruction-set pins of `text_training.CPU_PINS`, trains with one
torch thread, writes the run JSON and its weights (`realtext_long_model.pt`, sha256 in the JSON)
atomically, and prints the CPU and wall seconds (the machine it was made on was shared: wall time
is not a measure of the work).
"""
from __future__ import annotations

import dataclasses
import os
import sys
from pathlib import Path

from . import text_runs as R
from . import text_training as TT

LONG_FILE = "realtext_long_run.json"
LONG_WEIGHTS = "realtext_long_model.pt"  # text_runs.weights_path(LONG_FILE)
MODULE = "andrea_edu.heads.text_longer"
CHANGES = dict(seq_len=256, batch_size=16, steps=1000, eval_every=250, eval_batch=64,
               ablation_batch=128)


def long_settings(fast: bool | None = None) -> R.TextSettings:
    """The committed settings with CHANGES applied (fast mode: a few steps, for tests)."""
    s = R.default_settings(False, **CHANGES)
    fast = R.fast_mode() if fast is None else fast
    return dataclasses.replace(s, **R.FAST) if fast else s


def save_long(run: R.TextRun, path: Path) -> list[Path]:
    """`text_runs.save_run` (the JSON and `weights_path(path)` as one unit, existing files
    refused), with this run's provenance lines."""
    run.provenance = {**run.provenance, "produced_by": f"python -m {MODULE} --out {path}",
                      "what": "the real-text model with a 256-character context, to look for "
                              "induction heads"}
    return R.save_run(run, Path(path))


def main(argv: list[str] | None = None) -> None:
    import argparse
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--steps", type=int, help="fewer steps (a test of this command)")
    args = ap.parse_args(argv)
    raw = sys.argv[1:] if argv is None else argv
    if not os.environ.get("_ANDREA_PINNED"):
        env = TT.pinned_env()
        env["_ANDREA_PINNED"] = "1"
        os.execve(sys.executable, [sys.executable, "-m", MODULE, *raw], env)
    if args.out.exists():
        raise SystemExit(f"--out {args.out} exists: committed data is not overwritten; move it "
                         f"away first")
    s = long_settings(False)
    if args.steps:
        s = dataclasses.replace(s, steps=args.steps, eval_every=max(1, args.steps // 2))
    run = TT.train(s, progress=True)
    save_long(run, args.out)
    print(f"wrote {args.out}: {run.wall_seconds:.0f} s wall, {run.cpu_seconds:.0f} s CPU; "
          + "; ".join(f"{x['pattern']}: L{x['head'][0]}H{x['head'][1]} {x['score']:.3f} "
                      f"({x['ratio']:.1f}x uniform, {x['verdict']})"
                      for x in run.summary(TT.SCORE_TOL)))


if __name__ == "__main__":
    main()
