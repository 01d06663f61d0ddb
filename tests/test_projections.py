"""Tests of andrea_edu.projections: three ways to project, split/merge, the trap, W_O.

Each identity is checked against an independent statement of what it means (index arithmetic
or a per-head loop written here), not only against another function of the same module.
"""
from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from andrea_edu.projections import (
    Projections,
    c_attn_to_fused,
    check_head,
    concat_heads,
    fused_to_c_attn,
    fused_to_per_head,
    head_contributions,
    merge_heads,
    output_projection,
    per_head_to_fused,
    project_c_attn,
    project_fused,
    project_per_head,
    reshape_without_transpose,
    split_heads,
    zero_head,
    zero_head_columns,
)

RTOL = 1e-5  # fp32: the three ways sum the same products in different orders


def rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    """Norm-wise relative error ||a - b|| / ||b|| (0 when both are 0)."""
    den = b.double().norm().item()
    num = (a.double() - b.double()).norm().item()
    return num if den == 0 else num / den


# Shapes: awkward head_dims (1, 3, 17...) and seq_len not a multiple of anything.
shapes = st.fixed_dictionaries({
    "B": st.integers(1, 3),
    "T": st.integers(1, 9),
    "n_head": st.integers(1, 8),
    "head_dim": st.integers(1, 17),
    "seed": st.integers(0, 2**16),
})
hyp = settings(max_examples=40, deadline=None)


def _setup(s):
    C = s["n_head"] * s["head_dim"]
    g = torch.Generator().manual_seed(s["seed"])
    X = torch.randn(s["B"], s["T"], C, generator=g)  # (B, T, C)
    P = Projections.random(C, s["n_head"], seed=s["seed"])
    return X, P


# ------------------------------------------------------------------ three ways agree
@hyp
@given(shapes)
def test_per_head_fused_and_c_attn_agree(s):
    X, P = _setup(s)
    B, T, nh, hs = s["B"], s["T"], s["n_head"], s["head_dim"]
    per_head = project_per_head(X, *P.per_head())
    fused = project_fused(X, P.W_Q, P.W_K, P.W_V, nh)
    c_attn = project_c_attn(X, P.c_attn, nh)
    for a, b, c in zip(per_head, fused, c_attn):
        assert a.shape == b.shape == c.shape == (B, nh, T, hs)
        assert rel_err(a, b) <= RTOL
        assert rel_err(c, b) <= RTOL


@hyp
@given(shapes)
def test_head_h_is_x_times_column_block_h(s):
    # Independent of split_heads: the source's Q_h = X . W_Q^h with W_Q^h = W_Q[:, h*hs:(h+1)*hs].
    X, P = _setup(s)
    nh, hs = s["n_head"], s["head_dim"]
    q, k, v = project_fused(X, P.W_Q, P.W_K, P.W_V, nh)
    for out, W in ((q, P.W_Q), (k, P.W_K), (v, P.W_V)):
        for h in range(nh):
            assert rel_err(out[:, h], X @ W[:, h * hs : (h + 1) * hs]) <= RTOL


def test_three_ways_agree_at_andrea_120m_shapes():
    X = torch.randn(2, 16, 768, generator=torch.Generator().manual_seed(1))  # (B, T, C)
    P = Projections.random(768, 12, seed=3)
    per_head = project_per_head(X, *P.per_head())
    fused = project_fused(X, P.W_Q, P.W_K, P.W_V, 12)
    c_attn = project_c_attn(X, P.c_attn, 12)
    for a, b, c in zip(per_head, fused, c_attn):
        assert a.shape == (2, 12, 16, 64)
        assert rel_err(a, b) <= RTOL and rel_err(c, b) <= RTOL


