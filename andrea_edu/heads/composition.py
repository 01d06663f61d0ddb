"""Heads composing across layers: Q-, K- and V-composition scores, against random matrices.

Introduced in the chapter "Heads on real text" (section "Circuits across layers"). The definitions
are those of Elhage et al. (2021), "A Mathematical Framework for Transformer Circuits", written in
this book's convention (row vectors, weights stored [in, out], X . W; see `heads.circuits`):

    OV^h = W_V^h W_O[h]   (C, C): a head reads x and writes x . OV^h into the residual stream
    QK^h = W_Q^h W_K^h^T  (C, C): a head's score between query x_q and key x_k is x_q QK^h x_k^T

A layer-1 head h2 reads the residual stream, which holds what a layer-0 head h1 wrote:

    Q-composition  ||OV^h1 QK^h2||_F   / (||OV^h1||_F ||QK^h2||_F)   h1's output moves h2's queries
    K-composition  ||OV^h1 QK^h2^T||_F / (||OV^h1||_F ||QK^h2||_F)   ... h2's keys
    V-composition  ||OV^h1 OV^h2||_F   / (||OV^h1||_F ||OV^h2||_F)   ... what h2 moves

(Elhage et al.'s ||W_QK^T W_OV||, ||W_QK W_OV||, ||W_OV^h2 W_OV^h1|| in their column-vector
convention: the same numbers, since a Frobenius norm does not change under transposition.)
Each score lies in [0, 1]; it says how much of what h1 writes lies where h2 reads.

LayerNorm. Each layer reads ln_1(x) = gamma * (x - mean(x)) / std(x) + beta. We fold gamma into the
weights that read it (diag(gamma_0) W_V^h1 for the writer, diag(gamma_1) W_Q^h2, W_K^h2, W_V^h2 for
the reader), ignore the centering (a projection that removes one direction of 128), the division
by std (one number per position: the scores are ratios of norms, so it cancels) and beta (a
constant input, not a path from h1). Layer 0's MLP, which also reads h1's output before layer 1
does, is left out: these scores are the direct path h1 -> h2 only. Path ablation (the laboratory's
`andrea_lab.path_ablation`, committed as book/data/realtext_paths.json) measures the whole effect,
MLP included.

Baseline. The same score between random matrices of the same shapes (W_Q, W_K, W_V of (C, hs),
W_O of (hs, C), entries i.i.d. normal: the scores do not depend on their scale), over many draws:
a score counts as composition only when it stands well above that baseline's mean and spread.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from ..model import AndreaModel
from .circuits import _split

KINDS = ("Q", "K", "V")


def folded(model: AndreaModel, layer: int, head: int
           ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(W_Q, W_K, W_V, W_O) of one head with its layer's ln_1 weight folded into W_Q, W_K, W_V
    (diag(gamma) W), float64: [C, hs] x 3 and [hs, C]."""
    W_Q, W_K, W_V, W_O = (w.double() for w in _split(model, layer, head))
    g = model.blocks[layer].ln_1.weight.detach().double()[:, None]  # (C, 1)
    return g * W_Q, g * W_K, g * W_V, W_O


def _scores(WQ2, WK2, WV2, WO2, WV1, WO1) -> tuple[float, float, float]:
    """Q, K, V composition of reader (WQ2, WK2, WV2, WO2) with writer (WV1, WO1)."""
    OV1 = WV1 @ WO1  # (C, C)
    QK2 = WQ2 @ WK2.T  # (C, C)
    OV2 = WV2 @ WO2  # (C, C)
    n1, nqk, nov = (torch.linalg.matrix_norm(M) for M in (OV1, QK2, OV2))
    q = torch.linalg.matrix_norm(OV1 @ QK2) / (n1 * nqk)
    k = torch.linalg.matrix_norm(OV1 @ QK2.T) / (n1 * nqk)
    v = torch.linalg.matrix_norm(OV1 @ OV2) / (n1 * nov)
    return float(q), float(k), float(v)


