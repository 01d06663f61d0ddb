"""heads.text_corpus: the standard library as a corpus, its split, tokenizer and parser labels."""
from __future__ import annotations

import sys

import numpy as np
import pytest
import torch

from andrea_edu.heads import text_corpus as tc
from andrea_edu.heads.batch import Batch
from andrea_lab.gpt2_small import token_batch  # labels carried over to another tokenizer

SNIPPET = '''def f(a, b):
    """A docstring with ( and [ that are not brackets."""
    foo = g(a, "(", [1, {2: b}])  # a comment ) that is not one either
    return foo(foo)
'''


@pytest.fixture(scope="module")
def fake_stdlib(tmp_path_factory):
    root = tmp_path_factory.mktemp("stdlib")
    for i in range(12):
        (root / f"mod{i:02d}.py").write_text(SNIPPET * (i + 3) + f"x{i} = ({i}, [{i}])\n")
    (root / "_private.py").write_text("secret = 1\n")
    (root / "this.py").write_text("joke = 1\n")
    return root


@pytest.fixture(scope="module")
def corpus(fake_stdlib):
    return tc.load_corpus(fake_stdlib)


def test_selection_skips_private_and_excluded(fake_stdlib):
    names = [p.name for p in tc.eligible_files(fake_stdlib)]
    assert names == sorted(names) and len(names) == 12
    assert "_private.py" not in names and "this.py" not in names


def test_split_is_by_file_and_a_function_of_the_name(corpus):
    tr, va = {f.name for f in corpus.train}, {f.name for f in corpus.valid}
    assert not tr & va and len(tr | va) == 12
    assert all(tc.is_validation(n) for n in va) and not any(tc.is_validation(n) for n in tr)
    assert tc.is_validation("x.py", seed=0) == tc.is_validation("x.py", seed=0)


def test_provenance_hash_tracks_content(fake_stdlib, corpus, tmp_path):
    again = tc.load_corpus(fake_stdlib)
    assert again.content_hash == corpus.content_hash and len(corpus.content_hash) == 64
    other = tmp_path / "other"
    other.mkdir()
    for p in tc.eligible_files(fake_stdlib):
        (other / p.name).write_bytes(p.read_bytes())
    (other / "mod00.py").write_text("changed = 1\n")
    assert tc.load_corpus(other).content_hash != corpus.content_hash
    same, text = tc.same_corpus(corpus.provenance, corpus)
    assert same and "same corpus" in text
    same, text = tc.same_corpus({"content_hash": "0" * 64, "python": "2.7"}, corpus)
    assert not same and "another corpus" in text and "2.7" in text
    assert corpus.provenance["n_files"] == 12 and len(corpus.provenance["files"]) == 12


def test_tokenizer_round_trip_and_unknown(corpus):
    s = "def f(a, b):\n    return foo"
    assert corpus.decode(corpus.encode(s)) == s
    ids = corpus.encode("Ω(")
    assert ids[0] == 0 and corpus.chars[ids[1]] == "("


def test_brackets_come_from_the_parser_not_from_strings_or_comments():
    pairs = tc.bracket_pairs(SNIPPET)
    got = sorted((SNIPPET[o], SNIPPET[c]) for o, c in pairs)
    # def f(...), g(...), [...], {...}, foo(...): five real pairs; the ones in the docstring,
    # the string "(" and the comment are not brackets
    assert got == sorted([("(", ")")] * 3 + [("[", "]"), ("{", "}")])
    inner = [(o, c) for o, c in pairs if SNIPPET[o] == "{"][0]
    outer = [(o, c) for o, c in pairs if SNIPPET[o] == "["][0]
    assert outer[0] < inner[0] < inner[1] < outer[1]  # nesting, labelled by position
    with pytest.raises(ValueError, match="unmatched"):
        tc.bracket_pairs("x = 1)\n")


def test_identifier_labels_point_at_the_next_character_of_the_earlier_copy():
    text = "foo = 1\nfor x in foo: pass\n"
    lab = tc.file_labels(text)["ident"]
    second = text.index("foo", 1)
    assert lab[second] == 1 and lab[second + 1] == 2 and lab[second + 2] == -1
    assert (lab[:second] == -1).all()  # first occurrences and keywords are not labelled
    assert lab[text.index("x ")] == -1  # one-character names have no next character to copy


