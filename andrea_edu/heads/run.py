"""One training run of either laboratory: the settings it shares, the one training loop (`fit`),
what it recorded, its JSON record.

Introduced in the chapter "Why heads specialize" (the toy corpus, `heads.training.train`) and
used again in "Heads on real text" (the standard library's source, `heads.text_training.train`).
Both labs record the same core: the training loss of every step, the per-pattern losses and every
head's three pattern scores at each evaluation, the score uniform attention would get
(`baseline`), and the per-pattern ablation table after training. Each lab adds what only it
measures:

- the toy lab: parameter counts, the generator's loss floors, per-step gradient norms, the
  probes taken during training (ablation, solo value, output correlation, gradient), the heads'
  output correlations after training, and (in this process only) parameter norms;
- the real-text lab: the provenance of its corpus and machine, and the ablations' standard
  errors (its ablation batch is split into windows).

A field a lab does not measure is empty (`floors == {}`, `probes == []`) or None; `lab` says
which laboratory made the run (from its settings' class). The two JSON formats are those the
committed files have (`to_dict`; `from_dict` reads both).
"""
from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, ClassVar, NoReturn

import numpy as np
import torch

from ..data import holds_text
from ..env import book_build
from .toy_calls import LOSS_KEYS, PATTERN_NAMES

if TYPE_CHECKING:
    from andrea_edu.model import AndreaModel

KEEP_TRAIN_STEPS = 200  # a toy run stored as JSON keeps the training loss of its first steps only
TEXT_SCHEMA = 1  # the real-text run JSON's schema number (its "schema" key)


class SettingsError(ValueError):
    """Settings that cannot be trained: one line naming the field and what is allowed."""


@dataclass(frozen=True)
class RunSettings:
    """What every training run of the book shares, for both corpora (the toy patterns here,
    the standard library's source in heads.text_training): model size, batch, AdamW budget and
    schedule, seed and evaluation cadence. Each corpus subclasses it with its own defaults and
    its own extra fields (`Settings`, `text_runs.TextSettings`); the schedule (`lr_at`), the
    checks (`check`, `from_json`) and the loop (`fit`) are written once, here."""

    n_head: int = 4
    d_model: int = 64
    n_layer: int = 2
    seq_len: int = 48
    batch_size: int = 32
    steps: int = 1500
    lr: float = 1e-2  # AdamW, linear warm-up then cosine decay to 0
    warmup: int = 50
    weight_decay: float = 0.0
    seed: int = 0  # model initialisation and the training stream
    eval_every: int = 50
    eval_batch: int = 256
    LAB: ClassVar[str] = ""  # the laboratory a subclass trains for ("toy", "text"): Run.lab

    def lr_at(self, step: int) -> float:
        """The learning rate of `step`: linear warm-up over `warmup` steps, cosine decay to 0."""
        warm = min(1.0, (step + 1) / self.warmup)
        return self.lr * warm * 0.5 * (1 + math.cos(math.pi * step / self.steps))

    def check(self, machine: bool = True) -> None:
        """SettingsError (one line: the field, its value, what is allowed) unless every field is
        usable: integers (not bools) >= 1, seed and weight_decay >= 0, lr a finite number > 0,
        n_head dividing d_model; machine=True also bounds threads by this machine's CPU count."""
        cls = type(self).__name__
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if f.type in ("int", int):
                lo = 0 if f.name == "seed" else 1
                if not isinstance(v, int) or isinstance(v, bool) or v < lo:
                    raise SettingsError(f"{cls}.{f.name}={v!r} is not allowed; an integer >= {lo}")
            else:
                zero_ok = f.name == "weight_decay"
                ok = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) \
                    and (v >= 0 if zero_ok else v > 0)
                if not ok:
                    raise SettingsError(f"{cls}.{f.name}={v!r} is not allowed; a finite number "
                                        f"{'>= 0' if zero_ok else '> 0'}")
        if self.d_model % self.n_head:
            raise SettingsError(f"{cls}.n_head={self.n_head} does not divide d_model="
                                f"{self.d_model}; allowed: a divisor of d_model")
        cpus = os.cpu_count() or 1
        threads = getattr(self, "threads", 1)  # a field of the subclasses that have it
        if machine and threads > cpus:
            raise SettingsError(f"{cls}.threads={threads} is not allowed; an integer in "
                                f"1..{cpus} (this machine's CPU count)")

    def steps_to_run(self, stop_after: int | None) -> int:
        """How many steps of the schedule a training runs: all, or the first `stop_after` (the
        same learning rates as the whole run); ValueError (one line) outside 1..steps."""
        n_steps = self.steps if stop_after is None else stop_after
        if not (isinstance(n_steps, int) and 1 <= n_steps <= self.steps):
            raise ValueError(f"stop_after={stop_after!r} must be an int in 1..steps={self.steps}")
        return n_steps

    @classmethod
    def from_json(cls, text: str, base=None):
        """Settings from a JSON object of field values (the other fields from `base`, else the
        class defaults), checked: SettingsError naming the problem (not JSON, not an object, an
        unknown key, a value of the wrong type or out of range)."""
        try:
            d = json.loads(text)
        except ValueError as e:
            raise SettingsError(f"settings are not valid JSON ({e})") from None
        if not isinstance(d, dict):
            raise SettingsError(f"settings must be a JSON object, got {type(d).__name__}")
        names = [f.name for f in dataclasses.fields(cls)]
        unknown = sorted(set(d) - set(names))
        if unknown:
            raise SettingsError(f"settings: unknown key(s) {', '.join(unknown)}; allowed: "
                                f"{', '.join(names)}")
        s = dataclasses.replace(base, **d) if base is not None else cls(**d)
        s.check()
        return s


