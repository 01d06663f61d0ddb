"""Path ablation, the laboratory's instrument behind book/data/realtext_paths.json: remove one
head's output from one later head's query, key or value input only, and measure the change.

The chapter "Heads on real text" (section "Circuits across layers") reads the committed file
(`andrea_edu.heads.path_runs.load_paths`); this module measures it
(`python -m andrea_lab.make_realtext_paths`) and re-checks it (`recheck`, in the tests).

Introduced in the chapter "Heads on real text" (section "Circuits across layers"). Ablating a head
(`AndreaModel.ablate`, zeroing its row block of W_O) removes it from every reader at once: every
later head, every MLP, the unembedding. A path ablation removes it from one reader's one input:

    forward as usual up to layer l2; there, head h2 computes its query (or key, or value) from
    ln_1(x - o_h1) instead of ln_1(x), where o_h1 (B, T, C) is what head h1 of an earlier layer
    wrote into the residual stream (its attention output times its row block of W_O, in the
    intact forward); every other head of layer l2, the MLPs and every other layer read the
    intact stream; the forward then continues from layer l2's output as usual.

So the change in h2's attention pattern and in the loss is the effect of that one path (h1 through
the residual stream directly into h2's Q, K or V), nothing else. A head has other readers: the MLP
of its own and every later layer, and the output (ln_f, the unembedding); `forward_route` removes
it from one of those alone, so that the paths of a head can be compared with its whole ablation. The removal is a zero ablation (the
same as `AndreaModel.ablate`), recomputed with LayerNorm on the patched stream.

Measures (per path, on a batch of windows):
  pattern change  mean over queries of the total-variation distance between h2's patched and
                  intact attention rows, 0.5 sum_k |A'_tk - A_tk|: 0 unchanged, 1 disjoint.
  loss change     the model's next-character loss with the path removed minus intact, on every
                  position and on each pattern's labelled queries (`detectors.LOSS_KEYS`), with a
                  standard error over windows, as the head ablation of `measures.ablation`.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

import hashlib
import platform
import time
from pathlib import Path as FilePath

from andrea_edu import data as bookdata
from andrea_edu.heads import text_corpus as tc
from andrea_edu.heads.batch import Batch
from andrea_edu.heads.path_runs import INPUTS, PATHS_FILE, ROUTES, SCHEMA, WRITERS, entry, expected_entries
from andrea_edu.heads.run import Run
from andrea_edu.heads.text_runs import TextSettings
from andrea_edu.model import AndreaModel, attention_probabilities
from andrea_edu.projections import head_contributions, project_c_attn
from andrea_lab.store import stamped

RECHECK_TOL = 1e-4  # nats and TV: the float noise of one re-run is ~1e-7; see recheck()


@dataclass(frozen=True)
class Path:
    """Head (src_layer, src_head)'s output removed from head (dst_layer, dst_head)'s `inputs`
    (a string of q, k, v: "k", or "qkv" for all three)."""

    src_layer: int
    src_head: int
    dst_layer: int
    dst_head: int
    inputs: str = "qkv"


def _check(model: AndreaModel, paths) -> int:
    L, nh = model.cfg.n_layer, model.cfg.n_head
    if not paths:
        raise ValueError("paths must name at least one Path")
    dst = {p.dst_layer for p in paths}
    if len(dst) != 1:
        raise ValueError(f"every path of one call must end in the same layer, got dst_layer "
                         f"{sorted(dst)}")
    for p in paths:
        if not isinstance(p, Path):
            raise TypeError(f"paths must hold Path objects, got {type(p).__name__}")
        if not (isinstance(p.dst_layer, int) and 1 <= p.dst_layer < L):
            raise ValueError(f"dst_layer={p.dst_layer!r} must be an int in 1..{L - 1}")
        if not (isinstance(p.src_layer, int) and 0 <= p.src_layer < p.dst_layer):
            raise ValueError(f"src_layer={p.src_layer!r} must be an int in 0..{p.dst_layer - 1} "
                             f"(before dst_layer={p.dst_layer})")
        for name in ("src_head", "dst_head"):
            h = getattr(p, name)
            if not (isinstance(h, int) and 0 <= h < nh):
                raise ValueError(f"{name}={h!r} must be an int in 0..{nh - 1} (n_head={nh})")
        if not p.inputs or set(p.inputs) - set(INPUTS):
            raise ValueError(f"inputs={p.inputs!r} must be a non-empty string of 'q', 'k', 'v'")
    return dst.pop()


def _qkv(block, X: torch.Tensor, nh: int):
    att = block.attn
    q, k, v = project_c_attn(X, att.c_attn, nh)  # 3 x (B, nh, T, hs)
    if att.b_attn is not None:
        b_q, b_k, b_v = att.b_attn.view(3, nh, 1, -1)
        q, k, v = q + b_q, k + b_k, v + b_v
    return q, k, v


def _attn(block, q, k, v, nh: int):
    """(output (B, T, C), probabilities (B, nh, T, T), per-head outputs (nh, B, T, C))."""
    A = attention_probabilities(q, k)  # (B, nh, T, T)
    y = A @ v.float()  # (B, nh, T, hs)
    parts = head_contributions(y, block.attn.W_O)  # (nh, B, T, C)
    out = parts.sum(0)
    if block.attn.b_O is not None:
        out = out + block.attn.b_O
    return out, A, parts


def _check_idx(model: AndreaModel, idx) -> None:
    ok = (isinstance(idx, torch.Tensor) and idx.dtype == torch.long and idx.dim() == 2
          and idx.shape[1] <= model.cfg.block_size
          and not (idx.numel() and (idx.min() < 0 or idx.max() >= model.cfg.vocab_size)))
    if not ok:
        model.hidden(idx)  # raises the model's one-line error for bad token ids


@torch.no_grad()
def _run(model: AndreaModel, x: torch.Tensor, start: int, paths=(), outs=None):
    """Blocks start.. on residual x; paths end in layer `start`. Returns (logits, maps of layers
    start.., per-head outputs {layer: (nh, B, T, C)}, residual before each block {layer: x})."""
    nh = model.cfg.n_head
    outs = dict(outs or {})
    resid, maps = {}, []
    for l in range(start, len(model.blocks)):
        block = model.blocks[l]
        resid[l] = x
        q, k, v = _qkv(block, block.ln_1(x), nh)
        if paths and l == start:
            removed: dict[tuple[int, str], torch.Tensor] = {}
            for p in paths:
                for i in p.inputs:
                    o = outs[p.src_layer][p.src_head]
                    key = (p.dst_head, i)
                    removed[key] = removed[key] + o if key in removed else o
            new = {"q": q, "k": k, "v": v}
            for (h, i), o in removed.items():
                patched = dict(zip(INPUTS, _qkv(block, block.ln_1(x - o), nh)))
                t = new[i].clone()
                t[:, h] = patched[i][:, h]  # only head h's input i reads the patched stream
                new[i] = t
            q, k, v = new["q"], new["k"], new["v"]
        out, A, parts = _attn(block, q, k, v, nh)
        outs[l] = parts
        maps.append(A)
        x = x + out
        x = x + block.mlp(block.ln_2(x))
    return model.ln_f(x) @ model.wte.t(), torch.stack(maps), outs, resid


@torch.no_grad()
def forward(model: AndreaModel, idx: torch.Tensor, paths=()):
    """(logits (B, T, V), attention maps (L, B, nh, T, T)) with `paths` removed (none: the
    intact model, equal to `model(idx)` up to float rounding)."""
    if paths:
        _check(model, paths)
    _check_idx(model, idx)
    x = model.wte[idx] + model.wpe[: idx.shape[1]]  # (B, T, C)
    logits, maps, outs, resid = _run(model, x, 0)
    if not paths:
        return logits, maps
    dst = paths[0].dst_layer
    logits2, maps2, _, _ = _run(model, resid[dst], dst, paths, outs)
    return logits2, torch.cat([maps[:dst], maps2])


def per_position_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    B, T, V = logits.shape
    return F.cross_entropy(logits.flatten(0, 1), targets.flatten(), reduction="none").view(B, T)


def total_variation(A: torch.Tensor, B: torch.Tensor) -> float:
    """Mean over rows of 0.5 sum |A - B| (rows are attention distributions)."""
    return float(0.5 * (A - B).abs().sum(-1).mean())


@torch.no_grad()
def path_effects(model: AndreaModel, batch, paths_list, chunk: int = 32) -> dict:
    """For each entry of `paths_list` (a list of Path lists, each one intervention): the change of
    its destination head's pattern and of the loss (detectors.LOSS_KEYS) with standard errors.

    batch: a real-text `heads.batch.Batch`. Returns {"tv": (n,), "loss": (n, 4), "loss_se": (n, 4),
    "base_loss": (4,)}; tv is measured on the destination head of the entry's first path."""
    from andrea_edu.heads import measures as M
    n = len(paths_list)
    for ps in paths_list:
        _check(model, ps)
    tv_sum = np.zeros(n)
    rows = batch.idx.shape[0]
    base_pos = torch.zeros(batch.idx.shape)
    pos = torch.zeros((n,) + tuple(batch.idx.shape))
    for a in range(0, rows, chunk):
        idx, tgt = batch.idx[a: a + chunk], batch.targets[a: a + chunk]
        _check_idx(model, idx)
        lg, maps, outs, resid = _run(model, model.wte[idx] + model.wpe[: idx.shape[1]], 0)
        base_pos[a: a + chunk] = per_position_loss(lg, tgt)
        for j, ps in enumerate(paths_list):
            l2, h2 = ps[0].dst_layer, ps[0].dst_head
            lg2, maps2, _, _ = _run(model, resid[l2], l2, ps, outs)  # from the dst layer on
            pos[j, a: a + chunk] = per_position_loss(lg2, tgt)
            tv_sum[j] += total_variation(maps2[0, :, h2], maps[l2, :, h2]) * idx.shape[0]
    base = M.pattern_losses(base_pos, batch)
    base_w = M.window_means(base_pos, batch)
    loss, se = np.zeros((n, 4)), np.zeros((n, 4))
    for j in range(n):
        loss[j] = M.pattern_losses(pos[j], batch) - base
        se[j] = M.standard_errors(M.window_means(pos[j], batch) - base_w)
    return {"tv": tv_sum / rows, "loss": loss, "loss_se": se, "base_loss": base}