# ------------------------------------------------------------------ weight layouts
@hyp
@given(shapes)
def test_weight_round_trips_are_exact(s):
    _, P = _setup(s)
    nh, hs = s["n_head"], s["head_dim"]
    C = nh * hs
    Wh = fused_to_per_head(P.W_Q, nh)
    assert Wh.shape == (nh, C, hs)
    for h in range(nh):  # W_Q^h is column block h of W_Q
        assert torch.equal(Wh[h], P.W_Q[:, h * hs : (h + 1) * hs])
    assert torch.equal(per_head_to_fused(Wh), P.W_Q)
    assert torch.equal(fused_to_per_head(per_head_to_fused(Wh), nh), Wh)
    c_attn = fused_to_c_attn(P.W_Q, P.W_K, P.W_V)
    assert c_attn.shape == (C, 3 * C)
    for got, want in zip(c_attn_to_fused(c_attn), (P.W_Q, P.W_K, P.W_V)):
        assert torch.equal(got, want)
    assert torch.equal(fused_to_c_attn(*c_attn_to_fused(c_attn)), c_attn)
    # per head -> fused -> c_attn -> fused -> per head, all three projections
    back = [fused_to_per_head(W, nh) for W in c_attn_to_fused(
        fused_to_c_attn(*(per_head_to_fused(w) for w in P.per_head())))]
    for got, want in zip(back, P.per_head()):
        assert torch.equal(got, want)


