"""A real-text run's settings, its record, and its files: written atomically, validated on load.

Introduced in the chapter "Heads on real text"; `text_training` makes the runs (and re-exports
these names). A run is a JSON file (settings, provenance, losses, scores, ablation) plus the
model's weights beside it (`realtext_model.pt`), the JSON holding their sha256. `load_run` raises
RunFileError with one line that names the file and the reason.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from ..config import AndreaConfig
from ..env import fast_mode, write_files_as_unit
from ..model import AndreaModel
from . import detectors as D
from . import text_corpus as tc
from .training import RunSettings

RUN_FILE = "realtext_run.json"
WEIGHTS_FILE = "realtext_model.pt"
SCHEMA = 1


@dataclass(frozen=True)
class TextSettings(RunSettings):
    """The committed run: 2 layers, d_model 128, 8 heads of 16, 128-character windows,
    1200 AdamW steps of 32 windows (4.9M characters, 1.5 passes over the training files).
    The fields, schedule and checks it shares with the toy runs are heads.training.RunSettings'."""

    n_head: int = 8
    d_model: int = 128
    n_layer: int = 2
    seq_len: int = 128
    batch_size: int = 32
    steps: int = 1200
    lr: float = 3e-3  # AdamW, linear warm-up then cosine decay to 0
    warmup: int = 50
    weight_decay: float = 0.01
    seed: int = 0  # initialisation and the training windows
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


@dataclass
class TextRun:
    settings: TextSettings
    provenance: dict
    train_loss: np.ndarray  # (steps,)
    eval_steps: list
    eval_loss: np.ndarray  # (n_eval, 4) LOSS_KEYS
    scores: np.ndarray  # (n_eval, 3, L, nh)
    baseline: np.ndarray  # (3,)
    ablation: np.ndarray  # (L, nh, 4)
    ablation_se: np.ndarray  # (L, nh, 4)
    wall_seconds: float
    cpu_seconds: float
    model: AndreaModel | None = None

    @property
    def scores_after(self) -> np.ndarray:
        return self.scores[-1]

    def summary(self, tol: float) -> list[dict]:
        """detectors.summary of the final scores; tol: the verdicts' score margin (SCORE_TOL)."""
        return D.summary(self.scores_after, self.baseline, self.ablation, self.ablation_se, tol)

    def to_dict(self) -> dict:
        def r(a, n=5):  # rounded nested lists, nan (a pattern with no labelled query) as null
            a = np.round(np.asarray(a, dtype=float), n)
            out = a.astype(object)
            out[np.isnan(a)] = None
            return out.tolist()
        return {"schema": SCHEMA, "settings": dataclasses.asdict(self.settings),
                "provenance": self.provenance, "train_loss": r(self.train_loss),
                "eval_steps": list(self.eval_steps), "eval_loss": r(self.eval_loss),
                "scores": r(self.scores, 4), "baseline": r(self.baseline, 6),
                "ablation": r(self.ablation), "ablation_se": r(self.ablation_se),
                "wall_seconds": round(self.wall_seconds, 2),
                "cpu_seconds": round(self.cpu_seconds, 2)}


# ---------------------------------------------------------------- saving and loading
def weights_path(path: Path) -> Path:
    """The weights file that goes with the run JSON `path`, derived from its name: a stem ending
    in "_run" becomes "_model" (realtext_run.json -> realtext_model.pt, the committed pair),
    any other stem gets "_model" appended (my_experiment.json -> my_experiment_model.pt). Two
    runs written to two names never share a weights file."""
    path = Path(path)
    stem = path.stem[:-len("_run")] if path.stem.endswith("_run") else path.stem
    return path.with_name(f"{stem}_model.pt")


def toy_weights_path(path: Path) -> Path:
    """The toy run's weights beside its JSON: toy_lab_model.json -> toy_lab_model.pt."""
    return Path(path).with_suffix(".pt")


def outputs_exist(paths) -> list[Path]:
    """Those of `paths` that exist already (a writer refuses them unless asked to replace)."""
    return [Path(p) for p in paths if Path(p).exists()]


def _refuse_existing(paths, replace: bool) -> None:
    there = outputs_exist(paths)
    if there and not replace:
        raise FileExistsError(f"{', '.join(map(str, there))} exist(s); nothing written (pass "
                              f"replace=True, on the command line --replace, or another --out)")


