"""What each head does, measured on one batch: pattern losses, scores, ablations, gradients.

Introduced in the chapter "Why heads specialize" (`specialization.train` calls these during and
after training; the chapter calls them on the trained model).

Definitions (the chapter quotes them; p is a pattern, l a layer, h a head, A the attention
probabilities of `AndreaModel.capture_attention`, positions t where p decides the next token):

pattern loss    mean next-token cross-entropy (nats) over the positions of pattern p, on a fixed
                evaluation batch. Its floor is the corpus generator's own -ln P (0, except where
                a closing bracket's timing is a coin flip).
score           S[p, l, h] = mean over those positions t of A[l, h, t, key_p(t)]: the probability
                that head h, querying from t, puts on the one key position the pattern designates
                (t-1; the innermost open bracket; the latest named entity). 1 = all of it there.
                Uniform causal attention would score the mean of 1/(t+1) (`chance_scores`).
detected        a head is detected for p when S[p, l, h] >= DETECT_THRESHOLD (0.5: at least half
                of its probability on the designated key); the highest-scoring such pattern.
ablation        Δ[l, h, p]: the increase of the pattern loss when head (l, h)'s row block of W_O
                is zeroed (`AndreaModel.ablate`), the rest of the model untouched.
solo value      V[l, h, p]: how much loss head (l, h) recovers on its own, i.e. loss with every
                head of layer l ablated minus loss with every head of layer l but h ablated.
gradient norm   G[step, l, h]: the Frobenius norm of the loss gradient with respect to head h's own
                parameters: its columns of W_Q, W_K, W_V (in c_attn) and its rows of W_O, at
                every training step, before the optimizer moves them.
"""
from __future__ import annotations

import numpy as np
import torch

from andrea_edu.attention import attention
from andrea_edu.env import check_real, check_scores
from andrea_edu.heads.corpus import PATTERNS, Batch
from andrea_edu.model import AndreaModel
from andrea_edu.projections import head_contributions, project_c_attn

PATTERN_IDS = tuple(PATTERNS)  # (POSITIONAL, SYNTACTIC, SEMANTIC)
PATTERN_NAMES = tuple(PATTERNS.values())  # ("previous token", "matching bracket", "recent entity")
LOSS_KEYS = ("all",) + PATTERN_NAMES  # the columns of every loss table: whole batch, then patterns
DETECT_THRESHOLD = 0.5
# How far one head's score moves when only the CPU's rounding changes (two x86 machines before
# the instruction-set pins): the chapter run's best matching-bracket head scored 0.505 on one and
# 0.428 on the other. A score closer to the threshold than SCORE_MARGIN is "at the threshold":
# no claim may rest on the side it fell on; claims rest on the multi-seed sweep instead.
SCORE_MARGIN = 0.1


def pattern_losses(per_position: torch.Tensor, batch: Batch) -> dict[str, float]:
    """Mean loss over the whole batch ("all") and over each pattern's positions."""
    out = {"all": float(per_position.mean())}
    for p, name in PATTERNS.items():
        m = batch.pattern == p
        out[name] = float(per_position[m].mean()) if m.any() else float("nan")
    return out


def floors(batch: Batch) -> dict[str, float]:
    """The generator's irreducible loss on each pattern's positions of `batch`."""
    return {name: float(batch.floor[batch.pattern == p].mean()) for p, name in PATTERNS.items()}


def scores_from_maps(maps: torch.Tensor, batch: Batch) -> torch.Tensor:
    """maps (L, B, nh, T, T) -> S (3, L, nh), see the module docstring."""
    L, B, nh, T, _ = maps.shape
    by_query = maps.permute(1, 3, 4, 0, 2)  # (B, T, T, L, nh): [sequence, query, key]
    out = torch.zeros(len(PATTERN_IDS), L, nh)
    for i, p in enumerate(PATTERN_IDS):
        b, t = torch.nonzero(batch.pattern == p, as_tuple=True)  # labelled (sequence, query)
        k = batch.key[b, t]  # the designated key of each
        out[i] = by_query[b, t, k].mean(dim=0)  # (n, L, nh) -> (L, nh)
    return out


def chance_scores(batch: Batch) -> dict[str, float]:
    """The score of a head that spreads its attention evenly over keys 0..t: mean of 1/(t+1)."""
    t = torch.arange(batch.idx.shape[1]).expand_as(batch.pattern).float()
    return {name: float((1 / (t + 1))[batch.pattern == p].mean()) for p, name in PATTERNS.items()}


