"""What each head does, measured on one labelled batch of either laboratory: pattern scores,
the uniform baseline, the best head per pattern, pattern losses, ablations, solo values.

The one home of these measures for the toy laboratory (chapter "Why heads specialize":
`heads.training` calls them during and after training, the chapter on the trained model) and
for real text (chapter "Heads on real text": `heads.text_training`, the chapter; path ablations: `andrea_lab.path_ablation`).
`key_score` is the one head scorer of every laboratory: the pattern scores here, the trained
encoder's probes (`heads.trained.patterns.head_table`) and the induction offsets and identifier
readings (`heads.induction`) only say which (window, query, key) triples to read.
A batch is the one `heads.batch.Batch` both labs build: the measures read its `idx`, `targets`
(B, T), `mask(p)` (B, T) bool, the queries pattern p labels, `key_of(p)` (B, T), the key each
designates, and `slice(a, b)`, windows a..b-1; p = 0, 1, 2 in the lab's pattern order. What the
labs decide from the measures stays with each: the toy's detection threshold, pattern names and
floors in `heads.toy_calls`, real text's ratio to the baseline in `heads.detectors`. What is read
off a head's own weights, gradients and outputs rather than a labelled batch (gradient norms,
output correlations) is `heads.per_head`.

Definitions (the chapters quote them; p is a pattern, l a layer, h a head, A the attention
probabilities of `AndreaModel.attention_maps`, Q_p the positions t where p decides the next
token, kappa_p(t) the key position p designates there):

pattern loss    mean next-token cross-entropy (nats) over the positions of Q_p ("all": every
                position), on a fixed evaluation batch. The toy's floor is its generator's own
                -ln P (0, except where a closing bracket's timing is a coin flip).
score           S[p, l, h] = mean over t in Q_p of A[l, h, t, kappa_p(t)]: the probability that
                head h, querying from t, puts on the one key position the pattern designates
                (t-1; the innermost open bracket; the latest named entity or identifier). 1 = all
                of it there; NaN for a pattern with no labelled query in the batch.
baseline        U[p] = mean over t in Q_p of 1/(t+1): the score of uniform causal attention
                (`baseline`; the toy's `toy_calls.chance_scores` is the same, in float32, by name).
ablation        D[l, h, p]: the increase of the pattern loss when head (l, h)'s row block of W_O
                is zeroed (`AndreaModel.ablate`), the rest of the model untouched; its standard
                error is over windows (each window's mean change), a sampling error.
solo value      V[l, h, p]: how much loss head (l, h) recovers on its own, i.e. loss with every
                head of layer l ablated minus loss with every head of layer l but h ablated.

chunk (where a function takes one): windows per forward pass, so that a large batch never holds
every map at once; None: the whole batch in one pass, as the toy laboratory's runs are recorded
(a different chunking can move the last bits of a loss or score).
"""
from __future__ import annotations

import numpy as np
import torch

from andrea_edu.heads.batch import Batch
from andrea_edu.model import AndreaModel

N_PATTERNS = 3  # both labs label three patterns, p = 0, 1, 2


# ---------------------------------------------------------------- heads' argument checks
# (the measures', the toy's calls' and the detectors' one-line errors)
def check_real(name: str, value, lo: float | None = None, hi: float | None = None) -> float:
    """value as a float when it is a real number (not bool, not text), finite, in [lo, hi];
    else ValueError/TypeError in one line naming `name` and what is allowed."""
    import math
    import numbers
    rng = ("" if lo is None and hi is None else
           f" in [{lo:g}, {hi:g}]" if lo is not None and hi is not None else
           f" >= {lo:g}" if lo is not None else f" <= {hi:g}")
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name}={value!r} must be a finite number{rng}, got "
                        f"{type(value).__name__}")
    v = float(value)
    if not math.isfinite(v) or (lo is not None and v < lo) or (hi is not None and v > hi):
        raise ValueError(f"{name}={value!r} is not allowed; a finite number{rng}")
    return v


def check_scores(name: str, scores, n_patterns: int = N_PATTERNS, allow_nan: bool = True):
    """scores as a float array of shape (n_patterns, n_layer, n_head), values in [0, 1] (NaN
    where nothing was measured, when allowed); else one line naming `name` and the shape."""
    try:
        s = np.asarray(scores, dtype=float)
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be numbers of shape ({n_patterns}, n_layer, n_head), got "
                        f"{type(scores).__name__}") from None
    if s.ndim != 3 or s.shape[0] != n_patterns or 0 in s.shape:
        raise ValueError(f"{name} must have shape ({n_patterns}, n_layer, n_head) (one score per "
                         f"pattern, layer and head), got {tuple(s.shape)}")
    bad = ~np.isnan(s) & ((s < 0) | (s > 1)) if allow_nan else ~np.isfinite(s) | (s < 0) | (s > 1)
    if bad.any() or np.isinf(s).any():
        raise ValueError(f"{name}: scores must lie in [0, 1]"
                         f"{' (NaN: not measured)' if allow_nan else ''}; "
                         f"got {s[bad | np.isinf(s)].ravel()[0]!r}")
    if np.isnan(s).all():
        raise ValueError(f"{name}: every score is NaN; nothing was measured")
    return s


