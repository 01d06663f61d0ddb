"""Tests of andrea_edu.config: presets, validation, exact parameter counts.

The counts are checked against the source's own numbers (4 x 768^2 per layer, 12 layers) and
against an independent tally of every weight shape of a GPT-style model, written here from the
architecture described in config's docstring (not from config's formula).
"""
from __future__ import annotations

import dataclasses

import pytest

from andrea_edu.config import (
    ANDREA_12M,
    ANDREA_120M,
    PRESETS,
    AndreaConfig,
    ParamCounts,
    divisors,
    param_counts,
)


def tally_shapes(cfg: AndreaConfig) -> dict[str, int]:
    """Independent count: list every tensor of the model by shape and multiply it out."""
    C, V, T, F = cfg.d_model, cfg.vocab_size, cfg.block_size, cfg.mlp_ratio * cfg.d_model
    shapes: dict[str, list[tuple[int, ...]]] = {
        "attention": [(C, C)] * 4,  # W_Q, W_K, W_V, W_O, no bias
        "mlp": [(C, F), (F, C)],  # no bias
        "layernorm": [(C,)] * 4,  # ln_1 and ln_2: weight + bias each
    }
    per_layer = {k: sum(_prod(s) for s in v) for k, v in shapes.items()}
    return {
        "attention": cfg.n_layer * per_layer["attention"],
        "mlp": cfg.n_layer * per_layer["mlp"],
        "layernorm": cfg.n_layer * per_layer["layernorm"] + 2 * C,  # + final LayerNorm
        "embeddings": V * C + T * C,  # token (tied with the output head) + position
    }


def _prod(shape) -> int:
    out = 1
    for s in shape:
        out *= s
    return out


# ------------------------------------------------------------------ the source's numbers
def test_attention_per_layer_is_the_sources_2359296():
    counts = param_counts(ANDREA_120M)
    assert counts.attention_per_layer == 4 * 768**2
    assert counts.attention_per_layer == 2_359_296  # the source's figure


def test_attention_over_twelve_layers_is_the_sources_28311552():
    counts = param_counts(ANDREA_120M)
    assert counts.n_layer == 12
    assert counts.attention == 12 * 4 * 768**2
    assert counts.attention == 28_311_552  # "12 x 2.36M ~ 28.3M" in the source, exactly
    assert round(counts.attention / 1e6, 1) == 28.3


@pytest.mark.parametrize("cfg", [ANDREA_120M, ANDREA_12M], ids=lambda c: c.name)
def test_counts_match_an_independent_tally(cfg):
    counts = param_counts(cfg)
    tally = tally_shapes(cfg)
    assert counts.attention == tally["attention"]
    assert counts.mlp == tally["mlp"]
    assert counts.layernorm == tally["layernorm"]
    assert counts.embeddings == tally["embeddings"]
    assert counts.total == sum(tally.values())


@pytest.mark.parametrize("cfg", [ANDREA_120M, ANDREA_12M], ids=lambda c: c.name)
def test_by_part_adds_up_to_the_total(cfg):
    counts = param_counts(cfg)
    parts = counts.by_part()
    assert len(parts) == 4
    assert all(isinstance(v, int) and v > 0 for v in parts.values())
    assert sum(parts.values()) == counts.total


def test_preset_totals_are_near_their_names():
    # The names promise ~120M and ~12M parameters; the assumptions must keep that promise.
    assert 115e6 <= param_counts(ANDREA_120M).total <= 130e6
    assert 11e6 <= param_counts(ANDREA_12M).total <= 13e6


def test_attention_fraction_is_about_a_quarter():
    counts = param_counts(ANDREA_120M)
    assert counts.attention_fraction == counts.attention / counts.total
    assert 0.2 < counts.attention_fraction < 0.25  # "roughly a quarter": a bit less, in fact


@pytest.mark.parametrize("n_head", divisors(768))
def test_attention_count_does_not_depend_on_n_head(n_head):
    cfg = ANDREA_120M.replace(n_head=n_head)
    assert cfg.head_dim * n_head == 768
    assert param_counts(cfg) == param_counts(ANDREA_120M)


