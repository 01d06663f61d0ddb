"""Induction heads, measured three ways, and the recent-identifier pattern read as the source says.

Introduced in the chapter "Heads on real text" (section "Circuits across layers"). An induction head
(Olsson et al. 2022, "In-context Learning and Induction Heads"; Elhage et al. 2021) completes a
repeat: at a token that occurred before, it attends to the token that came *after* the earlier
occurrence and copies it. It needs two layers: a layer-0 previous-token head writes "my previous
token was a" into each position, and the layer-1 head's keys read that (K-composition).

1. Induction score. Sequences of n characters drawn uniformly from the model's own vocabulary (UNK
   excluded), repeated once: 2n characters. For a query t = n + i in the second copy, the token
   after its earlier occurrence is at t - n + 1; the score is the head's mean weight there, over
   every query of the second copy, against uniform causal attention (mean 1/(t+1)). The same
   batch gives the duplicate-token score (weight on t - n, the earlier occurrence itself) and the
   previous-token score (t - 1).
2. Signatures in the weights (Elhage et al.'s eigenvalue test, sum Re(lambda) / sum |lambda|: +1
   when every eigenvalue is positive):
   copying         of a layer-1 head: its token OV circuit `circuits.token_ov` (token attended to
                   -> logits): positive when attending to x raises x.
   prefix matching of a (layer-0 writer, layer-1 reader) pair: the token-to-token matrix
                   P[x, y] = ln_1^1(wte[x] + p_mean) QK^h2 (gamma_1 * (ln_1^0(wte[y] + p_mean) OV^h1))^T,
                   the score of a query token x for a key whose previous token was y, through the
                   writer: positive when a token attends to keys preceded by itself. LayerNorm: the
                   writer reads its real input (layer 0's ln_1 of the embedding, without beta_0);
                   what it writes meets layer 1's gamma_1 only (the centering, the scale and beta_1
                   of layer 1's ln_1 on the key side ignored, as in `heads.composition`); the query
                   side is layer 1's full ln_1 of the embedding. Layer 0's MLP is left out: the
                   direct path.
3. Loss on the second copy. The next-character loss on the first copy (nothing to copy from) and
   on the second (everything is): an induction mechanism makes the second far lower. Per layer-1
   head, the rise of the second-copy loss when that head is ablated says which head carries it.

The recent-identifier pattern (`text_corpus.file_labels`) already labels the induction key: its
key is the character *after* the earlier occurrence's matching character. The source says a head
"looks at the most recent named entity": at the earlier occurrence itself. `identifier_targets`
gives, for the same queries, the key of the same character in the earlier occurrence (duplicate)
and the earlier occurrence's whole span, so both readings can be scored.
"""
from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from ..model import AndreaModel
from . import circuits as K
from . import text_corpus as tc
from .batch import Batch
from .composition import folded
from .measures import key_score, uniform_score


# ---------------------------------------------------------------- 1. repeated random sequences
def repeated_batch(vocab_size: int, B: int, n: int, seed: int = 0, skip=(0,)) -> torch.Tensor:
    """(B, 2n) long: n characters drawn uniformly from 0..vocab_size-1 except `skip` (UNK), twice."""
    if not (isinstance(n, int) and n >= 2) or not (isinstance(B, int) and B >= 1):
        raise ValueError(f"B={B!r} must be an int >= 1 and n={n!r} an int >= 2")
    ids = torch.tensor([i for i in range(vocab_size) if i not in set(skip)])
    if len(ids) < 2:
        raise ValueError(f"vocab_size={vocab_size} leaves fewer than 2 characters after skip={skip}")
    g = torch.Generator().manual_seed(seed)
    first = ids[torch.randint(len(ids), (B, n), generator=g)]
    return torch.cat([first, first], dim=1)


