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


@dataclass(frozen=True)
class WholeText:
    """The question-free parts of a long document that span its whole text, whichever sentences a question reads
    of it: ``codes`` (len(text),) uint32 code points, ``norm`` / ``norm_at`` (:func:`answers.echo.normalized`),
    ``sentences`` (:func:`answers.candidates.sentence_offsets`) with ``starts`` (n_sentences,) int64 their
    start offsets, and ``tokens`` (sentence text → its tokens, filled as questions read sentences)."""

    codes: np.ndarray
    norm: str
    norm_at: np.ndarray
    sentences: list
    starts: np.ndarray
    tokens: dict

    @classmethod
    def of(cls, text: str) -> "WholeText":
        sents = sentence_offsets(text)
        return cls(code_points(text), *normalized(text), sents,
                   np.array([a for a, _ in sents], dtype=np.int64).reshape(len(sents)), {})

    def near(self, ranges: list[tuple[int, int]], margin: int) -> list[tuple[int, int]]:
        """The sentences starting within ``margin`` chars of a (start, end) range of ``ranges`` (char offsets):
        those starting in ``[start - margin, end + margin)`` of any, in text order."""
        keep = np.zeros(len(self.starts), dtype=bool)
        for a, b in ranges:
            keep |= (self.starts >= a - margin) & (self.starts < b + margin)
        return [self.sentences[i] for i in np.flatnonzero(keep).tolist()]

    def tokenizer(self, tokenize: Callable[[list[str]], list[list[str]]]) -> Callable[[list[str]], list[list[str]]]:
        """``tokenize`` remembering each text's tokens in ``self.tokens`` (a sentence is segmented once)."""
        def tok(texts: list[str]) -> list[list[str]]:
            missing = list(dict.fromkeys(t for t in texts if t not in self.tokens))
            if missing:
                self.tokens.update(zip(missing, tokenize(missing)))
            return [self.tokens[t] for t in texts]

        return tok


def build_entry(text: str, title: str, sentences: list[tuple[int, int]],
                tokenize: Callable[[list[str]], list[list[str]]], whole: WholeText | None = None,
                static: bool = True) -> DocumentEntry:
    """The :class:`DocumentEntry` of ``text`` cut into ``sentences``; ``tokenize`` is the index's segmenter.
    ``whole``: the text's :class:`WholeText` when already computed (a long document read by many questions, near
    their hits only: :meth:`DocumentCache.whole`); the entry is the same with or without it. ``static`` False
    leaves ``static`` None (an entry built for one question: the reader computes the rows of the spans it keeps,
    :func:`answers.answer.prepare`)."""
    if whole is not None:
        tokenize = whole.tokenizer(tokenize)
    spans = document_spans(text, sentences)
    have = {(s.start, s.end) for s in spans}
    spans += entity_spans(text, sentences, have)
    toks = tokenize([text[a:b] for a, b in sentences] + [title])
    sent_tokens = [set(t) for t in toks[:-1]]
    return DocumentEntry(text, sentences, spans, frozenset(have),
                         static_span_features(text, sentences, spans, title) if static else None,
                         [Counter(t) for t in toks[:-1]], np.array([len(t) for t in toks[:-1]], dtype=np.int64),
                         sent_tokens, set().union(*sent_tokens) if sent_tokens else set(), set(toks[-1]),
                         *((whole.codes, whole.norm, whole.norm_at) if whole is not None
                           else (code_points(text), *normalized(text))),
                         np.array([is_question(text[a:b]) for a, b in sentences], dtype=bool).reshape(len(sentences)))


class DocumentCache:
    """``get(doc_id, text, title, tokenize)`` → the document's :class:`DocumentEntry`, built on first sight and
    kept (the ``max_docs`` most recently used). Keyed by the text itself, so a refreshed document is built
    again; one cache per index version (tokens come from its segmenter). Documents too long to read whole are
    read near each question's hits; what spans their whole text is kept apart (:meth:`whole`, the
    ``max_docs`` most recently used too)."""

    def __init__(self, max_docs: int = 4096):
        self.max_docs = max_docs
        self._entries: OrderedDict = OrderedDict()
        self._wholes: OrderedDict = OrderedDict()
        self._lock = threading.Lock()

    def _kept(self, table: OrderedDict, key: tuple, same: Callable[[object], bool], build: Callable[[], object]):
        """``table[key]`` when present and ``same(it)`` (marked most recently used), else ``build()`` stored
        under ``key``, the table cut to its ``max_docs`` most recently used. Built outside the lock."""
        with self._lock:
            found = table.get(key)
            if found is not None and same(found):
                table.move_to_end(key)
                return found
        made = build()
        with self._lock:
            table[key] = made
            while len(table) > self.max_docs:
                table.popitem(last=False)
        return made

    def whole(self, doc_id: str, text: str) -> WholeText:
        """The :class:`WholeText` of a long document, computed on first sight and kept: a question reading
        sentences near its hits then pays only for those (:func:`answers.answer.prepare`)."""
        return self._kept(self._wholes, (doc_id, len(text), hash(text)), lambda w: len(w.codes) == len(text),
                          lambda: WholeText.of(text))

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, doc_id: str, text: str, title: str, tokenize) -> DocumentEntry:
        return self._kept(self._entries, (doc_id, title, len(text), hash(text)), lambda e: e.text == text,
                          lambda: build_entry(text, title, sentence_offsets(text), tokenize))

    def warm(self, store, tokenize, max_chars: int) -> int:
        """Build the entries of the store's documents of at most ``max_chars`` chars and the :class:`WholeText`
        of the longer ones (up to ``max_docs`` of each); returns how many were built. For a serving process,
        before or beside its first questions."""
        n = n_long = 0
        for doc_id, text in list(store.text.items()):
            if not text:
                continue
            if len(text) <= max_chars and n < self.max_docs:
                self.get(doc_id, text, store.meta.get(doc_id, {}).get("title") or "", tokenize)
                n += 1
            elif len(text) > max_chars and n_long < self.max_docs:
                self.whole(doc_id, text)
                n_long += 1
        return n + n_long