def _write_json_with_weights(path: Path, wpath: Path, state: dict, d: dict) -> None:
    """The weights and the JSON naming them (file, sha256) as one unit: both temporary files
    written first, the weights renamed, the JSON last (env.write_files_as_unit)."""
    def write_weights(tmp: Path) -> None:
        torch.save(state, tmp)
        d["weights"] = {"file": wpath.name, "sha256": hashlib.sha256(tmp.read_bytes()).hexdigest()}

    def write_json(tmp: Path) -> None:
        tmp.write_text(json.dumps(d, indent=1) + "\n")
    write_files_as_unit([(wpath, write_weights), (path, write_json)])


def save_run(run: TextRun, path: Path, replace: bool = False) -> list[Path]:
    """Write the run JSON and its weights (`weights_path(path)`) as one unit; the JSON names the
    weights file and its sha256. Refuses (FileExistsError, nothing written) when either file
    exists, unless replace=True. Returns the paths written."""
    path = Path(path)
    d = run.to_dict()
    if run.model is None:
        _refuse_existing([path], replace)
        write_files_as_unit([(path, lambda p: p.write_text(json.dumps(d, indent=1) + "\n"))])
        return [path]
    wpath = weights_path(path)
    _refuse_existing([path, wpath], replace)
    state = {k: v.detach().clone() for k, v in run.model.state_dict().items()}
    _write_json_with_weights(path, wpath, state, d)
    return [wpath, path]


class RunFileError(ValueError):
    """A committed run file that cannot be used; the message is one line naming file and reason."""


def _need(cond: bool, path: Path, reason: str) -> None:
    if not cond:
        raise RunFileError(f"{path}: {reason}")


def load_run(path: Path, with_model: bool = True) -> TextRun:
    """Read and validate a run JSON (and its weights when with_model)."""
    path = Path(path)
    try:
        d = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise RunFileError(f"{path}: unreadable ({type(e).__name__}: {e})".replace("\n", " ")) from None
    _need(isinstance(d, dict) and d.get("schema") == SCHEMA, path,
          f"schema must be {SCHEMA}, got {d.get('schema') if isinstance(d, dict) else type(d).__name__}")
    for k in ("settings", "provenance", "train_loss", "eval_steps", "eval_loss", "scores",
              "baseline", "ablation", "ablation_se", "wall_seconds", "cpu_seconds"):
        _need(k in d, path, f"missing key {k!r}")
    try:
        s = TextSettings(**d["settings"])
    except TypeError as e:
        raise RunFileError(f"{path}: settings do not match TextSettings ({e})") from None
    L, nh = s.n_layer, s.n_head
    a = {k: np.asarray(d[k], dtype=float) for k in ("train_loss", "eval_loss", "scores",
                                                     "baseline", "ablation", "ablation_se")}
    n_eval = len(d["eval_steps"])
    for k, shape in (("train_loss", (s.steps,)), ("eval_loss", (n_eval, 4)),
                     ("scores", (n_eval, 3, L, nh)), ("baseline", (3,)),
                     ("ablation", (L, nh, 4)), ("ablation_se", (L, nh, 4))):
        _need(a[k].shape == shape, path, f"{k} has shape {a[k].shape}, expected {shape}")
    _need(bool(np.isfinite(a["train_loss"]).all()) and a["train_loss"].min() > 0, path,
          "train_loss must be finite and positive")
    sc, bl = a["scores"], a["baseline"]  # nan: a pattern with no labelled query
    _need(bool(np.isfinite(sc[:, tc.PREV]).all()), path, "previous-token scores must be finite")
    _need(bool(((sc >= 0) & (sc <= 1) | np.isnan(sc)).all()), path, "scores must lie in [0, 1]")
    _need(bool(((bl > 0) & (bl < 1) | np.isnan(bl)).all()), path, "baseline must lie in (0, 1)")
    corpus_prov = d["provenance"].get("corpus", {})
    _need("content_hash" in corpus_prov, path, "provenance.corpus.content_hash is missing")
    model = None
    if with_model:
        _need("weights" in d, path, "no weights file is named (key 'weights')")
        wpath = path.with_name(d["weights"]["file"])
        _need(wpath.exists(), path, f"weights file {wpath.name} is missing")
        _need(hashlib.sha256(wpath.read_bytes()).hexdigest() == d["weights"]["sha256"], path,
              f"weights file {wpath.name} does not match the sha256 recorded in the run")
        state = torch.load(wpath, map_location="cpu", weights_only=True)
        vocab = corpus_prov.get("vocab_size")
        model = AndreaModel(s.model_config(vocab), seed=s.seed)
        try:
            model.load_state_dict(state)
        except RuntimeError as e:
            raise RunFileError(f"{wpath}: weights do not fit the settings "
                               f"({str(e).splitlines()[0]})") from None
        model.eval()
    return TextRun(settings=s, provenance=d["provenance"], train_loss=a["train_loss"],
                   eval_steps=d["eval_steps"], eval_loss=a["eval_loss"], scores=a["scores"],
                   baseline=a["baseline"], ablation=a["ablation"], ablation_se=a["ablation_se"],
                   wall_seconds=float(d["wall_seconds"]), cpu_seconds=float(d["cpu_seconds"]),
                   model=model)


