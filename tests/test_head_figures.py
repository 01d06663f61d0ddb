"""Head shares, effective heads and the synthetic W_O (andrea_edu.projections), and the figures of
"Twelve vectors become one" and "The output projection W_O" that draw them."""
from __future__ import annotations

import matplotlib.pyplot as plt
import pytest
import torch
from matplotlib.figure import Figure

from andrea_edu.figures import twelve_vectors_become_one as hf
from andrea_edu.figures import output_projection as op
from andrea_edu import projections as P


def test_head_shares_sum_to_one_and_match_a_hand_count():
    contrib = torch.zeros(2, 1, 2, 3)  # (nh, B, T, C)
    contrib[0, 0, :, 0] = torch.tensor([3.0, 4.0])  # head 0: energy 25 in dim 0
    contrib[1, 0, :, 0] = torch.tensor([0.0, 5.0])  # head 1: energy 25 in dim 0
    contrib[0, 0, 0, 1] = 1.0  # dim 1: head 0 only
    contrib[1, 0, 1, 2] = 2.0  # dim 2: head 1 only
    s = P.head_shares(contrib)
    assert s.shape == (2, 3)
    torch.testing.assert_close(s, torch.tensor([[0.5, 1.0, 0.0], [0.5, 0.0, 1.0]],
                                               dtype=torch.float64))
    torch.testing.assert_close(P.effective_heads(s), torch.tensor([2.0, 1.0, 1.0],
                                                                   dtype=torch.float64))


def test_random_w_o_spreads_over_all_heads():
    proj = P.Projections.random(96, 8, seed=0)
    heads = torch.randn(2, 8, 16, 12, generator=torch.Generator().manual_seed(0))
    s = P.head_shares(P.head_contributions(heads, proj.W_O))
    torch.testing.assert_close(s.sum(0), torch.ones(96, dtype=torch.float64))
    assert bool((s > 0).all())
    eff = P.effective_heads(s)
    assert bool((eff <= 8 + 1e-9).all()) and eff.median() > 6


def test_head_shares_refuses_bad_input():
    with pytest.raises(ValueError, match="n_head, batch, seq_len, d_model"):
        P.head_shares(torch.zeros(2, 3, 4))
    with pytest.raises(ValueError, match="receives nothing"):
        P.head_shares(torch.zeros(2, 1, 1, 3))


def test_synthetic_w_o_has_owners_per_output_dimension():
    nh, C, owners = 6, 48, 2
    hs = C // nh
    W = P.synthetic_trained_w_o(C, nh, seed=3, owners=owners, leak=0.0)
    assert W.shape == (C, C)
    nonzero_blocks = (W.view(nh, hs, C).abs().sum(1) > 0).sum(0)  # (C,): heads feeding dim j
    assert bool((nonzero_blocks == owners).all())
    assert torch.equal(W, P.synthetic_trained_w_o(C, nh, seed=3, owners=owners, leak=0.0))
    assert not torch.equal(W, P.synthetic_trained_w_o(C, nh, seed=4, owners=owners, leak=0.0))
    with pytest.raises(ValueError, match="owners"):
        P.synthetic_trained_w_o(C, nh, owners=7)


def test_synthetic_w_o_concentrates_the_mix():
    heads = torch.randn(1, 12, 16, 8, generator=torch.Generator().manual_seed(0))
    eff_rand = P.effective_heads(P.head_shares(P.head_contributions(
        heads, P.Projections.random(96, 12).W_O))).median()
    eff_syn = P.effective_heads(P.head_shares(P.head_contributions(
        heads, P.synthetic_trained_w_o(96, 12)))).median()
    assert eff_syn < eff_rand / 2


@pytest.mark.parametrize("T, n_head, d_model", [(8, 12, 768), (5, 3, 12), (1, 4, 16), (6, 1, 8)])
def test_fig_trap_counts_correct_slots(T, n_head, d_model):
    # Slot (h, t) reads row h*T + t of the buffer, which is token r // n_head, head r % n_head:
    # right only when h*T + t == t*n_head + h.
    n_ok = sum(h * T + t == t * n_head + h for h in range(n_head) for t in range(T))
    fig = hf.fig_trap(T, n_head, d_model)
    try:
        assert f"the trap gets {n_ok} of {n_head * T} slots right" in fig._suptitle.get_text()
    finally:
        plt.close(fig)


def test_figures_render():
    heads = torch.randn(1, 4, 3, 4)
    W = P.Projections.random(16, 4).W_O
    c = P.head_contributions(heads, W)
    shares = {"random": P.head_shares(c), "synthetic": P.head_shares(
        P.head_contributions(heads, P.synthetic_trained_w_o(16, 4)))}
    figs = [hf.fig_features_by_head(4, 16), op.fig_w_o_blocks(4, 16),
            op.fig_head_mixing(shares, n_show=8),
            op.fig_zero_head(c, P.head_contributions(heads, P.zero_head(W, 1, 4)), 1)]
    try:
        for fig in figs:
            assert isinstance(fig, Figure)
            titles = [fig.get_suptitle()]
            titles += [ax.get_title() for ax in fig.axes]
            assert any(t.strip() for t in titles)
    finally:
        for fig in figs:
            plt.close(fig)


@pytest.mark.parametrize("fn", [hf.fig_features_by_head, op.fig_w_o_blocks])
def test_figures_refuse_an_invalid_n_head(fn):
    with pytest.raises(ValueError, match="n_head=5"):
        fn(5, 16)
