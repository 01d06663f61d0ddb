"""Many training runs (n_head x seed), stored as JSON with provenance, and checked on reload.

Introduced in "Why heads specialize" (seeds) and "Why twelve heads, not one wider head" (n_head at
a fixed d_model and budget). One run takes about 40 s of one CPU core, so the 15 runs of the
chapters' sweep are computed once by the laboratory's command line and committed:

    python -m andrea_lab.make_sweep --out book/data/specialization_sweep.json

The file records how it was made (machine, versions, commit, date, settings, command, a hash of
the code that produced the numbers, the wall and CPU time of every run). The laboratory re-runs a
configuration and compares (`andrea_lab.make_sweep.compare_runs`, run by the tests):
single-threaded training is bit-for-bit repeatable on one machine, and stays within rounding on
another CPU for the first steps (later steps may drift: training amplifies rounding differences).

Bits and machines: the committed file is produced with the CPU instruction sets pinned to AVX2
(andrea_edu.env.pin_cpu_isa; its provenance says so under "cpu_numerics"). A re-check on a machine
with the same pins expects the stored numbers up to their 4-decimal rounding; anywhere else (ARM,
another torch build, pins switched off) it allows the spread measured across instruction-set
settings on one machine (`andrea_lab.make_sweep.recheck`, CROSS_ISA_SPREAD), and says which
comparison it made.

Validation: `load_sweep` checks the file against SWEEP_SCHEMA plus the invariants a run must
satisfy (finite losses, one run per (n_head, seed), settings that match the key), and fails with
one line naming the file and the reason (DataFileError).
"""
from __future__ import annotations

import dataclasses
import json
import os
import time
from pathlib import Path

import numpy as np

from andrea_edu.env import cpu_name
from andrea_edu.data import (DataFileError, data_search_dirs, find_data, first_nonfinite,
                             manifest_problem, new_provenance, where_looked)
from andrea_edu.heads.run import Run, array_of_shape
from andrea_edu.heads.training import Settings, default_settings, train

N_HEADS = (1, 2, 4, 8, 16)  # d_model 64: head_dim 64, 32, 16, 8, 4
SEEDS = (0, 1, 2)
DATA_NAME = "specialization_sweep.json"


def provenance(base: Settings, n_heads, seeds, wall_seconds: float,
               command: str = "andrea_edu.heads.sweep.run_sweep(...)") -> dict:
    """The sweep's provenance: the one schema's shared keys (`andrea_edu.data.new_provenance`)
    and the sweep's own: the device, the settings, the grid, the wall time (the laboratory's
    writer adds the commit and the code hash: andrea_lab.make_sweep.save_sweep)."""
    return new_provenance(
        "specialization runs: toy ANDREA trained on andrea_edu.heads.corpus, per n_head and seed",
        command,
        device=f"CPU: {cpu_name()} ({os.cpu_count()} cores), one torch thread per run",
        base_settings=dataclasses.asdict(base), n_heads=list(n_heads),
        seeds=list(seeds), total_wall_seconds=round(wall_seconds, 1))


def sweep_jobs(n_heads, seeds, base: Settings) -> list[Settings]:
    """The settings of every run of the sweep, n_head by n_head, each n_head's seeds in order;
    ValueError (one line) for an n_head that does not divide d_model, before any training."""
    for n in n_heads:
        if base.d_model % n:
            raise ValueError(f"n_head={n} does not divide d_model={base.d_model}")
    return [dataclasses.replace(base, n_head=n, seed=s) for n in n_heads for s in seeds]


def run_sweep(n_heads=N_HEADS, seeds=SEEDS, base: Settings | None = None,
              progress: bool = True, command: str | None = None) -> tuple[dict, dict]:
    """Train every (n_head, seed) here, one after the other; returns (provenance,
    {(n_head, seed): Run}). Runs trained here keep their model; see `load_sweep`. (The
    laboratory's command trains the same jobs in parallel processes: andrea_lab.make_sweep.)
    Interrupted (KeyboardInterrupt), it records `.runs_done` = (runs finished, runs)."""
    base = base or default_settings()
    jobs = sweep_jobs(n_heads, seeds, base)
    t0 = time.perf_counter()
    runs: dict = {}
    try:
        for j in jobs:
            runs[(j.n_head, j.seed)] = train(j, progress=progress)
    except KeyboardInterrupt as e:  # Ctrl-C or SIGTERM (andrea_lab.process.sigterm_interrupts): how far it got
        setattr(e, "runs_done", (len(runs), len(jobs)))
        raise
    wall = time.perf_counter() - t0
    return provenance(base, n_heads, seeds, wall, *([command] if command else [])), runs