# ---------------------------------------------------------------- the one training loop
@contextlib.contextmanager
def torch_threads(n: int):
    """torch uses n threads inside the block (1: a run is bit-for-bit repeatable), its own
    number again after it."""
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def progress_bar(total: int, desc: str, enabled: bool):
    """tqdm's notebook/terminal bar when enabled and not building the book (the static page
    would keep a widget that cannot update); a no-op otherwise."""
    if enabled and not book_build():
        from tqdm.auto import tqdm
        return tqdm(total=total, desc=desc, leave=True)

    class _Null:
        def update(self, n=1): ...
        def set_postfix_str(self, s): ...
        def close(self): ...
        def write(self, s): ...
    return _Null()


def fit(model: AndreaModel, s: RunSettings, n_steps: int, next_batch, bar,
        before_step=None, after_backward=None, postfix_every: int = 50) -> np.ndarray:
    """The one training loop of the book, for both corpora: AdamW (betas 0.9, 0.98, s.weight_decay)
    over the first n_steps of s's schedule (`lr_at`), next-token loss only. next_batch() gives
    (idx, targets); before_step(step) runs before a step draws its batch (evaluations, probes),
    after_backward(step) between the backward pass and the optimizer step (gradient norms).
    Returns the training loss of every step. Interrupted (KeyboardInterrupt), it records
    `.steps_done` = (steps completed, n_steps) on the exception for the command's last line."""
    opt = torch.optim.AdamW(model.parameters(), lr=s.lr, betas=(0.9, 0.98),
                            weight_decay=s.weight_decay)
    train_loss = np.zeros(n_steps)
    step = 0
    try:
        for step in range(n_steps):
            if before_step is not None:
                before_step(step)
            x, y = next_batch()
            for g in opt.param_groups:
                g["lr"] = s.lr_at(step)
            _, loss = model(x, y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            if after_backward is not None:
                after_backward(step)
            opt.step()
            train_loss[step] = loss.item()
            bar.update()
            if step % postfix_every == 0:
                bar.set_postfix_str(f"loss {train_loss[step]:.3f}")
    except KeyboardInterrupt as e:  # Ctrl-C or SIGTERM: the CLI says how far training got
        setattr(e, "steps_done", (step, n_steps))
        bar.close()  # its last line before the command's
        raise
    bar.close()
    return train_loss



def array_of_shape(bad: Callable[[str], NoReturn], at: str, value, shape: tuple) -> np.ndarray:
    """A record's field `value` (JSON arrays; null -> NaN) as a float array of `shape`, for the
    loaders that check a record before `Run.from_dict` reads it; otherwise bad(one line naming
    `at`), which raises."""
    if holds_text(value):
        bad(f"{at} must be an array of numbers of shape {shape}, got text")
    try:
        a = np.asarray(value, dtype=float)
    except (TypeError, ValueError):
        a = None  # refused below, outside the handler: the one line without a chained traceback
    if a is None:
        bad(f"{at} must be an array of numbers of shape {shape}, got a non-numeric or ragged entry")
    if a.shape != shape:
        bad(f"{at} has shape {a.shape}, expected {shape}")
    return a

@dataclass
class Run:
    """Everything one training run recorded. `model` is None for a run loaded without weights."""

    settings: RunSettings  # heads.training.Settings (toy) or heads.text_runs.TextSettings
    train_loss: np.ndarray  # (steps,); a toy run from JSON: (KEEP_TRAIN_STEPS,)
    eval_steps: list  # steps at which the evaluation batch was measured
    eval_loss: np.ndarray  # (n_eval, 4), columns LOSS_KEYS (NaN: a pattern with no query)
    scores: np.ndarray  # (n_eval, 3, L, nh)
    baseline: np.ndarray  # (3,): the score of uniform causal attention per pattern (NaN: none)
    ablation: np.ndarray  # (L, nh, 4): loss increase when each head is removed, LOSS_KEYS
    wall_seconds: float
    cpu_seconds: float
    model: AndreaModel | None = field(default=None, repr=False)
    # ---- the real-text lab
    provenance: dict = field(default_factory=dict)  # corpus, machine, code; a toy run: {}
    # (a toy run's provenance is its sweep file's)
    ablation_se: np.ndarray | None = None  # (L, nh, 4): standard errors over the windows
    # ---- the toy lab
    param_count: int | None = None
    param_by_part: dict = field(default_factory=dict)
    floors: dict = field(default_factory=dict)  # {pattern: the generator's irreducible loss}
    grad_norm: np.ndarray | None = None  # (steps, L, nh); from JSON: per probe window
    probes: list = field(default_factory=list)  # [{"step", "delta", "solo", "corr_max", "grad"}]
    correlations: np.ndarray | None = None  # (L, nh, nh) after training
    # (n_probes, L, nh): each head's parameter norm at each probe (measures.head_param_norms),
    # for gradients relative to the parameters' size; a run trained in this process only
    param_norm: np.ndarray | None = field(default=None, repr=False)

    @property
    def lab(self) -> str:
        """"toy" or "text": the laboratory whose settings the run was trained with."""
        return self.settings.LAB

    @property
    def final_loss(self) -> dict[str, float]:
        return dict(zip(LOSS_KEYS, map(float, self.eval_loss[-1])))

    @property
    def chance(self) -> dict[str, float]:
        """`baseline` by pattern name."""
        return dict(zip(PATTERN_NAMES, map(float, self.baseline)))

    @property
    def scores_before(self) -> np.ndarray:
        return self.scores[0]

    @property
    def scores_after(self) -> np.ndarray:
        return self.scores[-1]

    def summary(self, tol: float) -> list[dict]:
        """detectors.summary of the final scores (the real-text verdict rule); tol: the score
        margin (text_training.SCORE_TOL). Needs the ablations' standard errors."""
        from . import detectors as D
        if self.ablation_se is None:
            raise ValueError(f"summary: this {self.lab} run records no ablation standard errors "
                             f"(only real-text runs do)")
        return D.summary(self.scores_after, self.baseline, self.ablation, self.ablation_se, tol)

    # ------------------------------------------------------------ the JSON record
    def to_dict(self) -> dict:
        """The run's JSON record in its lab's format (the committed files' keys and rounding)."""
        return self._toy_dict() if self.lab == "toy" else self._text_dict()

    def _toy_dict(self) -> dict:
        """The training loss of the first KEEP_TRAIN_STEPS steps only (the evaluation losses
        cover the whole run), per-step gradient norms averaged per probe (in `probes`)."""
        def r(a, n=4):
            return np.round(np.asarray(a, dtype=float), n).tolist()
        return {"settings": dataclasses.asdict(self.settings), "param_count": self.param_count,
                "param_by_part": self.param_by_part,
                "train_loss": r(self.train_loss[:KEEP_TRAIN_STEPS]),
                "eval_steps": list(self.eval_steps), "eval_loss": r(self.eval_loss),
                "scores": r(self.scores, 3), "floors": self.floors, "chance": self.chance,
                "probes": [{k: (r(v) if k != "step" else v) for k, v in p.items()}
                           for p in self.probes],
                "ablation": r(self.ablation), "correlations": r(self.correlations, 3),
                "wall_seconds": round(self.wall_seconds, 2),
                "cpu_seconds": round(self.cpu_seconds, 2)}

    def _text_dict(self) -> dict:
        def r(a, n=5):  # rounded nested lists, nan (a pattern with no labelled query) as null
            a = np.round(np.asarray(a, dtype=float), n)
            out = a.astype(object)
            out[np.isnan(a)] = None
            return out.tolist()
        return {"schema": TEXT_SCHEMA, "settings": dataclasses.asdict(self.settings),
                "provenance": self.provenance, "train_loss": r(self.train_loss),
                "eval_steps": list(self.eval_steps), "eval_loss": r(self.eval_loss),
                "scores": r(self.scores, 4), "baseline": r(self.baseline, 6),
                "ablation": r(self.ablation), "ablation_se": r(self.ablation_se),
                "wall_seconds": round(self.wall_seconds, 2),
                "cpu_seconds": round(self.cpu_seconds, 2)}

    @classmethod
    def from_dict(cls, d: dict, settings: RunSettings, model: AndreaModel | None = None) -> Run:
        """A run from its JSON record, either format (a real-text record has "schema"). Reads
        without checking values: the loaders that check them (sweep.load_sweep,
        text_runs.load_run) call it once they have. settings: the record's settings, built by
        the caller from d["settings"] (training.Settings or text_runs.TextSettings: this module
        imports neither, both being built on it)."""
        def a(k):  # JSON null (a pattern with no labelled query) as NaN
            return np.asarray(d[k], dtype=float)
        text = "schema" in d
        common = dict(settings=settings, train_loss=a("train_loss"), eval_steps=d["eval_steps"],
                      eval_loss=a("eval_loss"), scores=a("scores"), ablation=a("ablation"),
                      wall_seconds=d["wall_seconds"], cpu_seconds=d["cpu_seconds"], model=model)
        if text:
            return cls(**common, baseline=a("baseline"), provenance=d["provenance"],
                       ablation_se=a("ablation_se"))
        probes = [{k: (v if k == "step" else np.asarray(v)) for k, v in p.items()}
                  for p in d["probes"]]
        return cls(**common, baseline=np.array([d["chance"][n] for n in PATTERN_NAMES]),
                   param_count=d["param_count"], param_by_part=d["param_by_part"],
                   floors=d["floors"], grad_norm=np.stack([p["grad"] for p in probes]),
                   probes=probes, correlations=a("correlations"))
