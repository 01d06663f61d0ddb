"""heads.circuits: QK and OV per head agree with the model's own computation, and read
constructed heads (a previous-token head, a copier) correctly."""
from __future__ import annotations

import math
from typing import Any, cast

import pytest
import torch

from andrea_edu.attention import reference_attention
from andrea_edu.config import AndreaConfig
from andrea_edu.heads import circuits as K
from andrea_edu.model import AndreaModel
from andrea_edu.projections import head_contributions, project_c_attn


def _model(C=32, nh=4, L=2, V=20, T=12, seed=0):
    return AndreaModel(AndreaConfig(d_model=C, n_head=nh, n_layer=L, vocab_size=V, block_size=T),
                       seed=seed)


def test_qk_gives_the_models_own_scores():
    m = _model()
    x = torch.randn(2, 12, 32, generator=torch.Generator().manual_seed(1))
    q, k, _ = project_c_attn(m.blocks[1].ln_1(x), m.blocks[1].attn.c_attn, 4)  # 3 x (B, nh, T, hs)
    for h in range(4):
        ref = q[:, h] @ k[:, h].transpose(1, 2) / math.sqrt(8)  # (B, T, T)
        torch.testing.assert_close(K.scores_via_qk(m, 1, h, x), ref, rtol=1e-4, atol=1e-5)
    assert K.qk(m, 0, 0).shape == (32, 32) and torch.linalg.matrix_rank(K.qk(m, 0, 0)) <= 8


def test_ov_gives_the_heads_term_of_the_output():
    m = _model()
    x = torch.randn(2, 12, 32, generator=torch.Generator().manual_seed(2))
    X = m.blocks[0].ln_1(x)
    q, k, v = project_c_attn(X, m.blocks[0].attn.c_attn, 4)
    y = reference_attention(q, k, v, causal=True)  # (B, nh, T, hs)
    parts = head_contributions(y, m.blocks[0].attn.W_O)  # (nh, B, T, C)
    A = K.causal_softmax(q @ k.transpose(-2, -1) / math.sqrt(8))  # (B, nh, T, T)
    for h in range(4):
        torch.testing.assert_close(A[:, h] @ X @ K.ov(m, 0, h), parts[h].detach(),
                                   rtol=1e-4, atol=1e-5)


def test_bad_layer_or_head_is_refused():
    m = _model()
    with pytest.raises(ValueError, match="layer"):
        K.qk(m, 2, 0)
    with pytest.raises(ValueError, match="head"):
        K.ov(m, 0, 4)


def _previous_token_model(T=10):
    """One layer, one head of 32: wpe[t] one-hot on coordinate t, W_Q reads coordinate t into
    slot t, W_K reads coordinate s into slot s+1: q_t . k_s is large only for s = t-1."""
    C = 32
    m = _model(C=C, nh=1, L=1, V=5, T=T)
    with torch.no_grad():
        m.wte.zero_()
        m.wpe.zero_()
        m.wpe[torch.arange(T), torch.arange(T)] = 1.0
        W = torch.zeros(C, 3 * C)
        W[torch.arange(T), torch.arange(T)] = 8.0  # W_Q
        W[torch.arange(T - 1), C + torch.arange(1, T)] = 8.0  # W_K: key s -> slot s+1
        m.blocks[0].attn.c_attn.copy_(W)
    return m


def test_constructed_previous_token_head_is_read_as_one():
    P = K.positional_pattern(_previous_token_model(), 0, 0)
    assert K.previous_token_share(P) == 1.0 and K.mean_previous_weight(P) > 0.9
    prof = K.offset_profile(P, depth=3, from_row=2)
    assert prof[1] > 0.9 and prof[0] < 0.05 and prof[2] < 0.05
    assert K.positional_table(_previous_token_model(), T=10)[0, 0, 1] > 0.9
    P_random = K.positional_pattern(_model(T=12, seed=3), 0, 0)
    assert K.previous_token_share(P_random) < 0.5 and K.mean_previous_weight(P_random) < 0.5
    assert torch.allclose(P_random.sum(-1), torch.ones(12)) and (P_random.triu(1) == 0).all()


