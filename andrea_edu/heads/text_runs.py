"""A real-text run's settings and its files, validated on load.

Introduced in the chapter "Heads on real text"; `text_training` trains the runs (and re-exports
these names), the laboratory writes them (andrea_lab.run_writers); the record is `heads.run.Run`,
the one run type of both laboratories. A run is a JSON file (settings, provenance, losses,
scores, ablation) plus the model's weights beside it (`realtext_model.pt`), the JSON holding
their sha256. `load_run` raises DataFileError with one line that names the file and the reason.
`load_gpt2_scores` reads GPT-2 small's head scores on the same corpus, which the laboratory
measures where GPT-2's weights are (andrea_lab.gpt2_small).
"""
from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, NoReturn

import numpy as np
import torch

from ..config import AndreaConfig
from ..env import fast_mode
from ..data import DataFileError, first_nonfinite, size_problem, unsafe_to_parse
from ..model import AndreaModel
from . import text_corpus as tc
from .run import TEXT_SCHEMA, Run, RunSettings, array_of_shape

RUN_FILE = "realtext_run.json"
WEIGHTS_FILE = "realtext_model.pt"
SCHEMA = TEXT_SCHEMA


@dataclass(frozen=True)
class TextSettings(RunSettings):
    """The committed run: 2 layers, d_model 128, 8 heads of 16, 128-character windows,
    1200 AdamW steps of 32 windows (4.9M characters, 1.5 passes over the training files).
    The fields, schedule and checks it shares with the toy runs are heads.run.RunSettings'; only
    the defaults that differ from them are written here (n_layer 2, batch 32, warm-up 50, seed 0:
    the shared defaults; the seed draws the initialisation and the training windows)."""

    LAB: ClassVar[str] = "text"
    n_head: int = 8
    d_model: int = 128
    seq_len: int = 128
    steps: int = 1200
    lr: float = 3e-3  # AdamW, linear warm-up then cosine decay to 0
    weight_decay: float = 0.01
    eval_every: int = 100
    eval_batch: int = 128
    ablation_batch: int = 256
    threads: int = 1  # one torch thread: a run is bit-for-bit repeatable on one machine

    def model_config(self, vocab_size: int) -> AndreaConfig:
        return AndreaConfig(d_model=self.d_model, n_head=self.n_head, n_layer=self.n_layer,
                            vocab_size=vocab_size, block_size=self.seq_len,
                            name=f"real-text ANDREA, {self.n_layer} layers x {self.n_head} heads")


FAST = dict(steps=60, eval_every=30, eval_batch=32, ablation_batch=32)


def default_settings(fast: bool | None = None, **changes) -> TextSettings:
    fast = fast_mode() if fast is None else fast
    return TextSettings(**{**(FAST if fast else {}), **changes})


# ---------------------------------------------------------------- saving and loading
def weights_path(path: Path) -> Path:
    """The weights file that goes with the run JSON `path`, derived from its name: a stem ending
    in "_run" becomes "_model" (realtext_run.json -> realtext_model.pt, the committed pair),
    any other stem gets "_model" appended (my_experiment.json -> my_experiment_model.pt). Two
    runs written to two names never share a weights file."""
    path = Path(path)
    stem = path.stem[:-len("_run")] if path.stem.endswith("_run") else path.stem
    return path.with_name(f"{stem}_model.pt")


def _need(cond: bool, path: Path, reason: str) -> None:
    if not cond:
        raise DataFileError(f"{path}: {reason}")


def _numeric(d: dict, key: str, path: Path, shape: tuple) -> np.ndarray:
    """d[key] as a float array of `shape` (JSON null -> nan); DataFileError otherwise."""
    def bad(reason: str) -> NoReturn:
        raise DataFileError(f"{path}: {reason}")
    return array_of_shape(bad, key, d[key], shape)


def _seconds(d: dict, key: str, path: Path) -> float:
    v = d[key]
    _need(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v >= 0,
          path, f"{key} must be a finite number of seconds >= 0, got {v!r}")
    return float(v)