def offset_scores(maps: torch.Tensor, n: int) -> dict[str, Any]:
    """maps (L, B, nh, 2n, 2n) of repeated sequences -> {"induction", "duplicate", "previous",
    "uniform"}: (L, nh) `measures.key_score` over every window's second-copy queries t, on the key
    t - n + 1, t - n and t - 1 (uniform: a scalar)."""
    T = maps.shape[-1]
    if T != 2 * n:
        raise ValueError(f"maps cover {T} positions; repeated sequences of n={n} have {2 * n}")
    t = torch.arange(n, 2 * n)
    b, q = (x.flatten() for x in torch.meshgrid(torch.arange(maps.shape[1]), t, indexing="ij"))
    out: dict[str, Any] = {name: key_score(maps, b, q, q - d).numpy()
                           for name, d in (("induction", n - 1), ("duplicate", n), ("previous", 1))}
    out["uniform"] = uniform_score(t)
    return out


@torch.no_grad()
def copy_losses(model: AndreaModel, idx: torch.Tensor, n: int, heads=()) -> tuple[float, float]:
    """(first-copy loss, second-copy loss), nats, with `heads` ablated: mean next-character loss
    of the queries 0..n-2 (predicting characters 1..n-1) and n..2n-2 (predicting n+1..2n-1)."""
    with model.ablate(heads):
        loss = model.per_position_loss(idx[:, :-1], idx[:, 1:])  # (B, 2n-1)
    return float(loss[:, : n - 1].mean()), float(loss[:, n:].mean())


@torch.no_grad()
def measure_repeats(model: AndreaModel, B: int = 64, n: int | None = None, seed: int = 0,
                    ablate: bool = True) -> dict:
    """Everything of measures 1 and 3 on one batch: offset scores (L, nh), the two copy losses,
    and per layer-1 head (the last layer's heads) the second-copy loss rise when it is ablated
    (ablate=False leaves that out: one forward pass per head fewer)."""
    n = model.cfg.block_size // 2 if n is None else n
    idx = repeated_batch(model.cfg.vocab_size, B, n, seed)
    out = offset_scores(model.attention_maps(idx), n)
    first, second = copy_losses(model, idx, n)
    last = model.cfg.n_layer - 1
    out.update(first_loss=first, second_loss=second, n=n, batch=B, seed=seed)
    if ablate:
        out["ablated_second"] = np.array([copy_losses(model, idx, n, [(last, h)])[1] - second
                                          for h in range(model.cfg.n_head)])
    return out


# ---------------------------------------------------------------- 2. signatures in the weights
def eigen_positivity(M: torch.Tensor) -> float:
    """sum Re(lambda) / sum |lambda| of a square matrix (Elhage et al.'s positivity measure)."""
    return K.eigen_copying(M)


@torch.no_grad()
def prefix_matrix(model: AndreaModel, writer: tuple[int, int], reader: tuple[int, int]) -> torch.Tensor:
    """P (V, V): query token x against a key whose previous token was y, through the writer's OV
    and the reader's QK (see the module docstring)."""
    (l1, h1), (l2, h2) = writer, reader
    if not l1 < l2:
        raise ValueError(f"writer layer {l1} must come before reader layer {l2}")
    wte, p_mean = model.wte.detach().double(), model.wpe.detach().double().mean(0)
    ln0, ln1 = model.blocks[l1].ln_1, model.blocks[l2].ln_1
    _, _, WV1, WO1 = folded(model, l1, h1)  # W_V with ln0's weight folded in
    WQ2, WK2, _, _ = _split_raw(model, l2, h2)
    x = wte + p_mean  # (V, C)
    normed = F.layer_norm(x, x.shape[-1:], eps=ln0.eps)  # centred, scaled, no weight or bias
    keys = normed @ WV1 @ WO1 * ln1.weight.detach().double()  # (V, C): what h1 writes, gamma_1
    queries = F.layer_norm(x, x.shape[-1:], ln1.weight.detach().double(),
                           ln1.bias.detach().double(), ln1.eps)  # (V, C): the reader's own ln_1
    return (queries @ WQ2) @ (keys @ WK2).T / math.sqrt(WQ2.shape[1])  # (V, V)