_RUN_KEYS: dict[str, type | tuple[type, ...]] = {
    "n_head": int, "seed": int, "settings": dict, "param_count": int,
    "param_by_part": dict, "train_loss": list, "eval_steps": list, "eval_loss": list,
    "scores": list, "floors": dict, "chance": dict, "probes": list, "ablation": list,
    "correlations": list, "wall_seconds": (int, float), "cpu_seconds": (int, float)}
SWEEP_SCHEMA = {  # documentation of the format; validate_sweep checks it (and more) by hand
    "type": "object", "required": ["provenance", "runs"],
    "properties": {
        "provenance": {"type": "object"},
        "runs": {"type": "array", "minItems": 1, "items": {
            "type": "object", "required": sorted(_RUN_KEYS),
            "properties": {k: {"type": "integer" if t is int else "number" if t == (int, float)
                               else "array" if t is list else "object"}
                           for k, t in _RUN_KEYS.items()}}}},
}


def _finite(x) -> bool:
    a = np.asarray(x, dtype=float)
    return bool(np.isfinite(a[~np.isnan(a)]).all())  # NaN is allowed: "no such position"


def _in_range(bad, at: str, a: np.ndarray, lo: float, hi: float, what: str,
              nan_ok: bool = False) -> None:
    ok = (a >= lo) & (a <= hi) | (np.isnan(a) if nan_ok else False)
    if not np.all(ok):
        bad(f"{at} must be {'finite and ' if not nan_ok else ''}in [{lo:g}, {hi:g}] ({what}), "
            f"got {np.asarray(a)[~ok][:1].tolist()}")