def test_attention_shapes_with_shared_key_value_heads():
    from andrea_edu.config import attention_shapes

    C = 768
    size = lambda shapes: sum(a * b for a, b in shapes.values())  # noqa: E731
    assert size(attention_shapes(C, 12)) == param_counts(ANDREA_120M).attention_per_layer
    assert attention_shapes(C, 12, 1)["W_K"] == (C, 64) and attention_shapes(C, 12, 1)["W_Q"] == (C, C)
    for n_head in (12, 24, 48, 96):  # groups of 4: 2C^2 + 2C^2/4, whatever n_head
        assert size(attention_shapes(C, n_head, n_head // 4)) == 2 * C * C + C * C // 2
    assert size(attention_shapes(C, 24, 1)) < size(attention_shapes(C, 12, 1))  # fixed n_kv: moves


@pytest.mark.parametrize("n_head, n_kv, words", [(12, 5, "n_kv=5 must divide n_head=12"),
                                                 (12, 0, "1, 2, 3, 4, 6, 12"),
                                                 (12, 24, "n_kv=24"), (12, True, "n_kv=True"),
                                                 (7, 1, "n_head=7 does not divide d_model=768")])
def test_attention_shapes_refuses_bad_head_counts_in_one_line(n_head, n_kv, words):
    from andrea_edu.config import attention_shapes

    with pytest.raises(ValueError) as e:
        attention_shapes(768, n_head, n_kv)
    msg = str(e.value)
    assert words in msg and "\n" not in msg, msg


def test_param_counts_is_a_frozen_record():
    counts = param_counts(ANDREA_120M)
    assert isinstance(counts, ParamCounts)
    with pytest.raises(dataclasses.FrozenInstanceError):
        counts.n_layer = 1  # type: ignore[misc]  # the frozen dataclass under test


# ------------------------------------------------------------------ presets
def test_andrea_120m_has_the_sources_sizes():
    c = ANDREA_120M
    assert (c.d_model, c.n_head, c.head_dim, c.n_layer) == (768, 12, 64, 12)
    assert (c.vocab_size, c.block_size) == (50257, 1024)  # GPT-2 small: our assumption
    assert c.d_mlp == 4 * 768


def test_andrea_12m_has_the_sources_head_dim():
    c = ANDREA_12M
    assert c.head_dim == 32  # the source's number
    assert c.n_head * c.head_dim == c.d_model
    assert c.head_dim % 16 == 0 and ANDREA_120M.head_dim % 16 == 0  # tensor-core tiles


def test_presets_are_indexed_by_name():
    assert PRESETS == {"ANDREA-120M": ANDREA_120M, "ANDREA-12M": ANDREA_12M}


def test_presets_are_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        ANDREA_120M.n_head = 8  # type: ignore[misc]  # the frozen dataclass under test


def test_head_dim_is_derived_when_not_given():
    assert AndreaConfig(d_model=768, n_head=12).head_dim == 64
    assert AndreaConfig(d_model=768, n_head=8).head_dim == 96
    assert AndreaConfig(d_model=100, n_head=1).head_dim == 100


def test_consistent_head_dim_is_accepted():
    assert AndreaConfig(d_model=768, n_head=12, head_dim=64) == ANDREA_120M.replace(name="custom")


def test_divisors():
    assert divisors(768) == [1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 768]
    assert divisors(1) == [1]
    assert divisors(7) == [1, 7]


# ------------------------------------------------------------------ validation
def test_n_head_that_does_not_divide_d_model_is_refused_with_the_valid_values():
    with pytest.raises(ValueError) as err:
        AndreaConfig(d_model=768, n_head=10)
    msg = str(err.value)
    for word in ("d_model", "n_head", "head_dim", "768", "10"):
        assert word in msg
    valid = ", ".join(str(d) for d in divisors(768))
    assert valid in msg  # every n_head that works, listed


def test_inconsistent_head_dim_is_refused():
    with pytest.raises(ValueError) as err:
        AndreaConfig(d_model=768, n_head=12, head_dim=32)
    msg = str(err.value)
    for word in ("d_model=768", "n_head=12", "head_dim=32", "64"):
        assert word in msg


SIZE_FIELDS = ("d_model", "n_head", "n_layer", "vocab_size", "block_size", "mlp_ratio", "head_dim")


@pytest.mark.parametrize("field", SIZE_FIELDS)
@pytest.mark.parametrize("value", [0, -1, -768])
def test_zero_or_negative_sizes_are_refused(field, value):
    with pytest.raises(ValueError) as err:
        AndreaConfig(**{field: value})
    assert field in str(err.value) and str(value) in str(err.value)


@pytest.mark.parametrize("field", SIZE_FIELDS)
@pytest.mark.parametrize("value", [True, False, 768.0, 12.5, "12"])
def test_non_int_sizes_are_refused(field, value):
    with pytest.raises(TypeError) as err:
        AndreaConfig(**{field: value})
    assert field in str(err.value) and repr(value) in str(err.value)


@pytest.mark.parametrize("value", ["yes", 1, None])
def test_bias_must_be_a_bool_in_one_line(value):
    """"Parameter count", exercise 1 edits `bias=`: anything but True or False is one line."""
    with pytest.raises(TypeError) as err:
        ANDREA_120M.replace(bias=value)
    msg = str(err.value)
    assert msg == f"bias must be a bool, got {value!r}"


def test_gpt2_small_with_biases_has_124m_parameters():
    """GPT-2 small's count (ANDREA-120M's shape plus a bias in every linear layer): 124,439,808,
    the "124M" of Hugging Face's gpt2 model card; without biases 82,944 fewer."""
    assert param_counts(ANDREA_120M.replace(bias=True)).total == 124_439_808
    assert param_counts(ANDREA_120M).total == 124_439_808 - 12 * 9 * 768


# ------------------------------------------------------------------ replace()
def test_replace_rederives_head_dim():
    c = ANDREA_120M.replace(n_head=8)
    assert (c.d_model, c.n_head, c.head_dim) == (768, 8, 96)
    c = ANDREA_120M.replace(d_model=384)
    assert (c.d_model, c.n_head, c.head_dim) == (384, 12, 32)


def test_replace_keeps_the_other_fields_and_leaves_the_original_alone():
    c = ANDREA_120M.replace(n_layer=2, vocab_size=100)
    assert (c.n_layer, c.vocab_size, c.d_model, c.n_head, c.head_dim) == (2, 100, 768, 12, 64)
    assert ANDREA_120M.n_layer == 12 and ANDREA_120M.vocab_size == 50257


def test_replace_with_explicit_head_dim_is_validated():
    assert ANDREA_120M.replace(n_head=6, head_dim=128).head_dim == 128
    with pytest.raises(ValueError, match="head_dim=32"):
        ANDREA_120M.replace(head_dim=32)
    with pytest.raises(ValueError, match="n_head=10"):
        ANDREA_120M.replace(n_head=10)
    with pytest.raises(TypeError, match="n_layer"):
        ANDREA_120M.replace(n_layer=1.0)


# ------------------------------------------------------------------ formula vs a real module
# tests/test_model.py compares count_parameters_by_part with the formula; this test adds the
# third, independent witness: the shape tally above against every tensor the module holds.
@pytest.mark.parametrize("cfg", [ANDREA_120M, ANDREA_12M, ANDREA_12M.replace(n_head=1, n_layer=2)],
                         ids=lambda c: f"{c.name}-nh{c.n_head}-L{c.n_layer}")
def test_module_tensors_match_the_independent_tally(cfg):
    from andrea_edu.model import AndreaModel

    model = AndreaModel(cfg, device="meta")  # every parameter's shape, nothing allocated
    tally = tally_shapes(cfg)
    total = sum(p.numel() for p in model.parameters())
    assert total == sum(tally.values()) == param_counts(cfg).total
    per_layer = [sum(p.numel() for n, p in model.named_parameters()
                     if n.startswith(f"blocks.{i}.attn.")) for i in range(cfg.n_layer)]
    assert per_layer == [4 * cfg.d_model**2] * cfg.n_layer
    assert sum(per_layer) == tally["attention"] == param_counts(cfg).attention


def test_replace_that_changes_a_size_drops_the_preset_name():
    assert ANDREA_120M.replace(n_head=8).name == "custom"  # no longer ANDREA-120M
    assert ANDREA_120M.replace(n_head=12).name == "ANDREA-120M"  # nothing changed
    assert ANDREA_120M.replace(n_layer=2, name="tiny").name == "tiny"


def test_preset_by_name_and_one_line_for_another():
    from andrea_edu.config import PRESETS, preset

    assert all(preset(name) is cfg for name, cfg in PRESETS.items())
    with pytest.raises(ValueError) as e:
        preset("ANDREA-1B")
    assert "\n" not in str(e.value) and "'ANDREA-120M', 'ANDREA-12M'" in str(e.value)
