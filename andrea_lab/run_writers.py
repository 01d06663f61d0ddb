"""The real-text laboratory's writers: a run's JSON and its weights as one unit, the toy
chapter's model, the path ablations and the longer variants (each refuses an existing file
unless replace=True; `outputs_exist` names those that exist, for the commands to refuse them
before the work). The book reads them with andrea_edu.heads.text_runs.load_run / load_toy,
path_runs.load_paths and text_longer.load_variant. A record's provenance is stamped when written
(store.stamped: the commit, and for a real-text run the hash of `text_code()`, the code that
decides its numbers).
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path

import numpy as np
import torch

from andrea_edu.heads import text_longer as TL
from andrea_edu.heads.run import Run
from andrea_edu.heads.text_runs import SCHEMA, weights_path
from andrea_lab.store import stamped, write_files_as_unit


def text_code() -> tuple:
    """The code that decides a real-text run's numbers, hashed into its provenance: the corpus,
    the measures and detectors, the model, the projections and attention it uses, the settings
    and training loop, and the run record that rounds what is stored (heads.run.Run) (not its
    tolerances, which are measured after a run exists)."""
    import importlib

    from andrea_edu.heads import text_training as TT
    from andrea_edu.heads.run import RunSettings, fit
    from andrea_edu.heads.text_runs import TextSettings
    mods = [importlib.import_module("andrea_edu." + name) for name in
            ("model", "projections", "attention", "heads.text_corpus", "heads.measures",
             "heads.detectors")]
    return (*mods, RunSettings, TextSettings, fit, TT.train, Run)


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
    written first, the weights renamed, the JSON last (store.write_files_as_unit)."""
    def write_weights(tmp: Path) -> None:
        torch.save(state, tmp)
        d["weights"] = {"file": wpath.name, "sha256": hashlib.sha256(tmp.read_bytes()).hexdigest()}

    def write_json(tmp: Path) -> None:
        tmp.write_text(json.dumps(d, indent=1) + "\n")
    write_files_as_unit([(wpath, write_weights), (path, write_json)], manifest=True)


def save_run(run: Run, path: Path, replace: bool = False) -> list[Path]:
    """Write the run JSON and its weights (`weights_path(path)`) as one unit; the JSON names the
    weights file and its sha256. Refuses (FileExistsError, nothing written) when either file
    exists, unless replace=True. Returns the paths written."""
    path = Path(path)
    d = run.to_dict()
    d["provenance"] = stamped(d["provenance"], text_code())
    if run.model is None:
        _refuse_existing([path], replace)
        write_files_as_unit([(path, lambda p: p.write_text(json.dumps(d, indent=1) + "\n"))],
                            manifest=True)
        return [path]
    wpath = weights_path(path)
    _refuse_existing([path, wpath], replace)
    state = {k: v.detach().clone() for k, v in run.model.state_dict().items()}
    _write_json_with_weights(path, wpath, state, d)
    return [wpath, path]


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
         "provenance": stamped(provenance)}
    _write_json_with_weights(path, wpath, state, d)
    return [wpath, path]


def save_paths(d: dict, path: Path, replace: bool = False) -> None:
    """Write atomically (temporary file, then rename); refuse an existing file unless replace."""
    path = Path(path)
    if path.exists() and not replace:
        raise FileExistsError(f"{path} exists; nothing written (pass replace=True, on the command "
                              f"line --replace, or another --out)")
    write_files_as_unit([(path, lambda p: p.write_text(json.dumps(d, indent=1) + "\n"))],
                        manifest=True)


def save_variant(run: Run, name: str, path: Path, replace: bool = False) -> list[Path]:
    """`text_runs.save_run` (the JSON and `weights_path(path)` as one unit, existing files
    refused unless replace), with this run's provenance lines."""
    v = TL.variant(name)
    run.provenance = {**run.provenance, "produced_by": TL.command(name, path),
                      "what": f"the real-text model with {v.what}, to look for induction heads",
                      "cpu_budget_seconds": TL.CPU_BUDGET}
    return save_run(run, Path(path), replace=replace)


def save_long(run: Run, path: Path, replace: bool = False) -> list[Path]:
    return save_variant(run, "long", path, replace)