def _weights_entry(d: dict, path: Path) -> tuple[Path, str]:
    w: Any = d.get("weights")  # a JSON value, checked next
    _need(isinstance(w, dict) and isinstance(w.get("file"), str) and isinstance(w.get("sha256"), str),
          path, "weights must be an object with 'file' and 'sha256' strings")
    _need(w["file"] == Path(w["file"]).name and w["file"].endswith(".pt"), path,
          f"weights.file={w['file']!r} must be a .pt file name beside the JSON (no folder)")
    _need(len(w["sha256"]) == 64 and all(c in "0123456789abcdef" for c in w["sha256"]), path,
          "weights.sha256 must be 64 lowercase hex digits")
    return path.with_name(w["file"]), w["sha256"]


def _read_json(path: Path) -> dict:
    problem = unsafe_to_parse(path)  # size, manifest and pins, nesting: before it is read
    _need(problem is None, path, problem or "")
    try:
        d = json.loads(path.read_text(), parse_constant=lambda c: float("nan"))
    except (OSError, ValueError) as e:
        raise DataFileError(f"{path}: unreadable ({type(e).__name__}: {e})") from None
    bad = first_nonfinite(d)
    _need(bad is None, path, f"{bad} is NaN or infinite; expected a finite number (null marks "
          f"a missing value)")
    _need(isinstance(d, dict) and d.get("schema") == SCHEMA, path,
          f"schema must be {SCHEMA}, got {d.get('schema') if isinstance(d, dict) else type(d).__name__}")
    return d


def _settings(cls, d: dict, path: Path):
    _need(isinstance(d.get("settings"), dict), path, "settings must be an object")
    names = [f.name for f in dataclasses.fields(cls)]
    missing = [k for k in names if k not in d["settings"]]
    _need(not missing, path, f"settings lack {missing}; a run file records every field of "
          f"{cls.__name__} (a default would silently stand in)")
    try:
        s = cls(**d["settings"])
        s.check(machine=False)
    except TypeError as e:
        raise DataFileError(f"{path}: settings do not match {cls.__name__} ({e})") from None
    except ValueError as e:  # SettingsError: the field and what is allowed
        raise DataFileError(f"{path}: settings: {e}") from None
    return s