def head_scores(model: AndreaModel, batch: Batch) -> torch.Tensor:
    """S (3, L, nh): the pattern scores of every head on `batch`."""
    return scores_from_maps(model.attention_maps(batch.idx), batch)


def detect(scores, threshold: float = DETECT_THRESHOLD) -> dict[tuple[int, int], str | None]:
    """{(layer, head): the pattern the head is detected for, or None}; scores (3, L, nh);
    threshold a number in [0, 1]."""
    threshold = check_real("threshold", threshold, 0.0, 1.0)
    s = torch.as_tensor(check_scores("scores", scores, len(PATTERN_NAMES)))
    out = {}
    for l in range(s.shape[1]):
        for h in range(s.shape[2]):
            best = int(s[:, l, h].argmax())
            out[(l, h)] = PATTERN_NAMES[best] if s[best, l, h] >= threshold else None
    return out


def threshold_call(score: float, threshold: float = DETECT_THRESHOLD,
                   margin: float = SCORE_MARGIN) -> str:
    """"above" (score >= threshold + margin), "below" (score < threshold - margin), or "at the
    threshold" in between: a side that float rounding alone could flip. "not measurable" for a
    NaN score; threshold in [0, 1], margin >= 0."""
    threshold = check_real("threshold", threshold, 0.0, 1.0)
    margin = check_real("margin", margin, 0.0)
    if isinstance(score, bool) or not isinstance(score, (int, float, np.floating, np.integer)):
        raise TypeError(f"score={score!r} must be a number (NaN: not measured), got "
                        f"{type(score).__name__}")
    if not np.isfinite(score):
        return "not measurable"
    if score >= threshold + margin:
        return "above"
    if score < threshold - margin:
        return "below"
    return "at the threshold"


def best_heads(scores, threshold: float = DETECT_THRESHOLD,
               margin: float = SCORE_MARGIN) -> dict[str, dict]:
    """Per pattern: the best-scoring head, its score and `threshold_call`; scores (3, L, nh)."""
    check_real("threshold", threshold, 0.0, 1.0)
    check_real("margin", margin, 0.0)
    s = check_scores("scores", scores, len(PATTERN_NAMES))
    out = {}
    for i, name in enumerate(PATTERN_NAMES):
        l, h = np.unravel_index(np.nanargmax(s[i]), s[i].shape)
        out[name] = {"layer": int(l), "head": int(h), "score": float(s[i, l, h]),
                     "call": threshold_call(float(s[i, l, h]), threshold, margin)}
    return out


@torch.no_grad()
def _losses(model: AndreaModel, batch: Batch, heads=()) -> np.ndarray:
    with model.ablate(heads):
        per_pos = model.per_position_loss(batch.idx, batch.targets)  # (B, T)
    d = pattern_losses(per_pos, batch)
    return np.array([d[k] for k in LOSS_KEYS])  # (4,)


@torch.no_grad()
def ablation_table(model: AndreaModel, batch: Batch) -> np.ndarray:
    """Δ (L, nh, 4): loss increase when one head's W_O rows are zeroed; last axis LOSS_KEYS."""
    L, nh = model.cfg.n_layer, model.cfg.n_head
    base = _losses(model, batch)
    return np.stack([np.stack([_losses(model, batch, [(l, h)]) - base for h in range(nh)])
                     for l in range(L)])  # (L, nh, 4)


@torch.no_grad()
def solo_values(model: AndreaModel, batch: Batch) -> np.ndarray:
    """V (L, nh, 4): loss with all heads of the layer ablated minus loss with all but h ablated."""
    L, nh = model.cfg.n_layer, model.cfg.n_head
    out = np.zeros((L, nh, len(LOSS_KEYS)))
    for l in range(L):
        none = _losses(model, batch, [(l, h) for h in range(nh)])
        for h in range(nh):
            out[l, h] = none - _losses(model, batch, [(l, j) for j in range(nh) if j != h])
    return out