def _split_raw(model, layer, head):
    return tuple(w.double() for w in K._split(model, layer, head))


def signatures(model: AndreaModel, src_layer: int = 0, dst_layer: int = 1,
               tokens=None) -> dict[str, np.ndarray]:
    """{"copying": (nh,) of the dst layer's heads, "prefix": (nh, nh) [writer, reader]}, each
    the eigenvalue positivity, on the `tokens` rows and columns (all by default)."""
    nh = model.cfg.n_head
    sel = slice(None) if tokens is None else torch.as_tensor(list(tokens))
    cp = np.array([eigen_positivity(K.token_ov(model, dst_layer, h)[sel][:, sel])
                   for h in range(nh)])
    pm = np.array([[eigen_positivity(prefix_matrix(model, (src_layer, a), (dst_layer, b))[sel][:, sel])
                    for b in range(nh)] for a in range(nh)])
    return {"copying": cp, "prefix": pm}


# ---------------------------------------------------------------- the three, for any depth
FOUND_FACTOR = 5.0  # induction score, times uniform (detectors.FOUND_RATIO's 5x)
DROP_NATS = 0.5  # the second copy cheaper by half a nat: far beyond the batch's sampling noise


def is_induction(ratio: float, drop: float) -> bool:
    """The book's call: an induction head when the best head puts FOUND_FACTOR x uniform on the
    induction key and the second copy's loss is lower than the first's by more than DROP_NATS."""
    return ratio >= FOUND_FACTOR and drop > DROP_NATS


@torch.no_grad()
def evidence(model: AndreaModel, tokens=None, B: int = 32, seed: int = 0,
             rep: dict | None = None) -> dict:
    """The three measurements of one model, of any depth, summed up at its best candidate: the
    head of a layer >= 1 (layer 0 has no earlier head to read the previous token from) with the
    highest induction score on repeated random characters (n = block_size / 2). Returns
    {"rep": measure_repeats, "head": (l, h), "ratio": its score / uniform, "drop": first-copy
    minus second-copy loss, "ablated": the second copy's loss rise with that head ablated,
    "copying": its token-OV positivity, "prefix": (best prefix-matching positivity into it over
    every head of every earlier layer, that writer (l, h)), "found": is_induction}. The prefix
    matrix of a writer above layer 0 reads the embedding through its own ln_1 (the direct path,
    as for layer 0). rep: this model's measure_repeats already made (its batch and seed are
    used), so a page shows one set of numbers per model."""
    if model.cfg.n_layer < 2:
        raise ValueError(f"n_layer={model.cfg.n_layer}: induction needs a model of >= 2 layers")
    if rep is None:
        rep = measure_repeats(model, B=B, seed=seed, ablate=False)  # one head is ablated below
    n, B, seed = rep["n"], rep["batch"], rep["seed"]
    ind = rep["induction"][1:]
    l, h = (int(i) for i in np.unravel_index(np.argmax(ind), ind.shape))
    l += 1
    ratio = float(rep["induction"][l, h] / rep["uniform"])
    drop = rep["first_loss"] - rep["second_loss"]
    idx = repeated_batch(model.cfg.vocab_size, B, n, seed)
    ablated = copy_losses(model, idx, n, [(l, h)])[1] - rep["second_loss"]
    sel = slice(None) if tokens is None else torch.as_tensor(list(tokens))
    copying = eigen_positivity(K.token_ov(model, l, h)[sel][:, sel])
    pre = {(a, b): eigen_positivity(prefix_matrix(model, (a, b), (l, h))[sel][:, sel])
           for a in range(l) for b in range(model.cfg.n_head)}
    w = max(pre, key=lambda k: pre[k])
    return {"rep": rep, "head": (l, h), "ratio": ratio, "drop": drop, "ablated": ablated,
            "copying": copying, "prefix": (pre[w], w), "found": is_induction(ratio, drop)}