def test_layouts_accept_non_contiguous_weights():
    # nn.Linear stores [out, in]; its .weight.T is a non-contiguous [in, out] view.
    C, nh = 12, 3
    W = torch.randn(C, C)
    Wt = W.t().contiguous().t()  # same values as W, column-major strides
    assert not Wt.is_contiguous()
    assert torch.equal(fused_to_per_head(Wt, nh), fused_to_per_head(W, nh))
    heads = torch.randn(2, nh, 5, C // nh)
    assert torch.equal(head_contributions(heads, Wt), head_contributions(heads, W))


def test_c_attn_to_fused_gives_views():
    c_attn = torch.randn(8, 24)
    W_Q, W_K, W_V = c_attn_to_fused(c_attn)
    assert W_Q.data_ptr() == c_attn.data_ptr()
    assert W_K.data_ptr() == c_attn[:, 8:].data_ptr()


# ------------------------------------------------------------------ split, merge, concat
@hyp
@given(shapes)
def test_split_and_merge_are_exact_inverses(s):
    X, _ = _setup(s)
    B, T, nh, hs = s["B"], s["T"], s["n_head"], s["head_dim"]
    y = split_heads(X, nh)
    assert y.shape == (B, nh, T, hs)
    assert torch.equal(merge_heads(y), X)
    z = torch.randn(B, nh, T, hs)
    assert torch.equal(split_heads(merge_heads(z), nh), z)


@hyp
@given(shapes)
def test_split_heads_index_arithmetic(s):
    # y[b, h, t, d] == x[b, t, h*hs + d], checked element by element.
    B, T, nh, hs = s["B"], s["T"], s["n_head"], s["head_dim"]
    x = torch.arange(B * T * nh * hs, dtype=torch.float32).view(B, T, nh * hs)
    y = split_heads(x, nh)
    b = torch.arange(B).view(B, 1, 1, 1)
    h = torch.arange(nh).view(1, nh, 1, 1)
    t = torch.arange(T).view(1, 1, T, 1)
    d = torch.arange(hs).view(1, 1, 1, hs)
    assert torch.equal(y, x[b, t, h * hs + d])


def test_split_heads_is_a_view_without_copy():
    x = torch.randn(2, 5, 12)
    y = split_heads(x, 3)
    assert y.data_ptr() == x.data_ptr()
    assert y.stride() == (60, 4, 12, 1)  # (B, nh, T, hs): T-stride is C, not hs
    assert not y.is_contiguous()


@hyp
@given(shapes)
def test_concat_heads_equals_merge_heads(s):
    B, T, nh, hs = s["B"], s["T"], s["n_head"], s["head_dim"]
    y = torch.randn(B, nh, T, hs, generator=torch.Generator().manual_seed(s["seed"]))
    heads = [y[:, h] for h in range(nh)]  # nh x (B, T, hs)
    cat = concat_heads(heads)
    assert cat.shape == (B, T, nh * hs)
    assert torch.equal(cat, merge_heads(y))
    for h in range(nh):  # "the chunk for head h" is exactly head h
        assert torch.equal(cat[..., h * hs : (h + 1) * hs], heads[h])


# ------------------------------------------------------------------ the trap
@hyp
@given(shapes)
def test_reshape_without_transpose_gives_wrong_heads(s):
    B, T, nh, hs = s["B"], s["T"], s["n_head"], s["head_dim"]
    C = nh * hs
    x = torch.arange(B * T * C, dtype=torch.float32).view(B, T, C)  # every value distinct
    wrong = reshape_without_transpose(x, nh)
    right = split_heads(x, nh)
    assert wrong.shape == right.shape == (B, nh, T, hs)
    if T == 1 or nh == 1:
        # The trap hides in exactly these cases, which is why a test with T=1 misses it.
        assert torch.equal(wrong, right)
    else:
        assert not torch.equal(wrong, right)
        # What "head" h at "token" t really holds: the flat slice (h*T + t)*hs ... + hs of x[b],
        # i.e. token (h*T + t)*hs // C, features from (h*T + t)*hs % C.
        for h in range(nh):
            for t in range(T):
                flat = (h * T + t) * hs
                tok, feat = divmod(flat, C)
                assert torch.equal(wrong[:, h, t], x[:, tok, feat : feat + hs])


def test_the_trap_mixes_tokens_at_andrea_120m_shapes():
    B, T, nh, hs = 1, 12, 12, 64
    x = torch.arange(T).view(1, T, 1).expand(B, T, nh * hs).float()  # value = token index
    wrong = reshape_without_transpose(x, nh)
    right = split_heads(x, nh)
    # Right: head h at position t holds token t. Wrong: head 0's 12 "positions" come from
    # tokens 0 and 1 only (12 x 64 = 768 values = one token's worth, read as 12 rows).
    assert torch.equal(right[0, :, :, 0], torch.arange(T).float().expand(nh, T))
    assert set(wrong[0, 0].unique().tolist()) == {0.0}
    assert not torch.equal(wrong, right)


# ------------------------------------------------------------------ W_O
@hyp
@given(shapes)
def test_concat_times_w_o_is_a_sum_over_heads(s):
    B, T, nh, hs = s["B"], s["T"], s["n_head"], s["head_dim"]
    _, P = _setup(s)
    heads = torch.randn(B, nh, T, hs, generator=torch.Generator().manual_seed(s["seed"] + 1))
    out = output_projection(heads, P.W_O)
    assert out.shape == (B, T, nh * hs)
    assert rel_err(out, concat_heads([heads[:, h] for h in range(nh)]) @ P.W_O) <= RTOL
    contrib = head_contributions(heads, P.W_O)
    assert contrib.shape == (nh, B, T, nh * hs)
    by_loop = sum(heads[:, h] @ P.W_O[h * hs : (h + 1) * hs] for h in range(nh))
    assert rel_err(contrib.sum(0), out) <= RTOL
    assert rel_err(by_loop, out) <= RTOL
    for h in range(nh):
        assert rel_err(contrib[h], heads[:, h] @ P.W_O[h * hs : (h + 1) * hs]) <= RTOL


@hyp
@given(shapes, st.data())
def test_zero_head_removes_exactly_that_heads_contribution(s, data):
    B, T, nh, hs = s["B"], s["T"], s["n_head"], s["head_dim"]
    _, P = _setup(s)
    k = data.draw(st.integers(0, nh - 1), label="head")
    heads = torch.randn(B, nh, T, hs, generator=torch.Generator().manual_seed(s["seed"] + 2))
    W0 = zero_head(P.W_O, k, nh)
    assert torch.equal(W0[k * hs : (k + 1) * hs], torch.zeros(hs, nh * hs))
    keep = torch.ones(nh * hs, dtype=torch.bool)
    keep[k * hs : (k + 1) * hs] = False
    assert torch.equal(W0[keep], P.W_O[keep])  # every other row untouched
    assert not torch.equal(W0, P.W_O) or P.W_O[~keep].abs().sum() == 0
    before = head_contributions(heads, P.W_O)
    after = head_contributions(heads, W0)
    assert torch.equal(after[k], torch.zeros_like(after[k]))
    others = [h for h in range(nh) if h != k]
    assert rel_err(after[others], before[others]) <= RTOL
    out0 = output_projection(heads, W0)
    # out0 + head k's contribution == the full output, relative to the full output (with one
    # head, out0 and full - contribution are both ~0: their ratio would only measure rounding)
    assert rel_err(out0 + before[k], output_projection(heads, P.W_O)) <= RTOL
    # With head k's rows at zero the output no longer depends on head k at all.
    poked = heads.clone()
    poked[:, k] = torch.randn(B, T, hs) * 1e3
    assert torch.equal(output_projection(poked, W0), out0)


def test_zeroing_a_heads_value_columns_or_its_w_o_rows_gives_the_same_output():
    """Head k's W_V column block at zero makes its values, so its output, zero: the layer's
    output is the one zero_head gives (W_O's rows), up to rounding; W_Q's columns do not."""
    from andrea_edu.attention import reference_attention

    B, T, C, nh, k = 2, 5, 12, 3, 1
    P = Projections.random(C, nh, seed=3)
    X = torch.randn(B, T, C, generator=torch.Generator().manual_seed(4))

    def layer(W_Q, W_V, W_O):
        q, kk, v = project_fused(X, W_Q, P.W_K, W_V, nh)
        return output_projection(reference_attention(q, kk, v, causal=True), W_O)

    rows = layer(P.W_Q, P.W_V, zero_head(P.W_O, k, nh))
    cols = layer(P.W_Q, zero_head_columns(P.W_V, k, nh), P.W_O)
    assert rel_err(cols, rows) <= RTOL
    W_V0 = zero_head_columns(P.W_V, k, nh)
    assert torch.equal(W_V0[:, k * 4:(k + 1) * 4], torch.zeros(C, 4))
    assert torch.equal(W_V0[:, :k * 4], P.W_V[:, :k * 4]) and not W_V0.data_ptr() == P.W_V.data_ptr()
    q_cut = layer(zero_head_columns(P.W_Q, k, nh), P.W_V, P.W_O)  # uniform attention, not off
    assert rel_err(q_cut, rows) > 1e-3


def test_zero_head_leaves_the_original_alone():
    P = Projections.random(12, 3, seed=0)
    W = P.W_O.clone()
    zero_head(P.W_O, 1, 3)
    assert torch.equal(P.W_O, W)


# ------------------------------------------------------------------ Projections.random
def test_random_is_reproducible_and_gpt2_scaled():
    a, b = Projections.random(768, 12, seed=5), Projections.random(768, 12, seed=5)
    c = Projections.random(768, 12, seed=6)
    assert all(torch.equal(x, y) for x, y in zip((a.W_Q, a.W_K, a.W_V, a.W_O),
                                                (b.W_Q, b.W_K, b.W_V, b.W_O)))
    assert not torch.equal(a.W_Q, c.W_Q)
    assert not torch.equal(a.W_Q, a.W_K)  # four distinct matrices
    assert abs(a.W_Q.std().item() - 0.02) < 0.001
    assert a.W_Q.dtype == torch.float32
    assert Projections.random(16, 4, dtype=torch.float64).W_O.dtype == torch.float64


# ------------------------------------------------------------------ errors
X3 = torch.zeros(2, 5, 12)
W12 = torch.zeros(12, 12)


@pytest.mark.parametrize("call, expected, actual", [
    (lambda: split_heads(torch.zeros(5, 12), 3), "[*, *, *]", "[5, 12]"),
    (lambda: merge_heads(X3), "[*, *, *, *]", "[2, 5, 12]"),
    (lambda: fused_to_per_head(torch.zeros(12, 8), 3), "[12, 12]", "[12, 8]"),
    (lambda: per_head_to_fused(W12), "[*, *, *]", "[12, 12]"),
    (lambda: fused_to_c_attn(W12, torch.zeros(12, 8), W12), "[12, 12]", "[12, 8]"),
    (lambda: c_attn_to_fused(torch.zeros(12, 24)), "[12, 36]", "[12, 24]"),
    (lambda: project_fused(X3, W12, W12, torch.zeros(8, 12), 3), "[12, 12]", "[8, 12]"),
    (lambda: project_fused(torch.zeros(12, 12), W12, W12, W12, 3), "[*, *, *]", "[12, 12]"),
    (lambda: project_c_attn(X3, torch.zeros(12, 24), 3), "[12, 36]", "[12, 24]"),
    (lambda: project_per_head(X3, torch.zeros(3, 12, 4), torch.zeros(3, 10, 4),
                              torch.zeros(3, 12, 4)), "[3, 12, 4]", "[3, 10, 4]"),
    (lambda: output_projection(torch.zeros(2, 3, 5, 4), torch.zeros(12, 10)), "[12, 12]",
     "[12, 10]"),
    (lambda: head_contributions(torch.zeros(2, 3, 5, 4), torch.zeros(16, 16)), "[12, 12]",
     "[16, 16]"),
    (lambda: concat_heads([torch.zeros(2, 5, 4), torch.zeros(2, 5, 3)]), "[2, 5, 4]",
     "[2, 5, 3]"),
])
def test_wrong_shapes_name_expected_and_actual(call, expected, actual):
    with pytest.raises(ValueError) as err:
        call()
    msg = str(err.value)
    assert expected in msg and actual in msg


@pytest.mark.parametrize("call", [
    lambda: split_heads(X3, 5),
    lambda: fused_to_per_head(W12, 5),
    lambda: project_fused(X3, W12, W12, W12, 5),
    lambda: project_c_attn(X3, torch.zeros(12, 36), 5),
    lambda: zero_head(W12, 0, 5),
    lambda: zero_head_columns(W12, 0, 5),
    lambda: reshape_without_transpose(X3, 5),
    lambda: Projections.random(12, 5),
])
def test_n_head_that_does_not_divide_lists_the_valid_values(call):
    with pytest.raises(ValueError) as err:
        call()
    msg = str(err.value)
    assert "n_head=5" in msg and "d_model=12" in msg and "1, 2, 3, 4, 6, 12" in msg


@pytest.mark.parametrize("n_head", [0, -3, True, 2.0])
def test_n_head_must_be_a_positive_int(n_head):
    with pytest.raises(ValueError, match="n_head"):
        split_heads(X3, n_head)


@pytest.mark.parametrize("head", [-1, 3, 12, 1.0, True])
def test_zero_head_index_out_of_range(head):
    for call in (zero_head, zero_head_columns):
        with pytest.raises(ValueError) as err:
            call(W12, head, 3)
        msg = str(err.value)
        assert "0..2" in msg and str(head) in msg and "\n" not in msg
    with pytest.raises(ValueError, match=r"head must be in 0\.\.2 \(n_head=3\)"):
        check_head(head, 3)


def test_non_tensor_is_refused_with_type_error():
    # Deliberately wrong types (the run-time checks under test), hence the ignores.
    with pytest.raises(TypeError, match="torch.Tensor"):
        split_heads([[1.0, 2.0]], 1)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="torch.Tensor"):
        concat_heads([[1.0]])  # type: ignore[list-item]
    with pytest.raises(TypeError, match="torch.Tensor"):
        fused_to_c_attn([[1.0]], W12, W12)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="merge_heads"):
        concat_heads(torch.zeros(2, 3, 5, 4))  # type: ignore[arg-type]  # stacked, not a list


def test_concat_heads_needs_three_dimensional_heads():
    with pytest.raises(ValueError) as err:
        concat_heads([torch.zeros(5, 4), torch.zeros(5, 4)])
    assert "[*, *, *]" in str(err.value) and "[5, 4]" in str(err.value)


def test_zero_head_needs_a_square_w_o():
    with pytest.raises(ValueError) as err:
        zero_head(torch.zeros(12, 8), 0, 3)
    assert "[12, 12]" in str(err.value) and "[12, 8]" in str(err.value)


def test_empty_head_list_is_refused():
    with pytest.raises(ValueError, match="non-empty"):
        concat_heads([])
