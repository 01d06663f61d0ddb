"""Train a small ANDREA on the standard library's source (CPU, one thread) and record its heads.

Introduced in the chapter "Heads on real text". The committed run is made with

    python -m andrea_edu.heads.text_training --out book/data/realtext_run.json

which re-executes itself with the CPU instruction-set pins (CPU_PINS: ATen, MKL and oneDNN held to
AVX2) set before torch is imported, trains `TextSettings()` and writes the run JSON (provenance,
losses, scores, ablation) and the model's weights beside it (`realtext_model.pt`, its sha256 in the
JSON), both atomically (temporary file + os.replace). `load_run` validates the JSON and says in one
line which file is wrong and why.

The live re-check (`--recheck`, or `recheck()` from a chapter) trains the same schedule's first
RECHECK_STEPS steps, again in a pinned subprocess, and compares its training losses with the
committed ones: they must agree within RECHECK_TOL. That tolerance was measured: the same 40 steps
under every combination of ATEN_CPU_CAPABILITY (default = avx512 on the measuring machine, avx2) x
MKL_CBWR (unset, AVX2,STRICT) x ONEDNN_MAX_CPU_ISA (unset, AVX2) moved the losses by at most
MEASURED_SPREAD nats (`python -m andrea_edu.heads.text_training --measure-spread`); RECHECK_TOL is
ten times that, rounded up, so that a machine with other kernels still passes while a changed
schedule, corpus or model (which moves the losses by far more) does not. SCORE_TOL, the margin of
the detectors' verdicts, was measured the same way on the final scores of full runs.
"""
from __future__ import annotations

import dataclasses
import hashlib
import importlib
import json
import math
import os
import platform
import random
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from .. import env
from ..config import AndreaConfig
from ..env import book_build, fast_mode
from ..model import AndreaModel
from . import detectors as D
from . import text_corpus as tc

# The pins the committed file is produced with, set before torch is imported (_reexec_pinned):
# the book's shared AVX2 level (env.PINNED_ISA) where env has it.
CPU_PINS = dict(getattr(env, "PINNED_ISA", None) or
                {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "AVX2,STRICT",
                 "ONEDNN_MAX_CPU_ISA": "AVX2"})

RUN_FILE = "realtext_run.json"
WEIGHTS_FILE = "realtext_model.pt"
EVAL_SEED = 2024  # validation windows of every evaluation
ABLATION_SEED = 2025  # held-out windows of the final ablation
RECHECK_STEPS = 40
MEASURED_SPREAD = None  # filled in from --measure-spread (nats, max over settings and steps)
RECHECK_TOL = 2e-3  # nats; see the module docstring
SCORE_TOL = 0.02  # absolute score; see the module docstring
SCHEMA = 1
MODULE = "andrea_edu.heads.text_training"  # for `python -m` (this file may run as __main__)


@dataclass(frozen=True)
class TextSettings:
    """The committed run: 2 layers, d_model 128, 8 heads of 16, 128-character windows,
    1200 AdamW steps of 32 windows (4.9M characters, 1.5 passes over the training files)."""

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


def _lr(s: TextSettings, step: int) -> float:
    warm = min(1.0, (step + 1) / s.warmup)
    return s.lr * warm * 0.5 * (1 + math.cos(math.pi * step / s.steps))


def _progress_bar(total: int, desc: str, enabled: bool):
    """tqdm's bar when enabled and not building the book; a no-op otherwise."""
    if enabled and not book_build():
        from tqdm.auto import tqdm
        return tqdm(total=total, desc=desc, leave=True)

    class _Null:
        def update(self, n=1): ...
        def set_postfix_str(self, s): ...
        def close(self): ...
        def write(self, s): ...
    return _Null()


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

    def summary(self, tol: float = SCORE_TOL) -> list[dict]:
        return D.summary(self.scores_after, self.baseline, self.ablation, self.ablation_se, tol)

    def to_dict(self) -> dict:
        def r(a, n=5):  # rounded nested lists, nan (a pattern with no labelled query) as null
            a = np.round(np.asarray(a, dtype=float), n)
            return np.where(np.isnan(a), None, a).tolist()
        return {"schema": SCHEMA, "settings": dataclasses.asdict(self.settings),
                "provenance": self.provenance, "train_loss": r(self.train_loss),
                "eval_steps": list(self.eval_steps), "eval_loss": r(self.eval_loss),
                "scores": r(self.scores, 4), "baseline": r(self.baseline, 6),
                "ablation": r(self.ablation), "ablation_se": r(self.ablation_se),
                "wall_seconds": round(self.wall_seconds, 2),
                "cpu_seconds": round(self.cpu_seconds, 2)}


