"""Draws the README picture with the book's own code: book/images/andrea_overview.png.

    python scripts/readme_figure.py --out book/images/andrea_overview.png   # the README's picture

Without --out it writes andrea_runs/andrea_overview.png ($ANDREA_OUT_DIR): the committed picture
changes only when named.

The figure is andrea_edu.figures.viz.overview_figure (fused Q/K/V -> heads -> concat -> W_O, one colour
per head); the PNG carries no timestamp, so rerunning it changes nothing unless the code did.
"""
from __future__ import annotations

import argparse
from pathlib import Path

from andrea_edu.config import ANDREA_120M
from andrea_edu.figures.viz import overview_figure, savefig_for_readme

OUT = Path(__file__).resolve().parents[1] / "book" / "images" / "andrea_overview.png"


def main(argv=None) -> int:
    from andrea_lab.arg_checks import check_int, check_out_file, fail, first_problem
    from andrea_lab.store import default_out_dir
    ap = argparse.ArgumentParser(prog="python scripts/readme_figure.py",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=None,
                    help=f"PNG to write (default: andrea_runs/{OUT.name}; the README's is {OUT})")
    ap.add_argument("--dpi", type=int, default=100, help="an integer in 10..600 (default 100)")
    args = ap.parse_args(argv)
    out = args.out if args.out is not None else default_out_dir() / OUT.name
    problem = first_problem(check_int("--dpi", args.dpi, 10, 600),
                            check_out_file("--out", str(out), "andrea_overview.png"))
    if problem:
        return fail(ap.prog, problem)
    args.out = out
    args.out.parent.mkdir(parents=True, exist_ok=True)
    fig = overview_figure(n_head=ANDREA_120M.n_head, d_model=ANDREA_120M.d_model)
    size = savefig_for_readme(fig, args.out, dpi=args.dpi, max_bytes=150_000)
    print(f"wrote {args.out} ({size / 1024:.0f} KiB)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