# ---------------------------------------------------------------- 4. the source's pattern
@functools.lru_cache(maxsize=256)
def _occurrences(text: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per character of `text`: start of the most recent earlier occurrence of the identifier it
    belongs to (-1: none), that identifier's length, and the character's offset in it."""
    n = len(text)
    prev, length, off = (np.full(n, -1, dtype=np.int64) for _ in range(3))
    last: dict[str, int] = {}
    for name, a, b in tc.identifier_occurrences(text):
        if name in last:
            prev[a: b] = last[name]
            length[a: b] = b - a
            off[a: b] = np.arange(b - a)
        last[name] = a
    return prev, length, off


def identifier_targets(corpus: tc.Corpus, batch: Batch) -> dict[str, torch.Tensor]:
    """For the recent-identifier queries of `batch` (its IDENT mask): "induction" (B, T), the key
    the book's detector uses (next character of the earlier occurrence); "duplicate" (B, T), the
    same character of the earlier occurrence; "span_start", "span_end" (B, T), the earlier
    occurrence [start, end) clipped to the window (-1 where the query has no label)."""
    B, T = batch.idx.shape
    dup = torch.full((B, T), -1, dtype=torch.long)
    s0, s1 = dup.clone(), dup.clone()
    for b, (name, start) in enumerate(batch.where):
        prev, length, off = _occurrences(corpus.file(name).text)
        for t in torch.nonzero(batch.mask(tc.IDENT)[b]).flatten().tolist():
            p, ln, i = int(prev[start + t]), int(length[start + t]), int(off[start + t])
            dup[b, t] = p + i - start if p + i - start >= 0 else -1
            s0[b, t] = max(p - start, 0)
            s1[b, t] = p + ln - start
    return {"induction": batch.key[tc.IDENT], "duplicate": dup, "span_start": s0, "span_end": s1}


def identifier_scores(maps: torch.Tensor, targets: dict[str, torch.Tensor]) -> dict:
    """maps (L, B, nh, T, T) -> per reading ("induction", "duplicate", "span"): its scores (L, nh)
    (`measures.key_score` on the key, or on the span's keys, their weights summed, over the
    labelled queries where that key is in the window), its uniform baseline (mean of keys / (t+1))
    and the number of queries."""
    L, B, nh, T, _ = maps.shape
    out = {}
    for name in ("induction", "duplicate"):
        b, t = torch.nonzero(targets[name] >= 0, as_tuple=True)
        out[name] = (key_score(maps, b, t, targets[name][b, t]).numpy(),
                     uniform_score(t), len(t))
    b, t = torch.nonzero(targets["span_start"] >= 0, as_tuple=True)
    a, e = targets["span_start"][b, t], targets["span_end"][b, t]
    keys = torch.arange(T)
    inside = (keys[None, :] >= a[:, None]) & (keys[None, :] < e[:, None])  # (n, T)
    out["span"] = (key_score(maps, b, t, inside).numpy(), uniform_score(t, inside.sum(1)), len(t))
    return out


@torch.no_grad()
def identifier_readings(model: AndreaModel, corpus: tc.Corpus, batch: Batch,
                        chunk: int = 32) -> dict:
    """`identifier_scores` over a whole batch, `chunk` windows of maps at a time:
    {reading: (scores (L, nh), uniform, number of queries)}."""
    tot: dict = {}
    for a in range(0, batch.idx.shape[0], chunk):
        sub = batch.slice(a, a + chunk)
        part = identifier_scores(model.attention_maps(sub.idx), identifier_targets(corpus, sub))
        for k, (sc, u, n) in part.items():
            if n:
                s0, u0, n0 = tot.get(k, (0.0, 0.0, 0))
                tot[k] = (s0 + sc * n, u0 + u * n, n0 + n)
    return {k: (s / n, u / n, n) for k, (s, u, n) in tot.items()}