def train(settings: TextSettings | None = None, progress: bool = True,
          stop_after: int | None = None, corpus: tc.Corpus | None = None) -> TextRun:
    """Train from scratch (deterministic for given settings and corpus) and measure the heads.

    stop_after: only the first `stop_after` steps of the schedule (no final ablation), for the
    re-check."""
    s = settings or default_settings()
    n_steps = s.steps if stop_after is None else stop_after
    if not (isinstance(n_steps, int) and 1 <= n_steps <= s.steps):
        raise ValueError(f"stop_after={stop_after!r} must be an int in 1..steps={s.steps}")
    c = corpus or tc.corpus_cached()
    t0, c0 = time.perf_counter(), time.process_time()
    before = torch.get_num_threads()
    torch.set_num_threads(s.threads)
    try:
        model = AndreaModel(s.model_config(c.vocab_size), seed=s.seed)
        opt = torch.optim.AdamW(model.parameters(), lr=s.lr, betas=(0.9, 0.98),
                                weight_decay=s.weight_decay)
        rng = random.Random(s.seed)
        full = stop_after is None
        ev = tc.labelled_batch(c, s.eval_batch, s.seq_len, seed=EVAL_SEED) if full else None
        train_loss = np.zeros(n_steps)
        eval_steps, eval_loss, scores = [], [], []

        def evaluate(step):
            model.eval()
            eval_steps.append(step)
            eval_loss.append(D.pattern_losses(D.per_position_loss(model, ev), ev))
            scores.append(D.head_scores(model, ev).numpy())
            model.train()
            if progress and not book_build():
                best = scores[-1].reshape(3, -1).max(axis=1) / D.baseline(ev)
                bar.write(f"step {step}: val loss {eval_loss[-1][0]:.3f}, best head / uniform: "
                          + ", ".join(f"{n} {r:.1f}x" for n, r in zip(D.PATTERN_NAMES, best)))

        bar = _progress_bar(n_steps, f"training {s.n_layer} layers x {s.n_head} heads on the "
                            f"standard library", progress)
        for step in range(n_steps):
            if full and step % s.eval_every == 0:
                evaluate(step)
            x, y = tc.train_batch(c, s.batch_size, s.seq_len, rng)  # (B, T) each
            for g in opt.param_groups:
                g["lr"] = _lr(s, step)
            _, loss = model(x, y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            train_loss[step] = loss.item()
            bar.update()
            if step % 25 == 0:
                bar.set_postfix_str(f"loss {train_loss[step]:.3f}")
        bar.close()
        if full:
            evaluate(n_steps)
            ab = tc.labelled_batch(c, s.ablation_batch, s.seq_len, seed=ABLATION_SEED)
            abl, abl_se = D.ablation(model, ab)
            base = D.baseline(ev)
        else:
            abl = abl_se = np.zeros((s.n_layer, s.n_head, 4))
            base = np.zeros(3)
    finally:
        torch.set_num_threads(before)
    L, nh = s.n_layer, s.n_head
    return TextRun(settings=s, provenance=provenance(c), train_loss=train_loss,
                   eval_steps=eval_steps, eval_loss=np.array(eval_loss).reshape(-1, 4),
                   scores=np.array(scores).reshape(-1, 3, L, nh), baseline=base, ablation=abl,
                   ablation_se=abl_se, wall_seconds=time.perf_counter() - t0,
                   cpu_seconds=time.process_time() - c0, model=model)


# ---------------------------------------------------------------- provenance
def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def mkl_cbwr() -> str | None:
    """The code path MKL runs (its CBWR branch, as the library reports it), or None where the
    torch build does not expose it. MKL_CBWR=AVX2,STRICT reads 'AVX2,STRICT'; an unknown value
    falls back to 'AUTO'."""
    import ctypes
    names = {1: "OFF", 2: "AUTO", 3: "COMPATIBLE", 4: "SSE2", 6: "SSE4_2", 8: "AVX", 10: "AVX2",
             12: "AVX512_MIC", 13: "AVX512", 14: "AVX512_MIC_E1", 15: "AVX512_E1"}
    try:
        lib = ctypes.CDLL(str(Path(torch.__file__).parent / "lib" / "libtorch_cpu.so"))
        f = lib.mkl_serv_cbwr_get
    except (OSError, AttributeError):
        return None
    f.restype, f.argtypes = ctypes.c_int, [ctypes.c_int]
    v = f(-1)  # MKL_CBWR_ALL: the branch in the low bits, STRICT as 0x10000
    return names.get(v & 0xFFFF, str(v & 0xFFFF)) + (",STRICT" if v & 0x10000 else "")


def _git_commit() -> str | None:
    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], cwd=Path(__file__).parent,
                              capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


