"""The real-text model's path ablations, measured and committed (andrea_lab.path_ablation measures
and re-checks them, andrea_edu.heads.path_runs reads them):

    python -m andrea_lab.make_realtext_paths --out book/data/realtext_paths.json
"""
from __future__ import annotations

import argparse
from pathlib import Path

import torch

from andrea_edu.data import find_data
from andrea_edu.heads import path_runs as PR
from andrea_edu.heads import text_corpus as tc
from andrea_edu.heads import text_training as TT
from andrea_lab import path_ablation as PA
from andrea_lab.arg_checks import check_out_file
from andrea_lab.run_writers import save_paths


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m andrea_lab.make_realtext_paths",
                                 description=PR.__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--replace", action="store_true", help="overwrite an existing --out")
    args = ap.parse_args(argv)
    if args.out.suffix != ".json":
        ap.error(f"--out {args.out} must end in .json")
    unwritable = check_out_file("--out", str(args.out), "realtext_paths.json")
    if unwritable:  # before measuring, not after it
        ap.error(unwritable)
    if args.out.exists() and not args.replace:
        ap.error(f"--out {args.out} exists: pass --replace to overwrite committed data")
    torch.set_num_threads(1)
    src = find_data(TT.RUN_FILE, verify=False)  # load_run checks it before reading
    if src is None:
        raise SystemExit("no committed real-text run (book/data/realtext_run.json) found")
    run = TT.load_run(src)
    sha = PR.weights_sha256(src)
    d = PA.measure(run, tc.corpus_cached(), sha)
    save_paths(d, args.out, replace=args.replace)
    print(f"wrote {args.out}: {len(d['entries'])} entries, {d['provenance']['cpu_seconds']} s CPU, "
          f"{d['provenance']['wall_seconds']} s wall")


if __name__ == "__main__":  # its CPU numbers are committed: pinned, as env.PINNED_ISA says
    from andrea_lab.process import rerun_pinned
    rc = rerun_pinned("andrea_lab.make_realtext_paths")  # None: pinned already
    if rc is None:
        main()
    raise SystemExit(rc or 0)