def find_data(name: str = RUN_FILE) -> Path | None:
    """The committed file: $ANDREA_DATA_DIR, then book/data beside the package, then ./data."""
    cands = []
    if os.environ.get("ANDREA_DATA_DIR"):
        cands.append(Path(os.environ["ANDREA_DATA_DIR"]) / name)
    cands += [Path(__file__).resolve().parents[2] / "book" / "data" / name,
              Path.cwd() / "data" / name, Path.cwd() / "book" / "data" / name]
    return next((p for p in cands if p.exists()), None)


# ---------------------------------------------------------------- the toy laboratory's model
TOY_FILE = "toy_lab_model.json"  # + toy_lab_model.pt: the toy chapter's model, for its circuits


def toy_settings():
    """The toy chapter's run (4 heads, CHAPTER_SEED), with one probe and evaluations only at the
    ends: the same weights (probes and evaluations use no randomness), in a fraction of the time."""
    from . import training as toy_training
    s = toy_training.default_settings(4, seed=toy_training.CHAPTER_SEED, fast=False)
    return dataclasses.replace(s, n_probes=1, eval_every=s.steps)


def save_toy(run, path: Path, provenance: dict, replace: bool = False) -> list[Path]:
    """The toy run's settings, final scores and weights (JSON + `toy_weights_path(path)`), as
    one unit; refuses existing files unless replace=True (as `save_run`)."""
    path = Path(path)
    wpath = toy_weights_path(path)
    _refuse_existing([path, wpath], replace)
    state = {k: v.detach().clone() for k, v in run.model.state_dict().items()}
    d = {"schema": SCHEMA, "settings": dataclasses.asdict(run.settings),
         "scores_after": np.round(np.asarray(run.scores_after, dtype=float), 4).tolist(),
         "wall_seconds": round(run.wall_seconds, 2), "cpu_seconds": round(run.cpu_seconds, 2),
         "provenance": provenance}
    _write_json_with_weights(path, wpath, state, d)
    return [wpath, path]


def load_toy(path: Path):
    """(settings, scores_after (3, L, nh), model, cpu_seconds) of a saved toy run; RunFileError
    (one line: the file and the reason) when it cannot be used."""
    from . import training as toy_training
    path = Path(path)
    try:
        d = json.loads(path.read_text())
        s = toy_training.Settings(**d["settings"])
        sc = np.asarray(d["scores_after"], dtype=float)
        cpu = float(d["cpu_seconds"])
        wpath = path.with_name(d["weights"]["file"])
        ok = hashlib.sha256(wpath.read_bytes()).hexdigest() == d["weights"]["sha256"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise RunFileError(f"{path}: unreadable ({type(e).__name__}: {e})".replace("\n", " ")) from None
    _need(ok, path, f"weights file {wpath.name} does not match the sha256 recorded in the run")
    _need(sc.shape == (3, s.n_layer, s.n_head), path, f"scores_after has shape {sc.shape}")
    model = AndreaModel(s.model_config(), seed=s.seed)
    model.load_state_dict(torch.load(wpath, map_location="cpu", weights_only=True))
    return s, sc, model.eval(), cpu