# ---------------------------------------------------------------- the other readers of a head
def _reader_ok(model: AndreaModel, src: tuple[int, int], reader: str) -> None:
    L, nh = model.cfg.n_layer, model.cfg.n_head
    l, h = src
    if not (isinstance(l, int) and 0 <= l < L and isinstance(h, int) and 0 <= h < nh):
        raise ValueError(f"src={src!r} must be (layer in 0..{L - 1}, head in 0..{nh - 1})")
    allowed = [f"mlp{i}" for i in range(l, L)] + [f"attn{i}" for i in range(l + 1, L)] + ["out"]
    if reader not in allowed:
        raise ValueError(f"reader={reader!r} must be one of {allowed} for a head of layer {l}")


@torch.no_grad()
def forward_route(model: AndreaModel, idx: torch.Tensor, src: tuple[int, int], reader: str):
    """Logits (B, T, V) with head src's output removed from one reader only: "mlp{l}" (the MLP of
    layer l >= src's layer reads ln_2(x - o)), "attn{l}" (every head of layer l > src's layer
    reads ln_1(x - o) for its q, k and v) or "out" (the final ln_f reads x - o). Everything else
    reads the intact stream; o is the head's output in the intact forward."""
    _reader_ok(model, src, reader)
    _check_idx(model, idx)
    nh = model.cfg.n_head
    x = model.wte[idx] + model.wpe[: idx.shape[1]]
    o = None
    for l, block in enumerate(model.blocks):
        X = block.ln_1(x if not (o is not None and reader == f"attn{l}") else x - o)
        q, k, v = _qkv(block, X, nh)
        out, _, parts = _attn(block, q, k, v, nh)
        if l == src[0]:
            o = parts[src[1]]
        x = x + out
        x = x + block.mlp(block.ln_2(x - o if (o is not None and reader == f"mlp{l}") else x))
    assert o is not None
    return model.ln_f(x - o if reader == "out" else x) @ model.wte.t()