def test_real_windows_agree_with_their_labels(corpus):
    T = 64
    b = tc.labelled_batch(corpus, 8, T, seed=3, split="train")
    assert type(b) is Batch and b.key.shape == (3, 8, T) and b.floor is None  # the toy's type
    t = np.arange(T)
    for p in tc.PATTERNS:
        m = b.mask(p).numpy()
        k = b.key[p].numpy()
        assert ((k[m] >= 0) & (k[m] <= np.broadcast_to(t, m.shape)[m])).all()
    bb, tt = np.nonzero(b.mask(tc.IDENT).numpy())
    kk = b.key[tc.IDENT].numpy()[bb, tt]
    assert len(bb) > 0 and (b.idx.numpy()[bb, kk] == b.targets.numpy()[bb, tt]).all()
    bb, tt = np.nonzero(b.mask(tc.BRACKET).numpy())
    kk = b.key[tc.BRACKET].numpy()[bb, tt]
    opened = [tc.OPEN_TO_CLOSE[corpus.chars[i]] for i in b.idx.numpy()[bb, kk]]
    closed = [corpus.chars[i] for i in b.targets.numpy()[bb, tt]]
    assert len(bb) > 0 and opened == closed
    assert (b.key[tc.PREV, :, 1:].numpy() == np.arange(T - 1)).all()
    assert tc.labelled_batch(corpus, 8, T, seed=3, split="train").where == b.where


def test_bracket_queries_move_to_the_closer(corpus):
    """at="closer": every query sits on the closing bracket itself (the character the old query
    predicted), its key still the opener; the other patterns untouched; a bad value is one line."""
    b = tc.labelled_batch(corpus, 8, 64, seed=3, split="train")
    same = tc.bracket_queries(b, "before")
    assert torch.equal(same.key, b.key)
    c = tc.bracket_queries(b, "closer")
    bb, tt = np.nonzero(c.mask(tc.BRACKET).numpy())
    assert len(bb) > 0
    closers = [corpus.chars[i] for i in c.idx.numpy()[bb, tt]]
    openers = [corpus.chars[i] for i in c.idx.numpy()[bb, c.key[tc.BRACKET].numpy()[bb, tt]]]
    assert [tc.OPEN_TO_CLOSE[o] for o in openers] == closers
    before = int(b.mask(tc.BRACKET)[:, :-1].sum())  # a query on the last character falls out
    assert len(bb) == before
    assert torch.equal(c.key[tc.PREV], b.key[tc.PREV]) and torch.equal(c.key[tc.IDENT], b.key[tc.IDENT])
    with pytest.raises(ValueError) as e:
        tc.bracket_queries(b, "opener")
    assert "\n" not in str(e.value) and "'before', 'closer'" in str(e.value)


def test_this_interpreters_stdlib_is_a_corpus():
    c = tc.corpus_cached()
    prov = c.provenance
    assert prov["n_files"] > 50 and prov["n_valid_files"] >= 5
    assert prov["total_bytes"] > 1_000_000 and 60 <= c.vocab_size <= 200
    assert all("(" in c.chars and ch in c.chars for ch in ")[]{}")
    # the folder is named without this machine's install location (the hash names the content)
    v = sys.version_info
    assert prov["stdlib"] in (f"{{base_prefix}}/lib/python{v.major}.{v.minor}", "{stdlib}"), prov["stdlib"]
    assert sys.base_prefix not in prov["stdlib"]


def test_another_folder_is_named_as_given(fake_stdlib, corpus):
    assert corpus.provenance["stdlib"] == str(fake_stdlib)


def test_token_batch_with_a_character_tokenizer_equals_the_character_batch(corpus):
    """The carry-over of labels to another tokenizer, checked where the answer is known."""
    def chars(text):
        return corpus.encode(text).tolist(), [(i, i + 1) for i in range(len(text))]
    T = 48
    a = tc.labelled_batch(corpus, 6, 8 * T, seed=5, split="train")  # same windows drawn
    b = token_batch(corpus, chars, 6, T, seed=5, split="train")
    assert b.where == a.where
    assert torch.equal(b.idx, a.idx[:, :T]) and torch.equal(b.key, a.key[:, :, :T])


def test_token_batch_with_word_tokens_keeps_labels_that_fit_token_boundaries(corpus):
    import re

    def words(text):
        spans = [m.span() for m in re.finditer(r"\w{1,2}|\s+|.", text)]  # names in 2-char pieces
        return [hash(text[a:b]) % 50 for a, b in spans], spans
    b = token_batch(corpus, words, 6, 40, seed=2, split="train")
    t = np.arange(40)
    for p in tc.PATTERNS:
        m = b.mask(p).numpy()
        assert ((b.key[p].numpy()[m] >= 0) & (b.key[p].numpy()[m] <= np.broadcast_to(t, m.shape)[m])).all()
    assert b.mask(tc.IDENT).any() and b.mask(tc.BRACKET).any()
    bb, tt = np.nonzero(b.mask(tc.IDENT).numpy())
    kk = b.key[tc.IDENT].numpy()[bb, tt]
    assert (b.idx.numpy()[bb, kk] == b.targets.numpy()[bb, tt]).all()  # the next piece copied
