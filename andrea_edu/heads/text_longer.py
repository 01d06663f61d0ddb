"""More real-text runs that ask what it takes for induction heads to appear.

Introduced in the chapter "Heads on real text" (section "Circuits across layers"). The committed
run (`realtext_run.json`, 2 layers, 128-character windows, 1200 steps) has no induction head.
Each run here changes one thing, within a budget of 10 minutes of CPU per run (CPU_BUDGET), and
keeps everything else, the code included, of the committed run (`text_training.train`):

  long   windows of 256 characters (twice the distance over which a name can be seen again) in
         batches of 16 (the same 4,096 characters per step), 600 steps;
  deep   3 layers instead of 2, 800 steps;
  steps  the committed model and context, 1400 steps instead of 1200.

A chapter reads a committed variant (`load_variant`, `variant_run`) or, in fast mode, trains a few
of its steps now; the run JSON records the CPU seconds the committed run took. The runs are made
by the laboratory (pinned CPU numerics, one torch thread, JSON and weights written as one unit):

    python -m andrea_lab.make_realtext_variant --variant deep --out book/data/realtext_deep_run.json
"""
from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass
from pathlib import Path

from ..data import find_data
from . import text_runs as R
from .run import Run
from . import text_training as TT

MODULE = "andrea_lab.make_realtext_variant"  # the command that trains and writes a variant
CPU_BUDGET = 600.0  # seconds of CPU per run (issue 20: "<= 10 minutes CPU for any new training run")


@dataclass(frozen=True)
class Variant:
    """One run: its command-line name, its file, what it changes, and a phrase for a reader."""
    name: str
    file: str
    changes: dict
    what: str

    @property
    def weights(self) -> str:
        return R.weights_path(Path(self.file)).name


VARIANTS = {v.name: v for v in (
    Variant("long", "realtext_long_run.json",
            dict(seq_len=256, batch_size=16, steps=600, eval_every=150, eval_batch=64,
                 ablation_batch=128), "a 256-character context"),
    Variant("deep", "realtext_deep_run.json", dict(n_layer=3, steps=800, eval_every=200),
            "3 layers"),
    Variant("steps", "realtext_steps_run.json", dict(steps=1400, eval_every=350),
            "1400 steps"),
)}


def variant(name: str) -> Variant:
    """The run called `name`; ValueError (one line, the allowed names) otherwise."""
    if name not in VARIANTS:
        raise ValueError(f"variant={name!r} is not one of the runs made here; allowed: "
                         f"{', '.join(map(repr, VARIANTS))}")
    return VARIANTS[name]


def variant_settings(name: str, fast: bool | None = None) -> R.TextSettings:
    """The committed settings with the variant's changes applied (fast mode: a few steps)."""
    s = R.default_settings(False, **variant(name).changes)
    fast = R.fast_mode() if fast is None else fast
    return dataclasses.replace(s, **R.FAST) if fast else s


def command(name: str, path: Path) -> str:
    """The command as a reader types it in the repository: the output path relative to the
    working directory when it lies below it."""
    p = Path(path)
    try:
        p = p.resolve().relative_to(Path.cwd().resolve())
    except ValueError:
        pass
    return f"python -m {MODULE} --variant {name} --out {p.as_posix()}"


@functools.lru_cache(maxsize=4)
def load_variant(name: str):
    """The committed run of `name` (validated, with its model), or None when it is not there;
    loaded once per process (a page's table and its exercise read the same object)."""
    p = find_data(variant(name).file, verify=False)  # load_run checks it before reading
    return TT.load_run(p) if p is not None else None


# The exercises' fast mode: a few steps of a variant's settings, seconds of CPU (not the run).
EXERCISE_FAST = dict(steps=4, eval_every=2, eval_batch=8, ablation_batch=8)


def variant_run(name: str, fast: bool | None = None) -> Run:
    """The run `name` for a chapter cell: the committed file (validated, with its model), or,
    in fast mode, EXERCISE_FAST steps of its settings trained now (seconds; not the run, and
    said so by its provenance's "what"); with no committed file outside fast mode, the whole
    run trained now (about 10 minutes of CPU). Made once per process for the same arguments."""
    return _variant_run(name, R.fast_mode() if fast is None else fast)


def clear_caches() -> None:
    """Forget the runs and measurements made or loaded in this process (tests)."""
    for f in (_variant_run, load_variant, _evidence):
        f.cache_clear()


@functools.lru_cache(maxsize=4)
def _variant_run(name: str, fast: bool) -> Run:
    v = variant(name)
    if not fast:
        committed = load_variant(name)
        if committed is not None:
            return committed
    s = variant_settings(name, False)
    if fast:
        s = dataclasses.replace(s, **EXERCISE_FAST)
    run = TT.train(s, progress=False)
    run.provenance = {**run.provenance, "what": f"{v.what}, {s.steps} steps trained now"
                      + (" (fast mode: not the committed run)" if fast else "")}
    return run


def variant_evidence(name: str, fast: bool | None = None, B: int = 16) -> dict:
    """induction.evidence of `variant_run(name, fast)` on every character but UNK (id 0), B
    repeated sequences; computed once per process for the same arguments."""
    return _evidence(name, R.fast_mode() if fast is None else fast, B)


@functools.lru_cache(maxsize=8)
def _evidence(name: str, fast: bool, B: int) -> dict:
    from . import induction as IN
    model = variant_run(name, fast).model
    assert model is not None  # a committed run loads its weights; a trained one has its model
    return IN.evidence(model, tokens=range(1, model.cfg.vocab_size), B=B)