def _copier(sign=1.0, V=16):
    C = 32
    m = _model(C=C, nh=1, L=1, V=V, T=4)
    with torch.no_grad():
        m.wte.zero_()
        m.wte[torch.arange(V), torch.arange(V)] = 3.0
        m.wpe.zero_()
        W = torch.zeros(C, 3 * C)
        W[:, 2 * C:] = torch.eye(C)  # W_V = I
        m.blocks[0].attn.c_attn.copy_(W)
        m.blocks[0].attn.W_O.copy_(sign * torch.eye(C))  # OV = +-I
    return m


def test_constructed_copier_and_suppressor():
    M = K.token_ov(_copier(+1.0), 0, 0)
    assert K.copy_rates(M) == 1.0 and K.eigen_copying(M) > 0.9
    M = K.token_ov(_copier(-1.0), 0, 0)
    assert K.copy_rates(M) == 0.0 and K.eigen_copying(M) < -0.9
    rand = K.ov_table(_model(V=20, seed=5))  # (L, nh, 2)
    assert rand.shape == (2, 4, 2) and rand[..., 0].max() <= 0.3  # chance is 1/20


def test_token_ov_through_ln_f():
    """ln_f=True centres what the head writes and multiplies it by ln_f's weight: with the weight
    at 1 and a copier whose output has mean 0 per row nothing moves; a weight that silences half
    the coordinates silences those tokens' logits; anything but a bool is one line."""
    m = _copier(+1.0)
    with torch.no_grad():
        m.blocks[0].ln_1.bias.fill_(0.5)  # what the head reads, and so writes, is not centred
    M, Mf = K.token_ov(m, 0, 0), K.token_ov(m, 0, 0, ln_f=True)
    E = m.blocks[0].ln_1(m.wte.detach())
    want = (E - E.mean(-1, keepdim=True)) @ m.wte.detach().T  # OV = I here
    torch.testing.assert_close(Mf, want)
    assert not torch.allclose(M, Mf)  # the centring removed ln_1's bias
    with torch.no_grad():
        m.ln_f.weight[8:] = 0.0
    Mz = K.token_ov(m, 0, 0, ln_f=True)
    assert torch.all(Mz[:, 8:] == 0) and K.copy_rates(Mz, tokens=range(8)) == 1.0
    assert K.ov_table(m, ln_f=True).shape == (1, 1, 2)
    for bad in ("yes", 1, None):
        with pytest.raises(ValueError) as e:
            K.ov_table(m, ln_f=cast(Any, bad))  # what an edited cell could pass
        assert "\n" not in str(e.value) and "True or False" in str(e.value)


def test_tables_cover_every_head_of_the_toy_laboratory_shape():
    m = _model(C=64, nh=4, L=2, V=42, T=48)  # the toy laboratory's model shape
    assert K.positional_table(m, T=16).shape == (2, 4, 3)
    w = torch.arange(42.0)  # token weights change the average, not the shape
    assert K.positional_table(m, T=16, token_weights=w).shape == (2, 4, 3)
    assert K.ov_table(m, tokens=range(10), k=3).shape == (2, 4, 2)


def test_positional_inputs_average_over_tokens_exactly():
    m = _model(C=32, nh=4, L=1, V=7, T=5)
    w = torch.tensor([1.0, 0, 0, 3, 0, 0, 0])
    X = K.positional_inputs(m, 0, 5, token_weights=w, chunk=2)  # chunks of the vocabulary
    ref = (m.blocks[0].ln_1(m.wte[0] + m.wpe[:5]) + 3 * m.blocks[0].ln_1(m.wte[3] + m.wpe[:5])) / 4
    torch.testing.assert_close(X, ref.detach())
