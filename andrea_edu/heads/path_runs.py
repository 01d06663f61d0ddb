"""The real-text model's path ablations, measured once and committed (the laboratory writes them:
andrea_lab.make_realtext_paths, with andrea_lab.path_ablation), validated on load.

Introduced in the chapter "Heads on real text" (section "Circuits across layers"). Each entry removes
one set of paths (`andrea_lab.path_ablation`) on the committed run's held-out ablation windows
(`text_training.ABLATION_SEED`, `ablation_batch` windows, the same windows as the run's head
ablation) and records the destination head's pattern change and the loss change:

    every (layer-0 head, layer-1 head) pair, all three inputs at once ("qkv")        64 entries
    the previous-token head and L0H5 into every layer-1 head, q, k and v apart       48 entries
    the previous-token head and L0H5 into every layer-1 head at once ("qkv")          2 entries
    the previous-token head and L0H5 into the other readers alone: layer 0's MLP,
    layer 1's MLP, the output (`forward_route`; no pattern, tv null)             6 entries

    python -m andrea_lab.make_realtext_paths --out book/data/realtext_paths.json

The file names the weights it was measured on (their sha256): `load_paths` refuses a file made for
other weights, in one line.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from .. import data as bookdata
from ..data import DataFileError
from .text_runs import _need, need_windows

PATHS_FILE = "realtext_paths.json"
SCHEMA = 1
WRITERS = (1, 5)  # the previous-token head and the head whose ablation costs brackets most
ROUTES = {"mlp0": "MLP0", "mlp1": "MLP1", "out": "output"}  # reader -> label
INPUTS = ("q", "k", "v")  # a later head's inputs a path can be removed from


def weights_sha256(run_path: Path) -> str:
    """The sha256 of the weights a run JSON names (the key a path-ablation file is tied to)."""
    try:
        return str(json.loads(Path(run_path).read_text())["weights"]["sha256"])
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise DataFileError(f"{run_path}: names no weights sha256 ({type(e).__name__})") from None


def expected_entries(n_head: int) -> list[tuple[str, list]]:
    """(label, paths as stored) of every entry a complete file holds, in its order: a path is
    [src_layer, src_head, dst_layer, dst_head, inputs], a route to another reader [0, head, reader]."""
    out = [(f"L0H{a} -> L1H{b} qkv", [[0, a, 1, b, "qkv"]]) for a in range(n_head) for b in range(n_head)]
    out += [(f"L0H{a} -> L1H{b} {i}", [[0, a, 1, b, i]])
            for a in WRITERS for b in range(n_head) for i in INPUTS]
    out += [(f"L0H{a} -> every L1 head qkv", [[0, a, 1, b, "qkv"] for b in range(n_head)])
            for a in WRITERS]
    return out + [(f"L0H{a} -> {name}", [[0, a, reader]]) for a in WRITERS
                  for reader, name in ROUTES.items()]


def _is_num(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def load_paths(path: Path, weights_sha256: str | None = None) -> dict:
    """Read and validate (values, not only keys: every entry present once, in order, with the
    paths its label names, finite numbers in range; the folder's SHA256SUMS when there is one);
    DataFileError with one line naming the file otherwise."""
    path = Path(path)
    try:
        d = json.loads(path.read_text(), parse_constant=lambda c: float("nan"))
    except (OSError, ValueError) as e:
        raise DataFileError(f"{path}: unreadable ({type(e).__name__})") from None
    problem = bookdata.manifest_problem(path)
    _need(problem is None, path, problem or "")
    bad = bookdata.first_nonfinite(d)
    _need(bad is None, path, f"{bad} is NaN or infinite; expected a finite number")
    _need(isinstance(d, dict) and d.get("schema") == SCHEMA, path, f"schema must be {SCHEMA}")
    for k in ("weights_sha256", "windows", "base_loss", "entries", "provenance"):
        _need(k in d, path, f"missing key {k!r}")
    sha = d["weights_sha256"]
    _need(isinstance(sha, str) and len(sha) == 64 and all(c in "0123456789abcdef" for c in sha),
          path, "weights_sha256 must be 64 lowercase hex digits")
    if weights_sha256 is not None:
        _need(sha == weights_sha256, path,
              "measured on other weights than the committed run's (sha256 differs)")
    need_windows(d, path)
    base = d["base_loss"]
    _need(isinstance(base, list) and len(base) == 4 and all(_is_num(x) and x > 0 for x in base),
          path, "base_loss must be 4 positive finite losses")
    ents = d["entries"]
    _need(isinstance(ents, list) and len(ents) > 0 and all(isinstance(e, dict) for e in ents),
          path, "entries must be a non-empty list of objects")
    pairs = sum(1 for e in ents if str(e.get("label", "")).endswith(" qkv")
                and "-> L1H" in str(e.get("label", "")))
    nh = int(round(pairs ** 0.5))
    want = expected_entries(max(nh, 1))
    _need([e.get("label") for e in ents] == [lab for lab, _ in want], path,
          f"entries must be the {len(want)} entries of path_runs.expected_entries({nh}), each "
          f"once, in order")
    for ent, (lab, ps) in zip(ents, want):
        _need({"label", "paths", "tv", "loss", "loss_se"} <= set(ent), path,
              f"{lab}: lacks paths, tv, loss or loss_se")
        _need(ent["paths"] == ps, path, f"{lab}: paths must be {ps}")
        route = lab.split(" -> ")[-1] in ROUTES.values()
        _need((route and ent["tv"] is None) or (not route and _is_num(ent["tv"])
                                                and 0.0 <= ent["tv"] <= 1.0), path,
              f"{lab}: tv must lie in [0, 1] (null for a route to an MLP or the output)")
        lo, se = ent["loss"], ent["loss_se"]
        _need(isinstance(lo, list) and isinstance(se, list) and len(lo) == 4 and len(se) == 4
              and all(_is_num(x) for x in lo + se), path,
              f"{lab}: loss and loss_se must be 4 finite numbers each")
        _need(all(x >= 0 for x in se) and all(abs(x) < 20 for x in lo), path,
              f"{lab}: standard errors must be >= 0 and a loss change below 20 nats")
    return d


def entry(d: dict, label: str) -> dict:
    for e in d["entries"]:
        if e["label"] == label:
            return e
    raise KeyError(f"no entry {label!r} in the path-ablation file")


def as_grid(d: dict, n_head: int, key: str = "tv", col: int = 0) -> np.ndarray:
    """(n_head, n_head) [writer, reader] of the "qkv" pair entries: tv, or loss column `col`."""
    out = np.full((n_head, n_head), np.nan)
    for a in range(n_head):
        for b in range(n_head):
            e = entry(d, f"L0H{a} -> L1H{b} qkv")
            out[a, b] = e["tv"] if key == "tv" else e["loss"][col]
    return out