def _check_values(bad, at: str, r: dict, st: Settings) -> None:
    """The values of one run: what each quantity can take, and agreement between fields."""
    from andrea_edu.heads.corpus import VOCAB_SIZE
    from andrea_edu.heads.run import KEEP_TRAIN_STEPS
    from andrea_edu.heads.toy_calls import PATTERN_NAMES
    from andrea_edu.model import AndreaModel, count_parameters, count_parameters_by_part
    top = 2 * np.log(VOCAB_SIZE)  # twice a uniform guess's loss: no run gets there
    L, nh = st.n_layer, st.n_head
    steps = list(range(0, st.steps, st.eval_every)) + [st.steps]
    if r["eval_steps"] != steps:
        bad(f"{at}.eval_steps must be 0, {st.eval_every}, ..., {st.steps}, got "
            f"{str(r['eval_steps'])[:60]}")
    n_eval = len(steps)
    tl = array_of_shape(bad, f"{at}.train_loss", r["train_loss"],
                        (min(st.steps, KEEP_TRAIN_STEPS),))
    _in_range(bad, f"{at}.train_loss", tl, 1e-12, top, "a loss, at most 2 ln vocab")
    el = array_of_shape(bad, f"{at}.eval_loss", r["eval_loss"], (n_eval, 4))
    _in_range(bad, f"{at}.eval_loss[:, 0]", el[:, 0], 0, top, "the loss over all positions")
    _in_range(bad, f"{at}.eval_loss", el, 0, top, "a loss, at most 2 ln vocab", nan_ok=True)
    for p in range(1, 4):  # null/NaN: the fixed evaluation batch has no such position, ever
        if np.isnan(el[:, p]).any() and not np.isnan(el[:, p]).all():
            bad(f"{at}.eval_loss[:, {p}] holds NaN at some evaluations only; a pattern's loss "
                f"is missing at every evaluation (no such position in the batch) or at none")
    sc = array_of_shape(bad, f"{at}.scores", r["scores"], (n_eval, 3, L, nh))
    _in_range(bad, f"{at}.scores", sc, 0, 1, "scores are probabilities")
    for k, lo, hi, what in (("floors", 0, top, "a loss floor in nats"),
                            ("chance", 0, 1, "a probability")):
        if sorted(r[k]) != sorted(PATTERN_NAMES):
            bad(f"{at}.{k} must have exactly the keys {list(PATTERN_NAMES)}")
        _in_range(bad, f"{at}.{k}", array_of_shape(bad, f"{at}.{k}", list(r[k].values()), (3,)),
                  lo, hi, what)
    ab = array_of_shape(bad, f"{at}.ablation", r["ablation"], (L, nh, 4))
    _in_range(bad, f"{at}.ablation", ab, -top, top, "a loss change in nats")
    co = array_of_shape(bad, f"{at}.correlations", r["correlations"], (L, nh, nh))
    _in_range(bad, f"{at}.correlations", co, -1, 1, "correlations")
    if not (np.array_equal(co, co.transpose(0, 2, 1)) and
            np.allclose(np.diagonal(co, axis1=1, axis2=2), 1, atol=1e-3)):
        bad(f"{at}.correlations must be symmetric with 1 on the diagonal (a head with itself)")
    want_steps = st.probe_steps()
    if [p.get("step") for p in r["probes"]] != want_steps:
        bad(f"{at}.probes must be at steps {want_steps} (settings.probe_steps())")
    for j, p in enumerate(r["probes"]):
        if sorted(p) != ["corr_max", "delta", "grad", "solo", "step"]:
            bad(f"{at}.probes[{j}] must have exactly step, delta, solo, corr_max, grad")
        for k, lo, hi, what in (("delta", -top, top, "a loss change"),
                                ("solo", -top, top, "a loss change"),
                                ("corr_max", -1, 1, "a correlation"),
                                ("grad", 0, 1e6, "a gradient norm")):
            _in_range(bad, f"{at}.probes[{j}].{k}",
                      array_of_shape(bad, f"{at}.probes[{j}].{k}", p[k], (L, nh)), lo, hi, what)
    meta = AndreaModel(st.model_config(), device="meta")
    if r["param_count"] != count_parameters(meta) or r["param_by_part"] != \
            count_parameters_by_part(meta):
        bad(f"{at}.param_count/param_by_part must be the model's ({count_parameters(meta)}, "
            f"{count_parameters_by_part(meta)}), got {r['param_count']}")


