"""A BERT-style encoder on the book's own code: all-MiniLM-L6-v2 run through `reference_attention`
(chapter "Why heads specialize").

Every layer is BERT's post-LayerNorm block, written with the book's pieces:

    x = LN(word_emb[ids] + pos_emb[0..T-1] + type_emb[0])             # (B, T, C)
    q, k, v = project_fused(x, W_Q, W_K, W_V, nh) + biases            # 3 x (B, nh, T, hs)
    heads = attn(q, k, v, causal=False)     # reference_attention    # (B, nh, T, hs)
    x = LN(x + output_projection(heads, W_O) + b_O)                   # concat . W_O
    x = LN(x + GELU_erf(x W_in + b_in) W_out + b_out)

Weights are stored in the book's convention (X . W, [in, out]): BERT's nn.Linear keeps [out, in],
so each matrix is transposed once at load. The attention returns the heads' outputs, not their
probabilities; the probabilities are computed beside it from the same q and k (softmax(q k^T /
sqrt(hs))), and `probs @ v` equals the heads' output (checked in the tests).
Padding: none. The attention takes no mask, so sentences run one length at a time: `run_texts`
tokenizes without padding, sorts by length and batches only sentences of equal length, so no
position ever attends to a pad. Ablation zeros chosen heads' outputs before W_O.

    MiniLM.load() / MiniLM.random_init(seed)          the checkpoint / the same shape, BERT init
    model.forward(ids, ablate=(), keep_qkv=()) -> Forward(hidden, probs, heads, qkv)
    model.layers_from(x, start, ablate=()) -> Forward of layers start.. (x: hidden[start])
    model.run_texts(texts, ...) -> [Forward of one sentence (batch 1)] in the order given
    model.embed(texts, ablate=(), cache=None) -> (N, C) mean-pooled, L2-normalised
"""
from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from ...attention import reference_attention
from ...projections import output_projection, project_fused, split_heads
from . import weights as W