def _chunk(chunk, allow_none: bool = True) -> int | None:
    if (chunk is None and allow_none) or (isinstance(chunk, int) and not isinstance(chunk, bool)
                                          and chunk >= 1):
        return chunk
    raise ValueError(f"chunk={chunk!r} is not allowed; an int >= 1 (windows per forward pass)"
                     + (" or None (the whole batch in one pass)" if allow_none else ""))


# ---------------------------------------------------------------- scores
def key_score(maps, b, q, k, per_query: bool = False):
    """The one head scorer. A pattern labels n queries, each with its key(s); a head's score is
    the attention probability it puts on the key, averaged over the queries.

    maps  (L, B, nh, T, T) attention probabilities, a tensor or an array (T keys per query: T
          causal, or an encoder's sentence with every key visible)
    b, q  (n,) integers: query i is position q_i of window b_i
    k     (n,) integers: the one key k_i the pattern names for query i; or (n, T) bool: a set of
          keys per query (an identifier's whole span), whose probabilities are summed
    -> (L, nh), each head's mean over the n queries (NaN for every head when n = 0); with
       per_query: (n, L, nh), before the mean (to compare two keys query by query, or to pool
       queries over chunks or sentences).
    """
    if not isinstance(per_query, bool):
        raise ValueError(f"per_query={per_query!r} must be True or False")
    if k.ndim == 1:
        w = maps[:, b, :, q, k]  # (n, L, nh): the indexed dimension comes first
    else:
        w = (maps[:, b, :, q, :] * k[:, None, None, :]).sum(-1)  # (n, L, nh, T) -> (n, L, nh)
    if per_query:
        return w
    return w.mean(0) if len(w) else w.sum(0) + float("nan")  # (L, nh)


def scores_from_maps(maps: torch.Tensor, batch: Batch) -> torch.Tensor:
    """maps (L, B, nh, T, T) -> S (3, L, nh), see the module docstring: `key_score` on each
    pattern's labelled queries and their keys; a pattern with no labelled query scores NaN."""
    out = []
    for p in range(N_PATTERNS):
        b, t = torch.nonzero(batch.mask(p), as_tuple=True)  # labelled (window, query)
        out.append(key_score(maps, b, t, batch.key_of(p)[b, t]))  # (L, nh)
    return torch.stack(out)


@torch.no_grad()
def attention_maps(model: AndreaModel, batch: Batch, chunk: int = 32) -> torch.Tensor:
    """(L, B, nh, T, T) attention probabilities, computed `chunk` windows at a time."""
    _chunk(chunk, allow_none=False)
    return torch.cat([model.attention_maps(batch.idx[i: i + chunk])
                      for i in range(0, batch.idx.shape[0], chunk)], dim=1)


@torch.no_grad()
def head_scores(model: AndreaModel, batch: Batch, chunk: int | None = 32) -> torch.Tensor:
    """S (3, L, nh): the pattern scores of every head on `batch`, `chunk` windows at a time
    (each chunk's scores weighted by its labelled queries) without keeping every map at once;
    chunk None: `scores_from_maps` of the whole batch's maps."""
    step = _chunk(chunk)
    if step is None:
        return scores_from_maps(model.attention_maps(batch.idx), batch)
    tot: torch.Tensor | None = None
    n = torch.zeros(N_PATTERNS)
    for i in range(0, batch.idx.shape[0], step):
        sub = batch.slice(i, i + step)
        w = torch.tensor([float(sub.mask(p).sum()) for p in range(N_PATTERNS)])  # (3,)
        s = scores_from_maps(model.attention_maps(sub.idx), sub).nan_to_num(0.0)  # (3, L, nh)
        tot = s * w[:, None, None] if tot is None else tot + s * w[:, None, None]
        n += w
    if tot is None:
        raise ValueError("head_scores: the batch holds no windows (batch.idx has 0 rows)")
    out = tot / n[:, None, None]
    out[n == 0] = float("nan")
    return out


def uniform_score(q: torch.Tensor, keys: torch.Tensor | int = 1,
                  dtype: torch.dtype = torch.float64) -> float:
    """The `key_score` of uniform causal attention on the same queries: the mean over the queries
    q (n,) of keys / (q + 1), the share of the q + 1 visible keys the pattern names (keys: one
    per query, or (n,) counts of a key set), computed in `dtype`; NaN when n = 0."""
    if len(q) == 0:
        return float("nan")
    return float((keys / (q.to(dtype) + 1)).mean())


def baseline(batch: Batch, dtype: torch.dtype = torch.float64) -> np.ndarray:
    """U (3,): `uniform_score` of each pattern's queries, the mean of 1/(t+1) (NaN: none),
    computed in `dtype` (the toy's recorded `chance_scores`: float32)."""
    return np.array([uniform_score(torch.nonzero(batch.mask(p), as_tuple=True)[1], dtype=dtype)
                     for p in range(N_PATTERNS)])


