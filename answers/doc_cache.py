"""What the answer stage computes once per document rather than once per question (SPEC §9): the sentence
offsets, the question-free candidates (sentences, windows, clauses, clause runs, entities), their
question-free features (:func:`answers.features.static_span_features`), the sentences' tokens and the text's
code points. A bounded LRU, safe to share between threads; a serving process can fill it up front
(:meth:`DocumentCache.warm`), so a question pays only for what depends on it.
"""
from __future__ import annotations

import threading
from collections import Counter, OrderedDict
from dataclasses import dataclass
from typing import Callable

import numpy as np

from answers.candidates import Span, code_points, document_spans, entity_spans, is_question, sentence_offsets
from answers.echo import normalized
from answers.features import static_span_features


@dataclass(frozen=True)
class DocumentEntry:
    """One document's question-free part: ``sentences`` (start, end) offsets into ``text``, ``spans`` (the
    question-free candidates) with ``have`` their (start, end) pairs and ``static`` (n_spans, |STATIC|) their
    features, ``sent_counts`` (each sentence's token → count) and ``sent_lens`` (its token count) for BM25,
    ``sent_tokens`` (token sets), ``all_tokens``, ``title_tokens``, ``codes`` (the text's code points,
    (len(text),) uint32), ``norm``, ``norm_at`` (the text as the metrics compare it and where each raw offset
    falls in it: :func:`answers.echo.normalized`) and ``asks`` ((n_sentences,) bool: the sentence is a question,
    :func:`answers.candidates.is_question`)."""

    text: str
    sentences: list[tuple[int, int]]
    spans: list[Span]
    have: frozenset
    static: np.ndarray
    sent_counts: list[dict]
    sent_lens: np.ndarray
    sent_tokens: list[set]
    all_tokens: set
    title_tokens: set
    codes: np.ndarray
    norm: str
    norm_at: np.ndarray
    asks: np.ndarray


def build_entry(text: str, title: str, sentences: list[tuple[int, int]],
                tokenize: Callable[[list[str]], list[list[str]]]) -> DocumentEntry:
    """The :class:`DocumentEntry` of ``text`` cut into ``sentences``; ``tokenize`` is the index's segmenter."""
    spans = document_spans(text, sentences)
    have = {(s.start, s.end) for s in spans}
    spans += entity_spans(text, sentences, have)
    toks = tokenize([text[a:b] for a, b in sentences] + [title])
    sent_tokens = [set(t) for t in toks[:-1]]
    return DocumentEntry(text, sentences, spans, frozenset(have), static_span_features(text, sentences, spans, title),
                         [Counter(t) for t in toks[:-1]], np.array([len(t) for t in toks[:-1]], dtype=np.int64),
                         sent_tokens, set().union(*sent_tokens) if sent_tokens else set(), set(toks[-1]),
                         code_points(text), *normalized(text),
                         np.array([is_question(text[a:b]) for a, b in sentences], dtype=bool).reshape(len(sentences)))


class DocumentCache:
    """``get(doc_id, text, title, tokenize)`` → the document's :class:`DocumentEntry`, built on first sight and
    kept (the ``max_docs`` most recently used). Keyed by the text itself, so a refreshed document is built
    again; one cache per index version (tokens come from its segmenter)."""

    def __init__(self, max_docs: int = 4096):
        self.max_docs = max_docs
        self._entries: OrderedDict = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, doc_id: str, text: str, title: str, tokenize) -> DocumentEntry:
        key = (doc_id, title, len(text), hash(text))
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None and entry.text == text:
                self._entries.move_to_end(key)
                return entry
        entry = build_entry(text, title, sentence_offsets(text), tokenize)
        with self._lock:
            self._entries[key] = entry
            while len(self._entries) > self.max_docs:
                self._entries.popitem(last=False)
        return entry

    def warm(self, store, tokenize, max_chars: int) -> int:
        """Build the entries of the store's documents (those of at most ``max_chars`` chars, up to
        ``max_docs``); returns how many were built. For a serving process, before or beside its first
        questions."""
        n = 0
        for doc_id, text in list(store.text.items()):
            if n >= self.max_docs:
                break
            if text and len(text) <= max_chars:
                self.get(doc_id, text, store.meta.get(doc_id, {}).get("title") or "", tokenize)
                n += 1
        return n
