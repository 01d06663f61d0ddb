"""The real-text run, made, committed and re-checked (andrea_edu.heads.text_training trains and
reads it; see its docstring for the pins and the measured tolerances, which `measure_spread` and
`compare_scores` here measure; `recheck_losses` re-trains its first steps in a pinned subprocess):

    python -m andrea_lab.make_realtext_run --out book/data/realtext_run.json
    python -m andrea_lab.make_realtext_run --toy-out book/data/toy_lab_model.json
    python -m andrea_lab.make_realtext_run --measure-spread | --recheck N | --compare A B

It re-executes itself with the CPU instruction-set pins (text_training.CPU_PINS) set before
torch is imported, unless --no-pin.
"""
from __future__ import annotations

import dataclasses
import itertools
import json
import os
import subprocess
import sys
from pathlib import Path

from andrea_edu.data import DataFileError, new_provenance
import numpy as np
import torch

from andrea_edu.heads import measures as M
from andrea_edu.heads import text_training as TT
from andrea_edu.heads import training as toy_training
from andrea_edu.heads.text_runs import RUN_FILE, TextSettings, default_settings, weights_path
from andrea_edu.heads.text_training import CPU_PINS, SCORE_TOL
from andrea_edu.heads.run import Run, SettingsError
from andrea_lab.process import die_with_parent
from andrea_lab.run_writers import outputs_exist, save_run, save_toy, toy_weights_path

MODULE = "andrea_lab.make_realtext_run"  # for `python -m` (this file may run as __main__)
PROG = "python -m " + MODULE


# ---------------------------------------------------------------- the re-check, in a pinned subprocess
RECHECK_STEPS = 40
RECHECK_TOL = 1e-4  # nats: measured (measure_spread), see heads.text_training's docstring


def pinned_env(pins: dict | None = None) -> dict:
    """This process's environment with the three knobs set as `pins` says (CPU_PINS by default;
    a value None removes that knob). ANDREA_CPU_ISA=asis makes `import andrea_edu` leave the knobs
    as set here: it neither fills in one left unset (an unset knob really is the library's own
    choice) nor drops the pins ("native" would drop them: the re-check then ran unpinned)."""
    env = dict(os.environ)
    env["ANDREA_CPU_ISA"] = "asis"
    for k, v in (CPU_PINS if pins is None else pins).items():
        if v is None:
            env.pop(k, None)
        else:
            env[k] = v
    return env