def label_counts(batch: Batch) -> list[dict]:
    """One row per pattern p = 0, 1, 2: "queries", the labelled queries in `batch`; "share", their
    share of its positions (B x T); "baseline", the pattern's score of uniform attention (U[p],
    float64; NaN: no query). The chapter "Heads on real text" tables them for its batch."""
    n = batch.idx.numel()
    base = baseline(batch)
    return [{"queries": int(batch.mask(p).sum()), "share": float(batch.mask(p).sum()) / n,
             "baseline": float(base[p])} for p in range(N_PATTERNS)]


def best_heads(scores) -> list[tuple[int, int]]:
    """For each pattern, the (layer, head) with the highest score (NaN ignored); scores
    (3, L, nh). The toy's `toy_calls.best_head_calls` adds each one's score and threshold call;
    the trained encoder's `trained.patterns.held_out_best_heads` picks on one half of its probe
    sentences and scores on the other."""
    s = check_scores("scores", scores, N_PATTERNS)
    out = []
    for p in range(s.shape[0]):
        if np.isnan(s[p]).all():
            raise ValueError(f"scores: pattern {p} has no head with a score (all NaN); "
                             f"best_heads needs at least one finite score per pattern")
        layer, head = np.unravel_index(np.nanargmax(s[p]), s[p].shape)
        out.append((int(layer), int(head)))
    return out


# ---------------------------------------------------------------- losses and ablations
def pattern_losses(per_position: torch.Tensor, batch: Batch) -> np.ndarray:
    """(4,) mean loss over every position ("all"), then over each pattern's queries (NaN: none),
    in the order of toy_calls.LOSS_KEYS (the toy's) and detectors.LOSS_KEYS (real text's)."""
    out = [float(per_position.mean())]
    for p in range(N_PATTERNS):
        m = batch.mask(p)
        out.append(float(per_position[m].mean()) if m.any() else float("nan"))
    return np.array(out)


@torch.no_grad()
def per_position_loss(model: AndreaModel, batch: Batch, heads=(),
                      chunk: int | None = 64) -> torch.Tensor:
    """(B, T) next-token loss with the heads in `heads` ((layer, head) pairs) ablated (W_O row
    blocks zeroed), `chunk` windows per forward pass (None: one pass)."""
    _chunk(chunk)
    with model.ablate(heads):
        if chunk is None:
            return model.per_position_loss(batch.idx, batch.targets)
        return torch.cat([model.per_position_loss(batch.idx[i: i + chunk],
                                                  batch.targets[i: i + chunk])
                          for i in range(0, batch.idx.shape[0], chunk)])


def window_means(per_pos: torch.Tensor, batch: Batch) -> np.ndarray:
    """(4, B): each window's mean loss over all positions and over each pattern (NaN: none)."""
    rows = [per_pos.mean(dim=1)]
    for p in range(N_PATTERNS):
        m = batch.mask(p).float()
        rows.append((per_pos * m).sum(1) / m.sum(1))  # nan where a window has no label
    return torch.stack(rows).double().numpy()


def standard_errors(dw: np.ndarray) -> np.ndarray:
    """(4,): the standard error over windows of each row of dw (4, B), NaN windows left out
    (NaN where fewer than two remain)."""
    out = np.zeros(dw.shape[0])
    for k in range(dw.shape[0]):
        v = dw[k][~np.isnan(dw[k])]
        out[k] = v.std(ddof=1) / np.sqrt(len(v)) if len(v) > 1 else np.nan
    return out


@torch.no_grad()
def ablation(model: AndreaModel, batch: Batch,
             chunk: int | None = 64) -> tuple[np.ndarray, np.ndarray]:
    """(D, SE): each (L, nh, 4), the pattern-loss increase when one head is ablated (last axis:
    "all", then the three patterns), and its standard error over windows (module docstring)."""
    L, nh = model.cfg.n_layer, model.cfg.n_head
    base_pos = per_position_loss(model, batch, chunk=chunk)
    base = pattern_losses(base_pos, batch)
    base_w = window_means(base_pos, batch)
    D, SE = np.zeros((L, nh, 4)), np.zeros((L, nh, 4))
    for l in range(L):
        for h in range(nh):
            pos = per_position_loss(model, batch, [(l, h)], chunk=chunk)
            D[l, h] = pattern_losses(pos, batch) - base
            SE[l, h] = standard_errors(window_means(pos, batch) - base_w)  # (4, B) -> (4,)
    return D, SE


@torch.no_grad()
def solo_values(model: AndreaModel, batch: Batch, chunk: int | None = 64) -> np.ndarray:
    """V (L, nh, 4): loss with all heads of the layer ablated minus loss with all but h ablated."""
    L, nh = model.cfg.n_layer, model.cfg.n_head
    out = np.zeros((L, nh, 4))

    def losses(heads):
        return pattern_losses(per_position_loss(model, batch, heads, chunk=chunk), batch)

    for l in range(L):
        none = losses([(l, h) for h in range(nh)])
        for h in range(nh):
            out[l, h] = none - losses([(l, j) for j in range(nh) if j != h])
    return out