@torch.no_grad()
def head_output_correlations(model: AndreaModel, batch: Batch) -> np.ndarray:
    """C (L, nh, nh): Pearson correlation between the heads' contributions to the residual
    stream (head_h . W_O[rows of h], flattened over batch, positions and features)."""
    inputs = []
    hooks = [b.attn.register_forward_hook(lambda m, a, o: inputs.append(a[0]))
             for b in model.blocks]
    try:
        model(batch.idx)
    finally:
        for hk in hooks:
            hk.remove()
    out = []
    for block, x in zip(model.blocks, inputs):
        att = block.attn
        q, k, v = project_c_attn(x, att.c_attn, att.n_head)  # 3 x (B, nh, T, hs)
        y = attention(q, k, v, causal=True, backend="reference")  # (B, nh, T, hs)
        contrib = head_contributions(y, att.W_O).flatten(1)  # (nh, B*T*C)
        c = torch.corrcoef(contrib).reshape(att.n_head, att.n_head)  # (nh, nh), also for nh = 1
        out.append(c.nan_to_num(0.0).numpy())
    return np.stack(out)  # (L, nh, nh)


@torch.no_grad()
def head_outputs(model: AndreaModel, idx: torch.Tensor) -> list[torch.Tensor]:
    """Every layer's head outputs for `idx`, before W_O: one (B, nh, T, hs) tensor per layer, the
    `y` that `output_projection(y, W_O)` turns into the layer's attention output (chapter "The
    output projection W_O", exercise: how many heads feed each output dimension of a trained W_O)."""
    inputs: list[torch.Tensor] = []
    hooks = [b.attn.register_forward_hook(lambda m, a, o: inputs.append(a[0]))
             for b in model.blocks]
    try:
        model(idx)
    finally:
        for hk in hooks:
            hk.remove()
    out = []
    for block, x in zip(model.blocks, inputs):
        att = block.attn
        q, k, v = project_c_attn(x, att.c_attn, att.n_head)  # 3 x (B, nh, T, hs)
        if att.b_attn is not None:
            b_q, b_k, b_v = att.b_attn.view(3, att.n_head, 1, att.head_dim)  # 3 x (nh, 1, hs)
            q, k, v = q + b_q, k + b_k, v + b_v
        out.append(attention(q, k, v, causal=True, backend="reference"))  # (B, nh, T, hs)
    return out


def max_other_correlation(corr: np.ndarray) -> np.ndarray:
    """(L, nh, nh) correlations -> (L, nh): each head's largest correlation with another head
    of its layer (0 for a layer with a single head)."""
    L, nh, _ = corr.shape
    if nh == 1:
        return np.zeros((L, 1))
    return (corr - 2 * np.eye(nh)).max(axis=-1)  # the diagonal (1) never wins


def head_grad_norms(model: AndreaModel) -> torch.Tensor:
    """G (L, nh): norm of the current .grad over each head's W_Q/W_K/W_V columns and W_O rows."""
    C, nh, hs = model.cfg.d_model, model.cfg.n_head, model.cfg.head_dim
    out = torch.zeros(model.cfg.n_layer, nh)
    for l, block in enumerate(model.blocks):
        g_attn, g_o = block.attn.c_attn.grad, block.attn.W_O.grad
        if g_attn is None or g_o is None:
            raise ValueError(f"head_grad_norms: layer {l}'s attention weights have no .grad; "
                             f"call loss.backward() first")
        gq = g_attn.view(C, 3, nh, hs)  # (C, q|k|v, nh, hs)
        go = g_o.view(nh, hs, C)  # (nh, hs, C): row block h reads head h
        sq = gq.pow(2).sum(dim=(0, 1, 3)) + go.pow(2).sum(dim=(1, 2))  # (nh,)
        out[l] = sq.sqrt()
    return out


@torch.no_grad()
def head_param_norms(model: AndreaModel) -> torch.Tensor:
    """(L, nh): norm of each head's own parameters, its W_Q/W_K/W_V columns and W_O rows (the
    parameters whose gradient `head_grad_norms` measures)."""
    C, nh, hs = model.cfg.d_model, model.cfg.n_head, model.cfg.head_dim
    out = torch.zeros(model.cfg.n_layer, nh)
    for l, block in enumerate(model.blocks):
        wq = block.attn.c_attn.view(C, 3, nh, hs)  # (C, q|k|v, nh, hs), as in head_grad_norms
        wo = block.attn.W_O.view(nh, hs, C)
        out[l] = (wq.pow(2).sum(dim=(0, 1, 3)) + wo.pow(2).sum(dim=(1, 2))).sqrt()
    return out