@contextlib.contextmanager
def one_thread():
    """Small matmuls on a shared CPU: torch's intra-op threads only add synchronisation (the
    probe run took twice as long on two threads beside other work)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with torch.no_grad():
            yield
    finally:
        torch.set_num_threads(before)


@dataclass(frozen=True)
class EncoderConfig:
    """all-MiniLM-L6-v2's shape: ANDREA-12M's attention (12 heads of 32, d_model 384)."""
    vocab_size: int = 30522
    d_model: int = 384
    n_head: int = 12
    n_layer: int = 6
    d_ff: int = 1536
    max_positions: int = W.MAX_POSITIONS
    type_vocab: int = 2
    eps: float = 1e-12

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_head

    @classmethod
    def from_hf(cls, cfg: dict) -> "EncoderConfig":
        if cfg.get("hidden_act", "gelu") != "gelu" or cfg.get("position_embedding_type",
                                                               "absolute") != "absolute":
            raise ValueError("this encoder has exact (erf) GELU and absolute positions only")
        return cls(cfg["vocab_size"], cfg["hidden_size"], cfg["num_attention_heads"],
                   cfg["num_hidden_layers"], cfg["intermediate_size"],
                   cfg["max_position_embeddings"], cfg["type_vocab_size"],
                   float(cfg["layer_norm_eps"]))


@dataclass
class Forward:
    """One forward pass: hidden[0] the embeddings, hidden[i] after layer i (each (B, T, C));
    probs[i] (B, nh, T, T) and heads[i] (B, nh, T, hs) of layer i; qkv[i] = (q, k, v) for the
    layers asked for in keep_qkv."""
    hidden: list
    probs: list
    heads: list
    qkv: dict = field(default_factory=dict)


def _layer_names(i: int) -> dict:
    p = f"encoder.layer.{i}."
    return {"W_Q": p + "attention.self.query", "W_K": p + "attention.self.key",
            "W_V": p + "attention.self.value", "W_O": p + "attention.output.dense",
            "ln_1": p + "attention.output.LayerNorm", "W_in": p + "intermediate.dense",
            "W_out": p + "output.dense", "ln_2": p + "output.LayerNorm"}


class MiniLM:
    """The encoder's weights (book convention) and its forward pass."""

    def __init__(self, state: dict, config: EncoderConfig, label: str):
        self.cfg, self.label = config, label
        g = lambda k: state[k].float()  # noqa: E731
        self.wte = g("embeddings.word_embeddings.weight")        # (V, C)
        self.wpe = g("embeddings.position_embeddings.weight")    # (P, C)
        self.wtt = g("embeddings.token_type_embeddings.weight")  # (2, C)
        self.ln_e = (g("embeddings.LayerNorm.weight"), g("embeddings.LayerNorm.bias"))
        self.layers = []
        for i in range(config.n_layer):
            n = _layer_names(i)
            lay = {}
            for key in ("W_Q", "W_K", "W_V", "W_O", "W_in", "W_out"):
                lay[key] = g(n[key] + ".weight").t().contiguous()   # [in, out]: X . W
                lay["b" + key[1:]] = g(n[key] + ".bias")
            for key in ("ln_1", "ln_2"):
                lay[key] = (g(n[key] + ".weight"), g(n[key] + ".bias"))
            self.layers.append(lay)
        self._tok = None

    @classmethod
    def load(cls) -> "MiniLM":
        """The checked checkpoint (WeightsError, one line, if it is missing or not official)."""
        return cls(W.load_state(), EncoderConfig.from_hf(W.hf_config()), "all-MiniLM-L6-v2")

    @classmethod
    def random_init(cls, seed: int = 0, config: EncoderConfig | None = None) -> "MiniLM":
        """The same shape with BERT's initialisation (normal, std 0.02; LayerNorm 1, 0): the
        baseline for what an untrained model of this shape already does."""
        c = config or EncoderConfig()
        gen = torch.Generator().manual_seed(seed)
        rnd = lambda *s: torch.randn(*s, generator=gen) * 0.02  # noqa: E731
        st = {"embeddings.word_embeddings.weight": rnd(c.vocab_size, c.d_model),
              "embeddings.position_embeddings.weight": rnd(c.max_positions, c.d_model),
              "embeddings.token_type_embeddings.weight": rnd(c.type_vocab, c.d_model),
              "embeddings.LayerNorm.weight": torch.ones(c.d_model),
              "embeddings.LayerNorm.bias": torch.zeros(c.d_model)}
        shapes = {"W_Q": (c.d_model, c.d_model), "W_K": (c.d_model, c.d_model),
                  "W_V": (c.d_model, c.d_model), "W_O": (c.d_model, c.d_model),
                  "W_in": (c.d_ff, c.d_model), "W_out": (c.d_model, c.d_ff)}
        for i in range(c.n_layer):
            n = _layer_names(i)
            for key, (o, inp) in shapes.items():
                st[n[key] + ".weight"], st[n[key] + ".bias"] = rnd(o, inp), torch.zeros(o)
            for key in ("ln_1", "ln_2"):
                st[n[key] + ".weight"], st[n[key] + ".bias"] = torch.ones(c.d_model), \
                    torch.zeros(c.d_model)
        return cls(st, c, f"random init (seed {seed})")

    @property
    def tokenizer(self):
        if self._tok is None:
            self._tok = W.load_tokenizer()
        return self._tok

    def _ln(self, x, wb):
        return F.layer_norm(x, (self.cfg.d_model,), wb[0], wb[1], self.cfg.eps)

    def forward(self, ids: torch.Tensor, ablate=(), keep_qkv=(), attn=reference_attention
                ) -> Forward:
        """ids: (B, T) token ids, no padding (every row a real sentence of length T).
        ablate: (layer, head) pairs whose output is zeroed before W_O. attn: the attention every
        layer runs, a callable (q, k, v, causal) -> heads (reference_attention by default)."""
        c = self.cfg
        if ids.dim() != 2 or not 1 <= ids.shape[1] <= c.max_positions:
            raise ValueError(f"ids must be (batch, seq_len) with 1 <= seq_len <= "
                             f"{c.max_positions}, got shape {tuple(ids.shape)}")
        T = ids.shape[1]
        x = self.wte[ids] + self.wpe[:T] + self.wtt[0]              # (B, T, C)
        return self.layers_from(self._ln(x, self.ln_e), 0, ablate, keep_qkv, attn)

    def layers_from(self, x: torch.Tensor, start: int, ablate=(), keep_qkv=(),
                    attn=reference_attention) -> Forward:
        """Layers start..L-1 on x (B, T, C), the input of layer `start` (its hidden[start])."""
        c = self.cfg
        drop: dict[int, list[int]] = {}
        for lh in ablate:
            drop.setdefault(int(lh[0]), []).append(int(lh[1]))
        out = Forward([x], [], [])
        for i in range(start, c.n_layer):
            L = self.layers[i]
            q, k, v = project_fused(x, L["W_Q"], L["W_K"], L["W_V"], c.n_head)  # (B, nh, T, hs)
            q, k, v = (t + split_heads(b.view(1, 1, -1), c.n_head)           # bias per head
                       for t, b in ((q, L["b_Q"]), (k, L["b_K"]), (v, L["b_V"])))
            heads = attn(q, k, v, causal=False)                             # (B, nh, T, hs)
            probs = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(c.head_dim), dim=-1)
            if i in drop:
                heads = heads.clone()
                heads[:, drop[i]] = 0                                        # before W_O
            if i in keep_qkv:
                out.qkv[i] = (q, k, v)
            x = self._ln(x + output_projection(heads, L["W_O"]) + L["b_O"], L["ln_1"])
            ff = F.gelu(x @ L["W_in"] + L["b_in"]) @ L["W_out"] + L["b_out"]  # exact (erf) GELU
            x = self._ln(x + ff, L["ln_2"])
            out.hidden.append(x)
            out.probs.append(probs)
            out.heads.append(heads)
        return out

    def ids(self, text: str) -> list[int]:
        ids = self.tokenizer.encode(text).ids
        if len(ids) > self.cfg.max_positions:
            raise ValueError(f"text has {len(ids)} tokens; at most {self.cfg.max_positions}")
        return ids

    def tokens(self, text: str) -> list[str]:
        return self.tokenizer.encode(text).tokens

    def run_texts(self, texts, ablate=(), keep_qkv=()) -> list[Forward]:
        """One Forward (batch 1) per text, in the order given; computed in batches of equal
        length, shortest first, on one torch thread (no padding, so no mask is needed)."""
        res: list = [None] * len(texts)
        with one_thread():
            for idx, ids in self.batches(texts):
                f = self.forward(ids, ablate, keep_qkv)
                for j, n in enumerate(idx):
                    res[n] = Forward([h[j:j + 1] for h in f.hidden],
                                     [p[j:j + 1] for p in f.probs],
                                     [h[j:j + 1] for h in f.heads],
                                     {i: tuple(t[j:j + 1] for t in qkv)
                                      for i, qkv in f.qkv.items()})
        return res

    def batches(self, texts) -> list[tuple[list[int], torch.Tensor]]:
        """(indices into texts, ids (B, T)) per length, shortest first: the equal-length batches
        run_texts and embed run."""
        ids = [self.ids(t) for t in texts]
        by_len: dict[int, list[int]] = {}
        for n, row in enumerate(ids):
            by_len.setdefault(len(row), []).append(n)
        return [(by_len[T], torch.tensor([ids[n] for n in by_len[T]])) for T in sorted(by_len)]

    def embed(self, texts, ablate=(), cache: dict | None = None) -> torch.Tensor:
        """all-MiniLM-L6-v2's sentence embedding: the last layer's tokens, mean-pooled,
        L2-normalised, (N, C). `cache` (a dict, filled on first use) keeps every batch's hidden
        states, so that an ablation in layer l re-runs layers l.. only."""
        start = min((int(lh[0]) for lh in ablate), default=0)
        e = torch.empty(len(texts), self.cfg.d_model)
        with one_thread():
            for j, (idx, ids) in enumerate(self.batches(texts)):
                if cache is not None and j in cache:
                    f = self.layers_from(cache[j][start], start, ablate)
                else:
                    f = self.forward(ids, ablate)
                    if cache is not None and not ablate:
                        cache[j] = f.hidden
                e[idx] = f.hidden[-1].mean(dim=1)                            # (B, C)
        return F.normalize(e, dim=-1)