def load_run(path: Path, with_model: bool = True) -> Run:
    """Read and validate a run JSON (and its weights when with_model): its structure and its
    values (DataFileError, one line: the file, the field, what was expected). Values: the sha256
    in the folder's SHA256SUMS when listed; settings TextSettings accepts (sizes >= 1, lr > 0);
    eval_steps exactly 0, eval_every, ..., steps; losses finite, > 0 (training) or >= 0
    (evaluation) and at most twice the uniform guess ln(vocab_size); scores in [0, 1], a
    pattern's scores all missing exactly when its baseline is (no labelled query); baseline
    in (0, 1); ablations finite within +-2 ln(vocab_size), their standard errors >= 0; times
    >= 0; the weights file named, present, and matching its sha256."""
    path = Path(path)
    d = _read_json(path)
    for k in ("settings", "provenance", "train_loss", "eval_steps", "eval_loss", "scores",
              "baseline", "ablation", "ablation_se", "wall_seconds", "cpu_seconds"):
        _need(k in d, path, f"missing key {k!r}")
    s = _settings(TextSettings, d, path)
    L, nh = s.n_layer, s.n_head
    _need(isinstance(d["provenance"], dict) and isinstance(d["provenance"].get("corpus"), dict),
          path, "provenance.corpus must be an object")
    corpus_prov = d["provenance"]["corpus"]
    _need(isinstance(corpus_prov.get("content_hash"), str), path,
          "provenance.corpus.content_hash is missing")
    vocab = corpus_prov.get("vocab_size")
    _need(isinstance(vocab, int) and not isinstance(vocab, bool) and vocab >= 2, path,
          f"provenance.corpus.vocab_size must be an integer >= 2, got {vocab!r}")
    steps = list(range(0, s.steps, s.eval_every)) + [s.steps]
    _need(d["eval_steps"] == steps, path, f"eval_steps must be 0, {s.eval_every}, ..., {s.steps} "
          f"(every eval_every steps and the last), got {str(d['eval_steps'])[:60]}")
    n_eval = len(steps)
    a = {k: _numeric(d, k, path, shape) for k, shape in (
        ("train_loss", (s.steps,)), ("eval_loss", (n_eval, 4)), ("scores", (n_eval, 3, L, nh)),
        ("baseline", (3,)), ("ablation", (L, nh, 4)), ("ablation_se", (L, nh, 4)))}
    top = 2 * math.log(vocab)  # twice the loss of a uniform guess: no run gets there
    tl = a["train_loss"]
    _need(bool(np.isfinite(tl).all() and (tl > 0).all() and (tl <= top).all()), path,
          f"train_loss must be finite and in (0, {top:.2f}] (2 ln vocab_size), got "
          f"{tl[~(np.isfinite(tl) & (tl > 0) & (tl <= top))][:1].tolist()}")
    sc, bl, el = a["scores"], a["baseline"], a["eval_loss"]
    _need(bool(((bl > 0) & (bl < 1) | np.isnan(bl)).all()), path,
          f"baseline must lie in (0, 1) (or null: no labelled query), got {bl.tolist()}")
    _need(not np.isnan(bl[tc.PREV]), path, "baseline of the previous-token pattern is missing")
    for p in range(3):
        missing = np.isnan(sc[:, p])
        _need(bool(missing.all() if np.isnan(bl[p]) else not missing.any()), path,
              f"scores[:, {p}] must be all numbers (its baseline {bl[p]} is) or all null, "
              f"got {int(missing.sum())} null of {missing.size}")
        _need(bool(np.isnan(el[:, p + 1]).all() if np.isnan(bl[p]) else
                   np.isfinite(el[:, p + 1]).all()), path,
              f"eval_loss[:, {p + 1}] must be finite exactly when its pattern has a baseline")
    ok = np.isnan(sc) | ((sc >= 0) & (sc <= 1))
    _need(bool(ok.all()), path, f"scores must lie in [0, 1] (probabilities), got "
          f"{sc[~ok][:1].tolist()}")
    _need(bool(np.isfinite(el[:, 0]).all()), path, "eval_loss[:, 0] (all positions) must be finite")
    fin = el[np.isfinite(el)]
    _need(bool(((fin >= 0) & (fin <= top)).all()), path,
          f"eval_loss must lie in [0, {top:.2f}] (2 ln vocab_size)")
    for k in ("ablation", "ablation_se"):
        x = a[k]  # column 1 + p is null for a pattern with no labelled query in the batch
        for c in range(4):
            col = x[..., c]
            _need(bool(np.isfinite(col).all() or (c > 0 and np.isnan(col).all())), path,
                  f"{k}[..., {c}] must be all numbers, or (a pattern absent from the ablation "
                  f"batch) all null")
        fin = x[np.isfinite(x)]
        _need(bool((np.abs(fin) <= top).all() and (k == "ablation" or (fin >= 0).all())), path,
              f"{k} must lie within {'0' if k == 'ablation_se' else f'-{top:.2f}'} .. "
              f"{top:.2f} nats (2 ln vocab_size)")
    wall, cpu = _seconds(d, "wall_seconds", path), _seconds(d, "cpu_seconds", path)
    model = None
    if with_model:
        _need("weights" in d, path, "no weights file is named (key 'weights')")
        wpath, sha = _weights_entry(d, path)
        model = _load_weights(path, wpath, sha, s.model_config(vocab), s.seed)
    return Run.from_dict({**d, "wall_seconds": wall, "cpu_seconds": cpu}, s, model)


def _load_weights(path: Path, wpath: Path, sha: str, cfg: AndreaConfig, seed: int) -> AndreaModel:
    _need(wpath.is_file(), path, f"weights file {wpath.name} is missing")
    too_big = size_problem(wpath)  # before a byte of it is read
    _need(too_big is None, path, f"weights file {wpath.name}: {too_big}")
    from ..data import sha256_file
    _need(sha256_file(wpath) == sha, path,
          f"weights file {wpath.name} does not match the sha256 recorded in the run")
    try:
        state = torch.load(wpath, map_location="cpu", weights_only=True)
    except Exception as e:  # noqa: BLE001 - any unpickling failure is one line
        raise DataFileError(f"{wpath}: not a weights file torch.load reads ({type(e).__name__})") from None
    model = AndreaModel(cfg, seed=seed)
    try:
        model.load_state_dict(state)
    except (RuntimeError, TypeError, AttributeError) as e:
        raise DataFileError(f"{wpath}: weights do not fit the settings "
                           f"({str(e).splitlines()[0] if str(e) else type(e).__name__})") from None
    bad = [k for k, v in state.items() if not torch.isfinite(v).all()]
    _need(not bad, wpath, f"weights {bad[:3]} hold NaN or infinity")
    return model.eval()