def composition(model: AndreaModel, src_layer: int = 0, dst_layer: int = 1) -> np.ndarray:
    """(3, nh, nh): [kind, writer head of src_layer, reader head of dst_layer], kinds Q, K, V."""
    L = model.cfg.n_layer
    if not (isinstance(src_layer, int) and isinstance(dst_layer, int)
            and 0 <= src_layer < dst_layer < L):
        raise ValueError(f"src_layer={src_layer!r}, dst_layer={dst_layer!r} must be ints with "
                         f"0 <= src_layer < dst_layer <= {L - 1} (n_layer={L})")
    nh = model.cfg.n_head
    out = np.zeros((3, nh, nh))
    for h1 in range(nh):
        _, _, WV1, WO1 = folded(model, src_layer, h1)
        for h2 in range(nh):
            WQ2, WK2, WV2, WO2 = folded(model, dst_layer, h2)
            out[:, h1, h2] = _scores(WQ2, WK2, WV2, WO2, WV1, WO1)
    return out


@dataclass(frozen=True)
class Baseline:
    """The scores of random matrices of the model's shapes: mean, spread and a high quantile."""

    mean: np.ndarray  # (3,) Q, K, V
    std: np.ndarray  # (3,)
    q99: np.ndarray  # (3,) the 99th percentile over draws
    draws: int
    shapes: str


def random_baseline(d_model: int, head_dim: int, draws: int = 400, seed: int = 0) -> Baseline:
    """Composition scores of i.i.d. normal W_Q, W_K, W_V (d_model, head_dim) and W_O (head_dim,
    d_model), writer and reader drawn independently, `draws` times."""
    for name, v in (("d_model", d_model), ("head_dim", head_dim), ("draws", draws)):
        if not (isinstance(v, int) and v >= 2):
            raise ValueError(f"{name}={v!r} must be an int >= 2")
    if head_dim > d_model:
        raise ValueError(f"head_dim={head_dim} must be <= d_model={d_model}")
    g = torch.Generator().manual_seed(seed)
    s = np.zeros((draws, 3))
    for i in range(draws):
        W = [torch.randn(d_model, head_dim, generator=g, dtype=torch.float64) for _ in range(4)]
        WO = [torch.randn(head_dim, d_model, generator=g, dtype=torch.float64) for _ in range(2)]
        s[i] = _scores(W[0], W[1], W[2], WO[0], W[3], WO[1])
    return Baseline(mean=s.mean(0), std=s.std(0, ddof=1), q99=np.quantile(s, 0.99, axis=0),
                    draws=draws, shapes=f"W_Q, W_K, W_V ({d_model}, {head_dim}), "
                                        f"W_O ({head_dim}, {d_model})")


def zscores(scores: np.ndarray, base: Baseline) -> np.ndarray:
    """(scores - baseline mean) / baseline spread, per kind: scores (3, ...)."""
    shape = (3,) + (1,) * (np.ndim(scores) - 1)
    return (np.asarray(scores) - base.mean.reshape(shape)) / base.std.reshape(shape)


def top_pairs(scores: np.ndarray, base: Baseline, n: int = 5) -> list[dict]:
    """The n (kind, writer, reader) entries furthest above their baseline, in baseline spreads."""
    z = zscores(scores, base)
    order = np.argsort(z, axis=None)[::-1][:n]
    out = []
    for flat in order:
        k, h1, h2 = (int(i) for i in np.unravel_index(flat, z.shape))
        out.append({"kind": KINDS[k], "writer": h1, "reader": h2, "score": float(scores[k, h1, h2]),
                    "z": float(z[k, h1, h2]), "times_baseline": float(scores[k, h1, h2] / base.mean[k])})
    return out


def strongest_writer(scores: np.ndarray, base: Baseline) -> list[tuple[str, int, float]]:
    """For each reader head (dst layer), the (kind, writer head, z) of its largest z-score."""
    z = zscores(scores, base)  # (3, nh, nh)
    out = []
    for h2 in range(z.shape[2]):
        k, h1 = np.unravel_index(np.argmax(z[:, :, h2]), z.shape[:2])
        out.append((KINDS[int(k)], int(h1), float(z[k, h1, h2])))
    return out