def recheck_losses(settings: TextSettings, n_steps: int = RECHECK_STEPS, pins: dict | None = None,
                   timeout: float = 300) -> dict:
    """The first n_steps training losses of `settings`, trained in a subprocess with `pins`
    (CPU_PINS by default; {} or values None to leave the machine's defaults)."""
    cmd = [sys.executable, "-m", MODULE, "--recheck", str(n_steps), "--settings",
           json.dumps(dataclasses.asdict(settings))]
    env = pinned_env(pins)
    env["_ANDREA_PINNED"] = "1"
    me = os.getpid()   # the re-check dies with this process (kill -9 of it included)
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout,
                         preexec_fn=(lambda: die_with_parent(me)) if os.name == "posix" else None)
    if out.returncode != 0:
        raise RuntimeError(f"re-check subprocess failed ({out.returncode}): "
                           f"{out.stderr.strip().splitlines()[-1] if out.stderr.strip() else ''}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def compare_recheck(run: Run, re: dict, tol: float = RECHECK_TOL) -> dict:
    """A re-check's losses (`recheck_losses`) against the committed run's first ones."""
    n = len(re["train_loss"])
    diff = np.abs(np.asarray(re["train_loss"]) - run.train_loss[:n])
    return {"steps": n, "max_abs_diff": float(diff.max()), "tol": tol,
            "agrees": bool(diff.max() <= tol), "cpu_capability": re["cpu_capability"],
            "pins": re["pins"], "wall_seconds": re["wall_seconds"]}


def recheck_record(settings: TextSettings, n_steps: int) -> dict:
    """The first n_steps training losses of `settings`, with the numerics they ran under: what
    `recheck_losses` reads back from its pinned subprocess."""
    r = TT.train(settings, progress=False, stop_after=n_steps)
    return {"train_loss": r.train_loss.tolist(), "wall_seconds": r.wall_seconds,
            "cpu_seconds": r.cpu_seconds,
            "cpu_capability": torch.backends.cpu.get_cpu_capability(),
            "pins": {k: os.environ.get(k) for k in CPU_PINS}}


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


def _once(parse):
    """An argparse action for a flag that may be given once: a second --out would silently win
    over the first (argparse keeps the last), so it is refused."""
    import argparse

    class Once(argparse.Action):
        def __call__(self, parser, namespace, values, option_string=None):
            if getattr(namespace, self.dest, None) is not None:
                parser.error(f"{option_string} given twice; give it once")
            setattr(namespace, self.dest, values)
    return Once


def _parser():
    import argparse
    ap = argparse.ArgumentParser(prog=PROG, description=TT.__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, action=_once(Path), help="write the run JSON here and its weights beside it "
                    "(<stem>_model.pt, <stem> without a trailing _run: realtext_run.json -> "
                    "realtext_model.pt)")
    ap.add_argument("--replace", action="store_true",
                    help="replace existing output files (refused otherwise)")
    ap.add_argument("--recheck", type=int, help="print the first N training losses as JSON")
    ap.add_argument("--settings", help="TextSettings fields as a JSON object (for --recheck)")
    ap.add_argument("--steps", type=int, help="override the number of steps (testing), >= 1")
    ap.add_argument("--no-pin", action="store_true", help="do not set CPU_PINS")
    ap.add_argument("--toy-out", type=Path, action=_once(Path), help="train the toy chapter's model, save it here "
                    "(the JSON, and its weights beside it with the suffix .pt)")
    ap.add_argument("--measure-spread", action="store_true",
                    help="re-check under every combination of the pins; print the spread")
    ap.add_argument("--compare", nargs=2, type=Path, metavar="RUN",
                    help="print the score differences of two run files")
    return ap


MAX_STEPS = 1_000_000  # the book's runs take 1,500-6,000 steps; a million is weeks on a CPU


def _check_args(args) -> tuple[str | None, TextSettings | None]:
    """(the first problem as one line, or None; the settings to train). Runs before any work."""
    from andrea_lab.arg_checks import check_int, check_out_file, first_problem
    s = None
    if args.toy_out is not None:  # the toy run has its own fixed settings (toy_settings)
        ignored = [f for f, v in (("--steps", args.steps), ("--settings", args.settings),
                                  ("--recheck", args.recheck), ("--compare", args.compare),
                                  ("--out", args.out)) if v is not None]
        if ignored or args.measure_spread:
            return (f"--toy-out trains the toy chapter's model with its own settings; "
                    f"{', '.join(ignored) or '--measure-spread'} would be ignored: give "
                    f"--toy-out alone (with --replace, --no-pin)"), None
    if args.settings is not None:  # a flat object of numbers: refused before any parser recurses
        from andrea_edu.data import json_depth_problem
        deep = (f"{len(args.settings)} characters, more than a settings object needs"
                if len(args.settings) > 10_000 else json_depth_problem(args.settings.encode(), 2))
        if deep:
            return f"--settings: {deep[:120]}; give a flat JSON object of TextSettings fields", None
    try:
        if args.settings is not None:
            s = TextSettings.from_json(args.settings, base=default_settings(False))
        else:
            s = default_settings(False)
        if args.steps is not None:
            p = check_int("--steps", args.steps, 1, MAX_STEPS)
            if p:
                return p, None
            s = dataclasses.replace(s, steps=args.steps)
        s.check()
        if s.steps > MAX_STEPS:  # its arrays (steps,) are allocated before the first step
            return f"--settings: steps={s.steps} is above {MAX_STEPS}", None
    except SettingsError as e:
        return f"--settings: {e}" if args.settings is not None else str(e), None
    except TypeError as e:  # a value JSON holds but a dataclass field cannot take
        return f"--settings: {e}", None
    outs = []
    for flag, out, derived in (("--out", args.out, weights_path),
                               ("--toy-out", args.toy_out, toy_weights_path)):
        if out is None:
            continue
        if str(out) in ("", "."):
            return f"{flag}: an empty path is not allowed; give a file such as book/data/{RUN_FILE}", None
        if out.suffix != ".json":
            return f"{flag}: {out} must end in .json (the weights go beside it as .pt)", None
        p = check_out_file(flag, str(out), f"book/data/{RUN_FILE}")
        if p:
            return p, None
        outs += [out, derived(out)]
    there = outputs_exist(outs)
    if there and not args.replace:
        flag = "--toy-out" if args.toy_out is not None else "--out"
        return (f"{flag}: {', '.join(map(str, there))} exist(s); pass --replace to overwrite, "
                f"or choose another path"), None
    problem = first_problem(
        check_int("--recheck", args.recheck, 1, s.steps),
        *(f"--compare: {p} is not a file" for p in (args.compare or []) if not p.is_file()))
    return problem, s


def measure_spread(n_steps: int = RECHECK_STEPS, settings: TextSettings | None = None) -> dict:
    """The re-check's first n_steps losses under every combination of the three knobs (each set
    to its pin or left unset), against the pinned run: {combination: max |loss difference|}."""
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


def compare_scores(a: Run, b: Run) -> dict:
    """Two full runs of the same settings (e.g. pinned and unpinned): the largest differences of
    their final scores, ablations and final validation loss."""
    return {"max_score_diff": float(np.nanmax(np.abs(a.scores_after - b.scores_after))),
            "max_ablation_diff": float(np.nanmax(np.abs(a.ablation - b.ablation))),
            "final_loss_diff": float(abs(a.eval_loss[-1, 0] - b.eval_loss[-1, 0])),
            "best_heads": (M.best_heads(a.scores_after), M.best_heads(b.scores_after))}


def main(argv: list[str] | None = None) -> int:
    from andrea_lab.arg_checks import fail
    ap = _parser()
    args = ap.parse_args(argv)
    raw = sys.argv[1:] if argv is None else argv
    problem, s = _check_args(args)
    if problem:  # before any training: one line, exit status 2 (argparse's convention)
        return fail(PROG, problem)
    assert s is not None
    if args.recheck and not args.measure_spread:
        print(json.dumps(recheck_record(s, args.recheck)))
        return 0
    if args.measure_spread:
        for k, v in measure_spread(args.recheck or RECHECK_STEPS).items():
            print(f"{k}: max |loss diff| {v['max_abs_diff']:.2e} ({v['cpu_capability']}, "
                  f"{v['wall_seconds']:.1f} s)")
        return 0
    if args.compare:
        try:
            print(compare_scores(*(TT.load_run(p, with_model=False) for p in args.compare)))
        except DataFileError as e:
            return fail(PROG, str(e))
        return 0
    if args.out is None and args.toy_out is None:
        return fail(PROG, "give --out PATH, --toy-out PATH or --recheck N")
    if args.no_pin and not os.environ.get("_ANDREA_NATIVE"):  # knobs left to the libraries
        env = pinned_env(dict.fromkeys(CPU_PINS))
        env["_ANDREA_NATIVE"] = "1"
        os.execve(sys.executable, [sys.executable, "-m", MODULE, *raw], env)
    if not args.no_pin:
        _reexec_pinned(raw)
    from andrea_lab.process import sigterm_interrupts
    written: list = []
    try:
        with sigterm_interrupts():  # SIGTERM as Ctrl-C: one line says what was left unwritten
            if args.toy_out:
                toy, prov = _train_toy(args)
                written = save_toy(toy, args.toy_out, prov, replace=args.replace)  # a unit
                print(f"wrote {', '.join(map(str, written))}: {toy.wall_seconds:.0f} s wall, "
                      f"{toy.cpu_seconds:.0f} s CPU")
                return 0
            run = TT.train(s, progress=True)
            written = save_run(run, args.out, replace=args.replace)  # all or nothing
            print(f"wrote {', '.join(map(str, written))}: {run.wall_seconds:.0f} s wall, "
                  f"{run.cpu_seconds:.0f} s CPU; "
                  + "; ".join(f"{x['pattern']}: L{x['head'][0]}H{x['head'][1]} {x['score']:.3f} "
                              f"({x['ratio']:.1f}x uniform, {x['verdict']})"
                              for x in run.summary(SCORE_TOL)))
    except KeyboardInterrupt as e:
        return _stopped(e, args, written)
    return 0


def _train_toy(args):
    """The toy chapter's model, trained, and its provenance."""
    toy = toy_training.train(TT.toy_settings(), progress=True)
    prov = new_provenance(
        "the toy laboratory's model (heads.training, CHAPTER_SEED), for its circuits",
        f"{PROG} --toy-out {args.toy_out}", **TT.cpu_keys())
    return toy, prov


def _stopped(e: KeyboardInterrupt, args, written: list, prog: str = PROG) -> int:
    """One line on stderr for a training stopped by Ctrl-C or SIGTERM: how far it got and what
    was left unwritten (the writes are units: the files are all new or all as before); the exit
    status is 128 + the signal's number."""
    import signal

    from andrea_lab.process import stop_signal
    sig = stop_signal(e)
    toy = getattr(args, "toy_out", None) is not None  # (make_realtext_variant has no --toy-out)
    json_out = args.toy_out if toy else args.out
    outs = [json_out, (toy_weights_path if toy else weights_path)(json_out)]
    done = getattr(e, "steps_done", None)
    where = f" at training step {done[0]} of {done[1]}" if done else ""
    left = (f"{', '.join(map(str, written))} written whole" if written else
            f"nothing written ({', '.join(map(str, outs))} as before)")
    print(f"{prog}: stopped by {signal.Signals(sig).name}{where}; {left}", file=sys.stderr)
    return 128 + sig


if __name__ == "__main__":
    sys.exit(main())
