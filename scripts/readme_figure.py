"""Draws the README picture with the book's own code: book/images/andrea_overview.png.

    python scripts/readme_figure.py            # ANDREA-120M: d_model=768, n_head=12

The figure is andrea_edu.figures.viz.overview_figure (fused Q/K/V -> heads -> concat -> W_O, one colour
per head); the PNG carries no timestamp, so rerunning it changes nothing unless the code did.
"""
from __future__ import annotations

import argparse
from pathlib import Path

from andrea_edu.config import ANDREA_120M
from andrea_edu.figures.viz import overview_figure, savefig_for_readme

OUT = Path(__file__).resolve().parents[1] / "book" / "images" / "andrea_overview.png"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--dpi", type=int, default=100)
    args = ap.parse_args()
    fig = overview_figure(n_head=ANDREA_120M.n_head, d_model=ANDREA_120M.d_model)
    size = savefig_for_readme(fig, args.out, dpi=args.dpi, max_bytes=150_000)
    print(f"wrote {args.out} ({size / 1024:.0f} KiB)")


if __name__ == "__main__":
    main()