@torch.no_grad()
def route_effects(model: AndreaModel, batch, src: tuple[int, int], readers, chunk: int = 32) -> dict:
    """{"loss": (n, 4), "loss_se": (n, 4), "base_loss": (4,)}: the loss change (detectors.LOSS_KEYS)
    when head src is removed from each reader of `readers` alone (see `forward_route`)."""
    from andrea_edu.heads import measures as M
    for r in readers:
        _reader_ok(model, src, r)
    rows = batch.idx.shape[0]
    base_pos = torch.zeros(batch.idx.shape)
    pos = torch.zeros((len(readers),) + tuple(batch.idx.shape))
    for a in range(0, rows, chunk):
        idx, tgt = batch.idx[a: a + chunk], batch.targets[a: a + chunk]
        base_pos[a: a + chunk] = per_position_loss(forward(model, idx)[0], tgt)
        for j, r in enumerate(readers):
            pos[j, a: a + chunk] = per_position_loss(forward_route(model, idx, src, r), tgt)
    base = M.pattern_losses(base_pos, batch)
    base_w = M.window_means(base_pos, batch)
    loss, se = np.zeros((len(readers), 4)), np.zeros((len(readers), 4))
    for j in range(len(readers)):
        loss[j] = M.pattern_losses(pos[j], batch) - base
        se[j] = M.standard_errors(M.window_means(pos[j], batch) - base_w)
    return {"loss": loss, "loss_se": se, "base_loss": base}