# ---------------------------------------------------------------- the toy laboratory's model
TOY_FILE = "toy_lab_model.json"  # + toy_lab_model.pt: the toy chapter's model, for its circuits


def toy_settings():
    """The toy chapter's run (4 heads, CHAPTER_SEED), with one probe and evaluations only at the
    ends: the same weights (probes and evaluations use no randomness), in a fraction of the time."""
    from . import training as toy_training
    s = toy_training.default_settings(4, seed=toy_training.CHAPTER_SEED, fast=False)
    return dataclasses.replace(s, n_probes=1, eval_every=s.steps)


def load_toy(path: Path):
    """(settings, scores_after (3, L, nh), model, cpu_seconds) of a saved toy run; DataFileError
    (one line: the file, the field, what was expected) when it cannot be used: settings the toy
    Settings accepts, scores in [0, 1], times >= 0, the weights file matching its sha256."""
    from . import training as toy_training
    path = Path(path)
    d = _read_json(path)
    for k in ("settings", "scores_after", "wall_seconds", "cpu_seconds", "provenance", "weights"):
        _need(k in d, path, f"missing key {k!r}")
    s = _settings(toy_training.Settings, d, path)
    sc = _numeric(d, "scores_after", path, (3, s.n_layer, s.n_head))
    _need(bool(np.isfinite(sc).all() and ((sc >= 0) & (sc <= 1)).all()), path,
          "scores_after must be finite and lie in [0, 1] (probabilities)")
    _seconds(d, "wall_seconds", path)
    cpu = _seconds(d, "cpu_seconds", path)
    _need(isinstance(d["provenance"], dict), path, "provenance must be an object")
    wpath, sha = _weights_entry(d, path)
    model = _load_weights(path, wpath, sha, s.model_config(), s.seed)
    return s, sc, model, cpu


# ---------------------------------------------------------------- GPT-2 small's heads, measured
GPT2_FILE = "realtext_gpt2.json"
GPT2_COMMAND = ("python -m andrea_lab.gpt2_small --out book/data/" + GPT2_FILE
                + "   (where GPT-2 small's weights are: its --help says how to point at them)")
GPT2_SHAPE = (3, 12, 12)  # patterns (PREV, BRACKET, IDENT) x GPT-2 small's 12 layers x 12 heads


def need_windows(d: dict, path: Path) -> None:
    """A measured record's `windows` (the held-out windows it was measured on): n and seq_len
    positive integers; DataFileError, one line, otherwise."""
    w = d["windows"]
    _need(isinstance(w, dict) and all(isinstance(w.get(k), int) and not isinstance(w.get(k), bool)
                                      and w[k] > 0 for k in ("n", "seq_len")), path,
          "windows.n and windows.seq_len must be positive integers")


def load_gpt2_scores(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """GPT-2 small's pattern scores on the corpus's held-out windows, as the laboratory measured
    them where GPT-2's weights were (GPT2_COMMAND): (scores GPT2_SHAPE in [0, 1], NaN for a
    pattern without a labelled query; the uniform baseline (3,) in (0, 1), NaN likewise, and NaN
    exactly where the scores are). DataFileError, one line naming the file and field, otherwise."""
    path = Path(path)
    d = _read_json(path)
    for k in ("scores", "baseline", "windows", "provenance"):
        _need(k in d, path, f"missing key {k!r}")
    s = _numeric(d, "scores", path, GPT2_SHAPE)
    base = _numeric(d, "baseline", path, (GPT2_SHAPE[0],))
    _need(bool(np.all(np.isnan(s) | ((s >= 0) & (s <= 1)))), path, "scores must lie in [0, 1]")
    _need(bool(np.all(np.isnan(base) | ((base > 0) & (base < 1)))), path,
          "baseline must lie in (0, 1)")
    for p in range(GPT2_SHAPE[0]):
        _need(bool(np.isnan(base[p])) == bool(np.isnan(s[p]).all()), path,
              f"pattern {p}: its scores are missing exactly when its baseline is (no query)")
    need_windows(d, path)
    return s, base
