"""The one labelled batch of both laboratories: what `heads.measures` reads of a batch.

The toy corpus (`heads.corpus.make_batch`) and real text (`heads.text_corpus.labelled_batch`,
`token_batch`, `bracket_queries`) build the same `Batch`. Each lab labels three patterns,
p = 0, 1, 2 in its own order (the toy's PATTERN_IDS, real text's PREV, BRACKET, IDENT), and the
labels of pattern p are one row of `key`: key[p, b, t] is the key position (0..t) that pattern p
designates for query t of window b, or -1 where p labels no query there. A toy position has at
most one label (the pattern that decides its next token: `corpus.labels` gives that view back);
a real-text position can have several (the previous-token pattern labels every t >= 1).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch


@dataclass
class Batch:
    """B windows of T positions. idx[b, t] the input token, targets[b, t] the next one; key
    (3, B, T) the labels (module docstring); floor (B, T) the toy generator's irreducible loss
    -ln P(targets[b, t] | idx[b, :t+1]) (None: real text has no generator to ask); where the
    (file name, start offset) of each real-text window (empty for the toy)."""

    idx: torch.Tensor  # (B, T) long
    targets: torch.Tensor  # (B, T) long
    key: torch.Tensor  # (3, B, T) long
    floor: torch.Tensor | None = None  # (B, T) float
    where: list = field(default_factory=list)  # (file name, start offset) per window

    def mask(self, p: int) -> torch.Tensor:
        """(B, T) bool: the queries that pattern p (0, 1, 2) labels."""
        return self.key[p] >= 0

    def key_of(self, p: int) -> torch.Tensor:
        """(B, T): the key of pattern p for each query (-1: not labelled)."""
        return self.key[p]

    def slice(self, a: int, b: int) -> Batch:
        """Windows a..b-1."""
        return Batch(idx=self.idx[a:b], targets=self.targets[a:b], key=self.key[:, a:b],
                     floor=None if self.floor is None else self.floor[a:b],
                     where=self.where[a:b])