def code_hash() -> str:
    """Hash of the code that decides a run's numbers: the corpus, the detectors, the model, the
    projections and attention it uses, and this module's settings and training loop (not its
    tolerances, which are measured after a run exists)."""
    import inspect
    h = hashlib.sha256()
    for name in ("model", "projections", "attention", "heads.text_corpus", "heads.detectors"):
        h.update(Path(importlib.import_module("andrea_edu." + name).__file__).read_bytes())
    for obj in (TextSettings, train, _lr):
        h.update(inspect.getsource(obj).encode())
    return h.hexdigest()[:16]


def provenance(corpus: tc.Corpus) -> dict:
    cp = corpus.provenance
    return {
        "what": "a small ANDREA trained on the Python standard library's source, CPU",
        "produced_by": "python -m andrea_edu.heads.text_training --out book/data/" + RUN_FILE,
        "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        **({"cpu_provenance": env.cpu_provenance()} if hasattr(env, "cpu_provenance") else {}),
        "cpu": cpu_model(), "machine": platform.machine(), "cores": os.cpu_count(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "pins": {k: os.environ.get(k) for k in CPU_PINS}, "mkl_cbwr": mkl_cbwr(),
        "torch": torch.__version__, "numpy": np.__version__, "python": sys.version.split()[0],
        "git_commit": _git_commit(), "code_hash": code_hash(),
        "corpus": {k: v for k, v in cp.items()},
    }


# ---------------------------------------------------------------- saving and loading
def _atomic_write(path: Path, write) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        write(tmp)
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


def save_run(run: TextRun, path: Path) -> None:
    """Write the run JSON and the weights beside it, each atomically; the JSON names the
    weights file and its sha256."""
    path = Path(path)
    d = run.to_dict()
    if run.model is not None:
        wpath = path.with_name(WEIGHTS_FILE)
        state = {k: v.detach().clone() for k, v in run.model.state_dict().items()}
        _atomic_write(wpath, lambda p: torch.save(state, p))
        d["weights"] = {"file": wpath.name, "sha256": hashlib.sha256(wpath.read_bytes()).hexdigest()}
    _atomic_write(path, lambda p: p.write_text(json.dumps(d, indent=1) + "\n"))


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


# ---------------------------------------------------------------- the pinned subprocess
def pinned_env(pins: dict | None = None) -> dict:
    env = dict(os.environ)
    for k, v in (CPU_PINS if pins is None else pins).items():
        if v is None:
            env.pop(k, None)
        else:
            env[k] = v
    return env


def _reexec_pinned(argv: list[str]) -> None:
    """Re-run this command with CPU_PINS set, unless they are in effect already (torch is imported
    by now, and the pins only act when set before that: ATen's level tells whether they did)."""
    set_ = all(os.environ.get(k) == v for k, v in CPU_PINS.items())
    if os.environ.get("_ANDREA_PINNED") or (
            set_ and torch.backends.cpu.get_cpu_capability() == CPU_PINS["ATEN_CPU_CAPABILITY"].upper()):
        return
    env = pinned_env()
    env["_ANDREA_PINNED"] = "1"
    os.execve(sys.executable, [sys.executable, "-m", MODULE, *argv], env)


def recheck_losses(settings: TextSettings, n_steps: int = RECHECK_STEPS, pins: dict | None = None,
                   timeout: float = 300) -> dict:
    """The first n_steps training losses of `settings`, trained in a subprocess with `pins`
    (CPU_PINS by default; {} or values None to leave the machine's defaults)."""
    cmd = [sys.executable, "-m", MODULE, "--recheck", str(n_steps), "--settings",
           json.dumps(dataclasses.asdict(settings))]
    env = pinned_env(pins)
    env["_ANDREA_PINNED"] = "1"
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    if out.returncode != 0:
        raise RuntimeError(f"re-check subprocess failed ({out.returncode}): "
                           f"{out.stderr.strip().splitlines()[-1] if out.stderr.strip() else ''}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def compare_recheck(run: TextRun, re: dict, tol: float = RECHECK_TOL) -> dict:
    n = len(re["train_loss"])
    diff = np.abs(np.asarray(re["train_loss"]) - run.train_loss[:n])
    return {"steps": n, "max_abs_diff": float(diff.max()), "tol": tol,
            "agrees": bool(diff.max() <= tol), "cpu_capability": re["cpu_capability"],
            "pins": re["pins"], "wall_seconds": re["wall_seconds"]}


def measure_spread(n_steps: int = RECHECK_STEPS, settings: TextSettings | None = None) -> dict:
    """The re-check's first n_steps losses under every combination of the three knobs (each set
    to its pin or left unset), against the pinned run: {combination: max |loss difference|}."""
    import itertools
    s = settings or default_settings(False)
    ref = recheck_losses(s, n_steps)
    out = {}
    for values in itertools.product(*[(None, v) for v in CPU_PINS.values()]):
        pins = dict(zip(CPU_PINS, values))
        r = recheck_losses(s, n_steps, pins=pins)
        key = ", ".join(f"{k}={v or 'unset'}" for k, v in pins.items())
        out[key] = {"max_abs_diff": float(np.max(np.abs(np.subtract(r["train_loss"],
                                                                    ref["train_loss"])))),
                    "cpu_capability": r["cpu_capability"], "wall_seconds": r["wall_seconds"]}
    # Two more yardsticks: another summation order (2 threads), the float noise a machine with
    # other kernels adds; and the smallest real change (learning rate x 1.001), which a re-check
    # must not pass.
    for key, changed in (("2 torch threads (another summation order)", dict(threads=2)),
                         ("learning rate x 1.001 (a real change)", dict(lr=s.lr * 1.001))):
        r = recheck_losses(dataclasses.replace(s, **changed), n_steps)
        out[key] = {"max_abs_diff": float(np.max(np.abs(np.subtract(r["train_loss"],
                                                                    ref["train_loss"])))),
                    "cpu_capability": r["cpu_capability"], "wall_seconds": r["wall_seconds"]}
    return out


def compare_scores(a: TextRun, b: TextRun) -> dict:
    """Two full runs of the same settings (e.g. pinned and unpinned): the largest differences of
    their final scores, ablations and final validation loss."""
    return {"max_score_diff": float(np.nanmax(np.abs(a.scores_after - b.scores_after))),
            "max_ablation_diff": float(np.nanmax(np.abs(a.ablation - b.ablation))),
            "final_loss_diff": float(abs(a.eval_loss[-1, 0] - b.eval_loss[-1, 0])),
            "best_heads": (D.best_heads(a.scores_after), D.best_heads(b.scores_after))}


def main(argv: list[str] | None = None) -> None:
    import argparse
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, help="write the committed run here (and its weights)")
    ap.add_argument("--recheck", type=int, help="print the first N training losses as JSON")
    ap.add_argument("--settings", help="TextSettings as JSON (for --recheck)")
    ap.add_argument("--steps", type=int, help="override the number of steps (testing)")
    ap.add_argument("--no-pin", action="store_true", help="do not set CPU_PINS")
    ap.add_argument("--measure-spread", action="store_true",
                    help="re-check under every combination of the pins; print the spread")
    ap.add_argument("--compare", nargs=2, type=Path, metavar="RUN",
                    help="print the score differences of two run files")
    args = ap.parse_args(argv)
    raw = sys.argv[1:] if argv is None else argv
    if args.recheck and not args.measure_spread:
        s = TextSettings(**json.loads(args.settings)) if args.settings else default_settings(False)
        r = train(s, progress=False, stop_after=args.recheck)
        print(json.dumps({"train_loss": r.train_loss.tolist(), "wall_seconds": r.wall_seconds,
                          "cpu_seconds": r.cpu_seconds,
                          "cpu_capability": torch.backends.cpu.get_cpu_capability(),
                          "pins": {k: os.environ.get(k) for k in CPU_PINS}}))
        return
    if args.measure_spread:
        for k, v in measure_spread(args.recheck or RECHECK_STEPS).items():
            print(f"{k}: max |loss diff| {v['max_abs_diff']:.2e} ({v['cpu_capability']}, "
                  f"{v['wall_seconds']:.1f} s)")
        return
    if args.compare:
        print(compare_scores(*(load_run(p, with_model=False) for p in args.compare)))
        return
    if args.out is None:
        ap.error("give --out PATH or --recheck N")
    if not args.no_pin:
        _reexec_pinned(raw)
    s = default_settings(False, **({"steps": args.steps} if args.steps else {}))
    run = train(s, progress=True)
    save_run(run, args.out)
    print(f"wrote {args.out}: {run.wall_seconds:.0f} s wall, {run.cpu_seconds:.0f} s CPU; "
          + "; ".join(f"{x['pattern']}: L{x['head'][0]}H{x['head'][1]} {x['score']:.3f} "
                      f"({x['ratio']:.1f}x uniform, {x['verdict']})" for x in run.summary()))


if __name__ == "__main__":
    main()