def validate_sweep(obj, where: str = "sweep") -> None:
    """DataFileError unless obj follows SWEEP_SCHEMA and its runs make sense: n_head and seed
    match the run's settings, no (n_head, seed) twice, exactly the runs the provenance's n_heads
    x seeds name, settings the provenance's base_settings with that n_head and seed (when it
    records them), and every value within what it can take (`_check_values`: losses finite, > 0
    and at most 2 ln vocab; scores, chance in [0, 1]; correlations in [-1, 1], symmetric;
    eval_steps and probe steps those the settings make; the parameter count the model's)."""
    def bad(msg):
        raise DataFileError(f"{where}: {msg}")
    if not isinstance(obj, dict):
        bad(f"top level is {type(obj).__name__}, not an object with 'provenance' and 'runs'")
    for k in ("provenance", "runs"):
        if k not in obj:
            bad(f"'{k}' is missing")
    if not isinstance(obj["provenance"], dict):
        bad("'provenance' is not an object")
    if not isinstance(obj["runs"], list) or not obj["runs"]:
        bad("'runs' is not a non-empty list")
    prov = obj["provenance"]
    seen = set()
    for i, r in enumerate(obj["runs"]):
        at = f"runs[{i}]"
        if not isinstance(r, dict):
            bad(f"{at} is not an object")
        for k, t in _RUN_KEYS.items():
            if k not in r:
                bad(f"{at}: '{k}' is missing")
            if not isinstance(r[k], t) or isinstance(r[k], bool):
                bad(f"{at}.{k} is {type(r[k]).__name__}, not {getattr(t, '__name__', 'number')}")
        key = (r["n_head"], r["seed"])
        if key in seen:
            bad(f"{at}: n_head={key[0]}, seed={key[1]} appears twice")
        seen.add(key)
        missing = [f.name for f in dataclasses.fields(Settings) if f.name not in r["settings"]]
        if missing:
            bad(f"{at}.settings lack {missing}; a run records every field (a default would "
                f"silently stand in)")
        try:
            st = Settings(**r["settings"])
            st.check(machine=False)
        except TypeError as e:
            bad(f"{at}.settings: {e}")
        except ValueError as e:
            bad(f"{at}.settings: {e}")
        if (st.n_head, st.seed) != key:
            bad(f"{at}: n_head={key[0]}, seed={key[1]} but its settings say n_head={st.n_head}, "
                f"seed={st.seed}")
        if isinstance(prov.get("base_settings"), dict) and r["settings"] != {
                **prov["base_settings"], "n_head": key[0], "seed": key[1]}:
            diff = sorted(k for k in set(r["settings"]) | set(prov["base_settings"])
                          if k not in ("n_head", "seed") and
                          r["settings"].get(k) != prov["base_settings"].get(k))
            bad(f"{at}.settings differ from provenance.base_settings in {diff} (only n_head "
                f"and seed vary across the sweep)")
        if not r["train_loss"] or len(r["eval_steps"]) != len(r["eval_loss"]):
            bad(f"{at}: empty train_loss, or eval_steps and eval_loss of different lengths")
        secs = [r["wall_seconds"], r["cpu_seconds"]]
        if not _finite(secs) or any(x != x or x < 0 for x in secs):
            bad(f"{at}: wall_seconds/cpu_seconds must be finite numbers >= 0, got {secs}")
        if not r["probes"] or any(not isinstance(p, dict) or "step" not in p or "grad" not in p
                                  for p in r["probes"]):
            bad(f"{at}.probes: empty, or a probe without 'step' and 'grad'")
        _check_values(bad, at, r, st)
    for k in ("n_heads", "seeds"):
        v = prov.get(k)
        if v is not None and (not isinstance(v, list) or len(set(map(str, v))) != len(v)):
            bad(f"provenance.{k} must be a list without repeats, got {v}")
    if isinstance(prov.get("n_heads"), list) and isinstance(prov.get("seeds"), list):
        want = {(n, sd) for n in prov["n_heads"] for sd in prov["seeds"]}
        if seen != want:
            bad(f"runs must be exactly provenance.n_heads x seeds: missing "
                f"{sorted(want - seen, key=str)[:3]}, unexpected {sorted(seen - want, key=str)[:3]}")


def load_sweep(path=None) -> tuple[dict, dict]:
    """(provenance, {(n_head, seed): Run}) from the JSON; runs carry no model.
    Raises FileNotFoundError (saying where it looked) or DataFileError (one line: the file and
    what is wrong with it: not JSON, truncated, a field missing, a duplicate run...)."""
    path = Path(path) if path is not None else find_data(DATA_NAME, verify=False)
    if path is None or not path.is_file():
        looked = (where_looked(DATA_NAME) if path is None else f"no sweep file at {path}")
        raise FileNotFoundError(f"{looked}: create it with `python -m "
                                f"andrea_lab.make_sweep --out book/data/{DATA_NAME}`")
    try:
        data = json.loads(Path(path).read_text(), parse_constant=lambda c: float("nan"))
    except json.JSONDecodeError as e:
        raise DataFileError(f"{path}: not valid JSON (truncated or damaged?): {e}") from None
    except (OSError, UnicodeDecodeError) as e:
        raise DataFileError(f"{path}: cannot be read: {e}") from None
    problem = manifest_problem(path)
    if problem:
        raise DataFileError(f"{path}: {problem}")
    bad = first_nonfinite(data, skip=lambda at: at.endswith(".eval_loss"))
    if bad:
        raise DataFileError(f"{path}: {bad} is NaN or infinite; expected a finite number")
    validate_sweep(data, str(path))
    try:
        runs = {(d["n_head"], d["seed"]): Run.from_dict(d, Settings(**d["settings"])) for d in data["runs"]}
    except (KeyError, TypeError, ValueError) as e:
        raise DataFileError(f"{path}: a run cannot be rebuilt ({type(e).__name__}: {e})") from None
    return data["provenance"], runs