def grid(n_head: int) -> list[tuple[str, list[Path]]]:
    """(label, paths) of every head-to-head entry of a complete file, in its order
    (`path_runs.expected_entries` without the routes to an MLP or the output)."""
    return [(lab, [Path(*p) for p in ps]) for lab, ps in expected_entries(n_head)
            if len(ps[0]) == 5]


def ablation_windows(run: Run, corpus: tc.Corpus, n: int | None = None) -> Batch:
    from andrea_edu.heads.text_training import ABLATION_SEED
    if not isinstance(run.settings, TextSettings):
        raise ValueError(f"run: a real-text run (heads.text_runs.load_run) is needed; this is a "
                         f"{run.lab} run")
    return tc.labelled_batch(corpus, n or run.settings.ablation_batch, run.settings.seq_len,
                             seed=ABLATION_SEED)


def measure(run: Run, corpus: tc.Corpus, weights_sha256: str, entries=None) -> dict:
    """Every entry of `grid` (or the given (label, paths) list) on the run's ablation windows."""
    if run.model is None:
        raise ValueError("run.model is None: load the run with its weights (with_model=True)")
    full = entries is None
    entries = grid(run.settings.n_head) if entries is None else entries
    batch = ablation_windows(run, corpus)
    t0, c0 = time.perf_counter(), time.process_time()
    r = path_effects(run.model, batch, [p for _, p in entries])
    routes = []
    if full:
        for a in WRITERS:
            rr = route_effects(run.model, batch, (0, a), list(ROUTES))
            routes += [{"label": f"L0H{a} -> {name}", "paths": [[0, a, reader]], "tv": None,
                        "loss": np.round(rr["loss"][j], 6).tolist(),
                        "loss_se": np.round(rr["loss_se"][j], 6).tolist()}
                       for j, (reader, name) in enumerate(ROUTES.items())]
    return {"schema": SCHEMA, "weights_sha256": weights_sha256,
            "windows": {"seed": "text_training.ABLATION_SEED", "n": batch.idx.shape[0],
                        "seq_len": batch.idx.shape[1]},
            "base_loss": np.round(r["base_loss"], 6).tolist(),
            "entries": [{"label": lab, "paths": [[p.src_layer, p.src_head, p.dst_layer,
                                                  p.dst_head, p.inputs] for p in ps],
                         "tv": round(float(r["tv"][j]), 6),
                         "loss": np.round(r["loss"][j], 6).tolist(),
                         "loss_se": np.round(r["loss_se"][j], 6).tolist()}
                        for j, (lab, ps) in enumerate(entries)] + routes,
            "provenance": stamped(bookdata.new_provenance(
                "path ablations of the committed real-text model (andrea_lab.path_ablation)",
                "python -m andrea_lab.make_realtext_paths --out book/data/" + PATHS_FILE,
                machine=platform.machine(),
                code_sha256=hashlib.sha256(FilePath(__file__).read_bytes()).hexdigest()[:16],
                cpu_seconds=round(time.process_time() - c0, 1),
                wall_seconds=round(time.perf_counter() - t0, 1)))}


def recheck(run: Run, corpus: tc.Corpus, d: dict, labels: list[str]) -> dict:
    """Re-measure the `labels` entries on the same windows; the largest difference from the file
    (tv and loss, nats) against RECHECK_TOL (the file rounds to 1e-6)."""
    known = dict(grid(run.settings.n_head))
    for lab in labels:
        if lab not in known:
            raise ValueError(f"label={lab!r} is not an entry; e.g. {next(iter(known))!r}")
    fresh = measure(run, corpus, d["weights_sha256"], [(lab, known[lab]) for lab in labels])
    diff = 0.0
    for e in fresh["entries"]:
        old = entry(d, e["label"])
        diff = max(diff, abs(e["tv"] - old["tv"]),
                   float(np.nanmax(np.abs(np.subtract(e["loss"], old["loss"], dtype=float)))))
    return {"labels": labels, "max_abs_diff": diff, "tol": RECHECK_TOL,
            "agrees": bool(diff <= RECHECK_TOL), "cpu_seconds": fresh["provenance"]["cpu_seconds"]}
