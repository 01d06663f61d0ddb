"""Many training runs (n_head x seed), stored as JSON with provenance, and checked on reload.

Introduced in "Why heads specialize" (seeds) and "Why twelve heads, not one wider head" (n_head at
a fixed d_model and budget). One run takes about 40 s of one CPU core, so the 15 runs of the
chapters' sweep are computed once by this module's command line and committed:

    python -m andrea_edu.specialization_sweep --out book/data/specialization_sweep.json

The file records how it was made (machine, versions, commit, date, settings, command, a hash of
the code that produced the numbers, the wall and CPU time of every run). A chapter that loads it
re-runs a configuration live and compares (`compare_runs`): single-threaded training is
bit-for-bit repeatable on one machine, and stays within rounding on another CPU for the first
steps (later steps may drift: training amplifies rounding differences).
"""
from __future__ import annotations

import argparse
import dataclasses
import datetime
import hashlib
import inspect
import json
import os
import platform
import subprocess
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

import numpy as np
import torch

from andrea_edu.env import __version__
from andrea_edu.heads.training import Run, Settings, default_settings, train

N_HEADS = (1, 2, 4, 8, 16)  # d_model 64: head_dim 64, 32, 16, 8, 4
SEEDS = (0, 1, 2)
DATA_NAME = "specialization_sweep.json"


def code_hash() -> str:
    """sha256 of the source of every module whose code decides the sweep's numbers."""
    from andrea_edu import attention, config, model, projections
    from andrea_edu.heads import (corpus, gradient_pressure, measures as head_measures,
                                  training as specialization)
    h = hashlib.sha256()
    for mod in (attention, config, corpus, model, projections, head_measures, specialization,
                gradient_pressure):
        h.update(inspect.getsource(mod).encode())
    return h.hexdigest()[:16]


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _git_commit() -> str:
    try:
        here = Path(__file__).resolve().parent
        return subprocess.run(["git", "rev-parse", "HEAD"], cwd=here, capture_output=True,
                              text=True, timeout=10).stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def provenance(base: Settings, n_heads, seeds, wall_seconds: float,
               command: str = "andrea_edu.specialization_sweep.run_sweep(...)") -> dict:
    return {
        "what": "specialization runs: toy ANDREA trained on andrea_edu.heads.corpus, per n_head and seed",
        "produced_by": command,
        "date_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "device": f"CPU: {_cpu_name()} ({os.cpu_count()} cores), one torch thread per run",
        "platform": platform.platform(), "python": platform.python_version(),
        "torch": torch.__version__, "numpy": np.__version__, "andrea_edu": __version__,
        "git_commit": _git_commit(), "code_hash": code_hash(),
        "base_settings": dataclasses.asdict(base), "n_heads": list(n_heads), "seeds": list(seeds),
        "total_wall_seconds": round(wall_seconds, 1),
    }


def _one(args) -> dict:
    settings, progress = args
    run = train(settings, progress=progress)
    return {"n_head": settings.n_head, "seed": settings.seed, **run.to_dict()}


def run_sweep(n_heads=N_HEADS, seeds=SEEDS, base: Settings | None = None, workers: int = 1,
              progress: bool = True, command: str | None = None) -> tuple[dict, dict]:
    """Train every (n_head, seed); returns (provenance, {(n_head, seed): Run}).

    workers > 1 trains in parallel processes (each single-threaded, so each run stays exactly
    what a single run would be). Runs trained here keep their model; see `load_sweep`.
    """
    base = base or default_settings()
    for n in n_heads:
        if base.d_model % n:
            raise ValueError(f"n_head={n} does not divide d_model={base.d_model}")
    jobs = [dataclasses.replace(base, n_head=n, seed=s) for n in n_heads for s in seeds]
    t0 = time.perf_counter()
    if workers > 1:
        runs = {}
        with ProcessPoolExecutor(workers) as ex:
            futures = [ex.submit(_one, (j, False)) for j in jobs]
            for fut in as_completed(futures):
                d = fut.result()
                runs[(d["n_head"], d["seed"])] = Run.from_dict(d)
                if progress:
                    print(f"[sweep] n_head={d['n_head']} seed={d['seed']}: "
                          f"{d['wall_seconds']:.0f} s ({len(runs)}/{len(jobs)})", flush=True)
        runs = {(j.n_head, j.seed): runs[(j.n_head, j.seed)] for j in jobs}
    else:
        runs = {(j.n_head, j.seed): train(j, progress=progress) for j in jobs}
    wall = time.perf_counter() - t0
    return provenance(base, n_heads, seeds, wall, *([command] if command else [])), runs


def save_sweep(path, prov: dict, runs: dict) -> Path:
    path = Path(path)
    payload = {"provenance": prov,
               "runs": [{"n_head": n, "seed": s, **r.to_dict()} for (n, s), r in runs.items()]}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(payload, separators=(",", ":")) + "\n")
    return path


def find_data(name: str = DATA_NAME) -> Path | None:
    """book/data/<name> seen from the repository root or from book/ (where chapters run)."""
    for p in (Path("data") / name, Path("book") / "data" / name, Path("..") / "book" / "data" / name):
        if p.is_file():
            return p
    return None


def load_sweep(path=None) -> tuple[dict, dict]:
    """(provenance, {(n_head, seed): Run}) from the JSON; runs carry no model."""
    path = Path(path) if path is not None else find_data()
    if path is None or not path.is_file():
        raise FileNotFoundError(f"no sweep file at {path}: create it with "
                                f"`python -m andrea_edu.specialization_sweep --out "
                                f"book/data/{DATA_NAME}`")
    data = json.loads(Path(path).read_text())
    runs = {(d["n_head"], d["seed"]): Run.from_dict(d) for d in data["runs"]}
    return data["provenance"], runs


def compare_runs(live: Run, stored: Run, first_steps: int = 100) -> dict:
    """How closely a live run reproduces a stored one with the same Settings: the largest
    training-loss difference over the first steps (a stored run keeps KEEP_TRAIN_STEPS of
    them, rounded to 4 decimals: identical runs differ by up to 5e-5) and, when both runs went
    the whole way, the differences of the final evaluation losses."""
    if live.settings != stored.settings:
        raise ValueError(f"settings differ: live {live.settings} vs stored {stored.settings}")
    n = min(first_steps, len(live.train_loss), len(stored.train_loss))
    diff = np.abs(np.asarray(live.train_loss[:n]) - np.asarray(stored.train_loss[:n]))
    out = {"first_steps": n, "max_diff_first_steps": float(diff.max())}
    full = live.settings.steps
    if live.eval_steps[-1] == stored.eval_steps[-1] == full:
        out["final_loss_diff"] = {k: abs(live.final_loss[k] - stored.final_loss[k])
                                  for k in live.final_loss}
    return out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=f"book/data/{DATA_NAME}")
    ap.add_argument("--n-heads", type=int, nargs="+", default=list(N_HEADS))
    ap.add_argument("--seeds", type=int, nargs="+", default=list(SEEDS))
    ap.add_argument("--workers", type=int, default=min(2, os.cpu_count() or 1))
    args = ap.parse_args(argv)
    base = default_settings(fast=False)
    command = "python -m andrea_edu.specialization_sweep " + " ".join(
        sys.argv[1:] if argv is None else argv)
    prov, runs = run_sweep(args.n_heads, args.seeds, base, workers=args.workers,
                           command=command.strip())
    path = save_sweep(args.out, prov, runs)
    print(f"wrote {path} ({path.stat().st_size / 1e3:.0f} kB): {len(runs)} runs in "
          f"{prov['total_wall_seconds']} s")


if __name__ == "__main__":
    main()
