"""Keras' ``Tokenizer``, as far as FlexFlow's examples use it: ``sequences_to_matrix`` (lists of word
ids -> a (samples, num_words) matrix), plus ``fit_on_texts`` / ``texts_to_sequences``.

Example:
    >>> Tokenizer(num_words=4).sequences_to_matrix([[1, 3, 3]], mode="count").tolist()
    [[0.0, 1.0, 0.0, 2.0]]

Entry point: ``Tokenizer``.
"""

from __future__ import annotations

import numbers

import re
from collections import Counter

import numpy as np

from flexrt.errors import ConfigError

_MODES = ("binary", "count", "freq", "tfidf")


class Tokenizer:
    """Word ids by frequency (1 the most frequent); ids >= ``num_words`` are dropped."""

    def __init__(self, num_words=None, filters='!"#$%&()*+,-./:;<=>?@[\\]^_`{|}~\t\n', lower=True, split=" ",
                 char_level=False, oov_token=None) -> None:
        if num_words is not None and (isinstance(num_words, bool) or not isinstance(num_words, numbers.Integral) or num_words < 1):
            raise ConfigError(f"Tokenizer: num_words must be a positive integer or None, got {num_words!r}")
        self.num_words, self.filters, self.lower, self.split = num_words, filters, lower, split
        self.char_level, self.oov_token = char_level, oov_token
        self.word_counts: Counter = Counter()
        self.document_count = 0
        self.word_index: dict = {}
        self.index_docs: Counter = Counter()

    def _words(self, text: str) -> list:
        if self.lower:
            text = text.lower()
        if self.char_level:
            return list(text)
        text = re.sub("[" + re.escape(self.filters) + "]", self.split, text)
        return [w for w in text.split(self.split) if w]

    def fit_on_texts(self, texts) -> None:
        for text in texts:
            words = self._words(text)
            self.document_count += 1
            self.word_counts.update(words)
        ranked = sorted(self.word_counts.items(), key=lambda kv: (-kv[1], kv[0]))
        start = 2 if self.oov_token is not None else 1
        self.word_index = {w: i for i, (w, _) in enumerate(ranked, start=start)}
        if self.oov_token is not None:
            self.word_index[self.oov_token] = 1

    def texts_to_sequences(self, texts) -> list:
        limit = self.num_words
        oov = self.word_index.get(self.oov_token) if self.oov_token is not None else None
        out = []
        for text in texts:
            seq = []
            for w in self._words(text):
                i = self.word_index.get(w)
                if i is not None and (limit is None or i < limit):
                    seq.append(i)
                elif oov is not None:
                    seq.append(oov)
            out.append(seq)
        return out

    def sequences_to_matrix(self, sequences, mode="binary") -> np.ndarray:
        """One row per sequence over ids ``0 .. num_words - 1``: presence ('binary'), counts ('count'),
        shares of the sequence ('freq') or TF-IDF ('tfidf', needs ``fit_on_sequences``/``fit_on_texts``)."""
        if mode not in _MODES:
            raise ConfigError(f"sequences_to_matrix: unknown mode {mode!r}; valid: {', '.join(_MODES)}")
        n = self.num_words or (len(self.word_index) + 1 if self.word_index else None)
        if n is None:
            raise ConfigError("sequences_to_matrix: give Tokenizer(num_words=...) or fit it first")
        if mode == "tfidf" and not self.document_count:
            raise ConfigError("sequences_to_matrix: mode 'tfidf' needs fit_on_sequences or fit_on_texts first")
        out = np.zeros((len(sequences), n))
        for i, seq in enumerate(sequences):
            counts = Counter(j for j in seq if 0 <= j < n)
            for j, c in counts.items():
                if mode == "binary":
                    out[i, j] = 1
                elif mode == "count":
                    out[i, j] = c
                elif mode == "freq":
                    out[i, j] = c / len(seq)
                else:
                    idf = np.log(1 + self.document_count / (1 + self.index_docs.get(j, 0)))
                    out[i, j] = (1 + np.log(c)) * idf
        return out

    def fit_on_sequences(self, sequences) -> None:
        for seq in sequences:
            self.document_count += 1
            self.index_docs.update(set(seq))
