"""The answer stage's per-question work (SPEC §9): BM25 over a document's cached term counts equals bm25s's,
the span features computed for several documents at once equal those of each document alone and the
definitions checked by hand, the cascade's focus, and the document cache (warm or cold, the same answers)."""
from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from answers.answer import focus_sentences
from answers.candidates import sentence_offsets
from answers.echo import ECHO_FEATURES, EchoQuery, echo_matrix, normalized, question_parts
from answers.doc_cache import build_entry
from answers.features import (DOC_FEATURES, SPAN_FEATURES, STATIC, DocCandidates, Question, by_name, doc_features,
                              span_matrix, static_span_features)
from retrieval.hits import RankedHit, SearchHit
from retrieval.sparse import bm25_scores
from answers.metrics import normalize

DOCS = [("一、总体要求。坚持促进数据合规高效流通使用，赋能实体经济，保障安全。二、建立数据产权制度；探索数据产权分置运行机制！"
         "三、完善收益分配制度。", "数据基础制度"),
        ("各地要做好防疫物资保障工作。对哄抬物价、造假等行为给予处罚和刑事拘留。咨询热线：86512345。", "防疫物资保障"),
        ("数据产权制度要求：建立公共数据、企业数据、个人数据的分类分级确权授权制度。", "数据产权")]


def _doc(text, title, q_tokens, tokenize):
    """A candidate document as :func:`answers.answer.prepare` builds it: its cached entry, every candidate
    span, the question's BM25, a cosine on every other sentence and one hit over its first 40 chars."""
    e = build_entry(text, title, sentence_offsets(text), tokenize)
    n = len(e.sentences)
    hit = SearchHit(1.0 / (len(text) % 7 + 1), "hybrid", 1, title, 0, min(40, len(text)), text[:40], dense_score=0.5)
    return DocCandidates(title, [RankedHit(3, hit)], 0, False,
                         {"title": title}, e, bm25_scores(q_tokens, e.sent_counts, e.sent_lens),
                         np.where(np.arange(n) % 2 == 0, np.linspace(0.2, 0.9, n), np.nan), e.spans, e.static)


@pytest.fixture(scope="module")
def tok():
    from retrieval.sparse import make_tokenizer

    return make_tokenizer("auto")  # (texts -> token lists, segmenter identity), as the index takes it


def test_sentence_bm25_from_term_counts_equals_bm25s(tok):
    import bm25s

    sents = ["建立数据产权制度，探索数据产权分置运行机制。", "", "完善数据要素收益分配制度。", "数据数据数据。",
             "保障安全。"]
    toks = tok[0](sents)
    q = tok[0](["如何建立数据产权制度？数据"])[0]
    assert q.count("数据") == 2  # a repeated question token counts twice, as bm25s scores it
    bm = bm25s.BM25(k1=1.5, b=0.75, method="lucene")
    bm.index([t if t else [""] for t in toks], show_progress=False)
    want = bm.get_scores_from_ids([i for i in bm.get_tokens_ids(q) if i != bm.vocab_dict.get("")])
    got = bm25_scores(q, [Counter(t) for t in toks], np.array([len(t) for t in toks]))
    assert got.dtype == np.float32 and got.shape == (5,) and got[0] > got[2] > 0 and got[1] == 0
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)
    assert not bm25_scores(["不在任何句子里"], [Counter(t) for t in toks], np.ones(5)).any()
    assert bm25_scores(q, [], np.zeros(0)).shape == (0,)


def test_span_features_of_documents_together_equal_each_alone_and_their_definitions(tok):
    question = "数据产权制度有哪些要求？"
    q = Question.of(question, tok[0])
    docs = [_doc(t, title, list(q.tokens), tok[0]) for t, title in DOCS]
    best_all = max(float(d.bm.max()) for d in docs)
    assert best_all > 0 and float(docs[1].bm.max()) == 0  # a document that matches nothing reads zeros
    q_tok, q_chars = q.token_set, q.chars
    together = span_matrix(q, docs, best_all, 20)
    alone = np.vstack([span_matrix(q, [d], best_all, 20) for d in docs])
    assert together.shape == (sum(len(d.spans) for d in docs), len(SPAN_FEATURES))
    assert {sp.kind for d in docs for sp in d.spans} >= {"sentence", "window", "clause", "entity"}
    np.testing.assert_array_equal(together, alone)  # nothing reads across a document's edge
    col = {f: k for k, f in enumerate(SPAN_FEATURES)}
    row = 0
    for d in docs:
        top = float(d.bm.max())
        text, sents, rel = d.text, d.sentences, (d.bm / top if top > 0 else 0 * d.bm)
        for sp in d.spans:
            x, span = together[row], text[sp.start:sp.end]
            row += 1
            assert x[col["char_cover"]] == pytest.approx(len(q_chars & set(span)) / len(q_chars))
            before = text[sents[sp.first][0]:sp.start]
            assert x[col["pre_char_cover"]] == pytest.approx(len(q_chars & set(before)) / len(q_chars))
            assert x[col["new_char_share"]] == pytest.approx(len(set(span) - q_chars) / len(set(span)))
            toks = set().union(*d.entry.sent_tokens[sp.first:sp.last + 1])
            assert x[col["cover"]] == pytest.approx(len(q_tok & toks) / len(q_tok))
            assert x[col["bm25_prev"]] == pytest.approx(rel[sp.first - 1] if sp.first else 0.0)
            assert x[col["bm25_next"]] == pytest.approx(rel[sp.last + 1] if sp.last + 1 < len(sents) else 0.0)
            has = not np.isnan(d.dense[sp.first])
            want = d.dense[sp.first] - np.nanmax(d.dense) if has else -1.0
            assert x[col["dense_first"]] == pytest.approx(want)
            assert x[col["in_chunk"]] == float(sp.start < 40) and x[col["len_log"]] == pytest.approx(np.log1p(len(span)))
            q = normalize(question)
            left, right = normalize(text[:sp.start]), normalize(text[sp.end:])
            assert x[col["echo_before"]] == _longest(lambda n: left[len(left) - n:], q)
            assert x[col["echo_after"]] == _longest(lambda n: right[:n], q)
            assert x[col["echo_opens"]] == _longest(lambda n: normalize(span)[:n], q)
            assert x[col["wh_echo_before"]] == _longest(lambda n: left[len(left) - n:], q[:q.index("哪些")])
            assert x[col["wh_echo_after"]] == _longest(lambda n: right[:n], q[q.index("哪些") + 2:])


def test_document_features_by_name_match_their_definitions(tok):
    q = Question.of("数据产权制度有哪些要求？", tok[0])
    docs = [_doc(t, title, list(q.tokens), tok[0]) for t, title in DOCS]
    best = np.array([float(d.bm.max()) for d in docs])
    x = doc_features(docs, q, best)
    f = {name: x[:, k] for k, name in enumerate(DOC_FEATURES)}
    assert x.shape == (3, len(DOC_FEATURES)) and x.dtype == np.float32
    assert f["doc_top"].tolist() == [1, 0, 0] and f["n_hits"].tolist() == [1, 1, 1]
    np.testing.assert_allclose(f["doc_rank_log"], np.log1p([0, 1, 2]), rtol=1e-6)
    np.testing.assert_allclose(f["best_bm25_rel"], best / best.max(), rtol=1e-6)
    np.testing.assert_allclose(f["n_sent_log"], [np.log1p(len(d.sentences)) for d in docs], rtol=1e-6)
    for d, cover in zip(docs, f["doc_cover"]):
        assert cover == pytest.approx(len(q.token_set & d.entry.all_tokens) / len(q.token_set))
    title_cover = len(q.token_set & docs[2].entry.title_tokens) / len(q.token_set)  # title 数据产权
    assert title_cover > 0 and f["title_cover"][2] == pytest.approx(title_cover)
    assert doc_features([], q, np.zeros(0)).shape == (0, len(DOC_FEATURES))


def test_feature_columns_are_stacked_by_their_declared_names():
    got = by_name({"b": np.array([2.0, 4.0]), "a": [1, 3], "c": 5.0}, ("a", "b", "c"), 2)
    assert got.dtype == np.float32 and got.tolist() == [[1, 2, 5], [3, 4, 5]]
    with pytest.raises(ValueError, match=r"missing \['c'\]"):
        by_name({"a": [1], "b": [2]}, ("a", "b", "c"), 1)
    with pytest.raises(ValueError, match=r"undeclared \['d'\]"):
        by_name({"a": [1], "b": [2], "c": [3], "d": [4]}, ("a", "b", "c"), 1)
    text = "一、总体要求：坚持促进数据合规高效流通使用。"
    sents = sentence_offsets(text)
    from answers.candidates import document_spans

    spans = document_spans(text, sents)
    x = static_span_features(text, sents, spans, "总体要求")
    col = {f: k for k, f in enumerate(STATIC)}
    for row, sp in zip(x, spans):
        assert (row[col["start"]], row[col["end"]], row[col["len"]]) == (sp.start, sp.end, sp.end - sp.start)
        assert row[col["kind_clause"]] == float(sp.kind == "clause")
        assert row[col["distinct_chars"]] == len(set(text[sp.start:sp.end]))
    assert static_span_features(text, sents, [], "").shape == (0, len(STATIC))


def _longest(piece, q: str, cap: int = 20) -> int:
    """By brute force: the largest n <= cap with piece(n) n chars long and inside q."""
    return max(n for n in range(cap + 1) if len(piece(n)) == n and piece(n) in q)


def test_echo_is_the_question_s_words_beside_a_span():
    text = "在电脑端，重庆科技馆以数字科技馆为平台，推出“网游科技馆”活动，市民可通过视频看讲座。"
    question = "重庆科技馆推出什么活动可以让市民看讲座？"
    norm, at = normalized(text)
    assert norm == normalize(text) and at[0] == 0 and at[-1] == len(norm)
    a = text.index("网游科技馆")
    x = echo_matrix(EchoQuery.of(question), norm, at, np.array([a, 0]), np.array([a + 5, 4]))
    f = dict(zip(ECHO_FEATURES, x[0]))
    assert f["echo_before"] == 2 and f["wh_echo_before"] == 2  # "推出" (the quote mark skipped)
    assert f["echo_after"] == 2 and f["wh_echo_after"] == 2  # "活动"
    assert f["echo_opens"] == 0 and f["echo_closes"] == 3  # opens with "网" (not in the question), closes "科技馆"
    g = dict(zip(ECHO_FEATURES, x[1]))  # "在电脑端", then "重庆科技馆以…"
    assert g["echo_before"] == 0 and g["echo_after"] == 5 and g["wh_echo_after"] == 0
    q, pre, post = question_parts("缓缴期间滞纳金是怎么规定的")
    assert (pre, post) == ("缓缴期间滞纳金是", "规定的") and question_parts("热线电话")[1:] == ("热线电话", "")


def test_focus_keeps_the_best_sentences_and_the_one_after():
    bm = np.array([0.1, 3.0, 0.0, 2.0, 0.5, 0.0, 1.0])
    assert focus_sentences(bm, 2, 1).tolist() == [False, True, True, True, True, False, False]
    assert focus_sentences(bm, 1, 0).tolist() == [False, True, False, False, False, False, False]
    assert focus_sentences(bm, 0, 1).all() and focus_sentences(bm[:3], 5, 1).all()
    assert focus_sentences(bm, 1, 9).tolist() == [False] + [True] * 6  # clipped at the document's end


@pytest.mark.slow
def test_warm_document_cache_gives_the_answers_of_a_cold_one(tmp_path, tok):
    from answers import Answerer
    from tests.answer_builders import build_data_dir, fit_test_scorer

    data = build_data_dir(tmp_path, tok)
    scorer = fit_test_scorer(data, tok)
    cold = Answerer(data, scorer=scorer, tokenizer=tok)
    warm = Answerer(data, scorer=scorer, tokenizer=tok)
    assert warm.warm() == 8 and len(warm.backend().doc_cache) == 8 and len(cold.backend().doc_cache) == 0
    for q in ("职业教育工作现就哪些方面提出意见？", "数据第7项要完善什么？"):
        a, b = cold.answer(q, 3), warm.answer(q, 3)
        assert [(x["doc_id"], x["start"], x["end"], x["score"]) for x in a["answers"]] == \
               [(x["doc_id"], x["start"], x["end"], x["score"]) for x in b["answers"]] and a["answers"]
    assert 0 < len(cold.backend().doc_cache) <= 8


# Worked by hand (indices under the text). "如何建立数据产权制度？" echoes 建立 (0-1) and 数据产权制度 (4-9) of
#   建立健全数据产权制度和收益分配机制，完善治理。
#   0 1 2 3 4 5 6 7 8 9 10 ... 17(，) ... 22(。)
# leaving the runs 健全 (2-4) and 和收益分配机制，完善治理。 (10-23, its 。 trimmed: 10-22); 健全 also reaches to
# the end of its clause, the ， at 17 (2-17).
GAP_TEXT = "建立健全数据产权制度和收益分配机制，完善治理。"
GAP_QUESTION = "如何建立数据产权制度？"


def _gaps(text, start, end, question, **kw):
    from answers.candidates import echo_bigrams, gap_offsets

    return gap_offsets(text, start, end, echo_bigrams(np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32),
                                                     question), **kw)


def test_gaps_between_the_question_s_echoes_match_hand_worked_cases():
    assert _gaps(GAP_TEXT, 0, len(GAP_TEXT), GAP_QUESTION) == [(2, 4), (2, 17), (10, 22)]
    assert _gaps(GAP_TEXT, 0, len(GAP_TEXT), GAP_QUESTION, max_chars=5) == [(2, 4)]  # 2-17 and 10-22 too long
    assert _gaps(GAP_TEXT, 0, len(GAP_TEXT), GAP_QUESTION, min_chars=3) == [(10, 22)]  # 健全 too short
    assert _gaps(GAP_TEXT, 0, len(GAP_TEXT), "咨询热线是多少") == []  # nothing echoes
    # the docstring's case: 哄抬物价、造假等行为 (1-10) echoes; 对 (0) is one char; the rest ends at 。
    text = "对哄抬物价、造假等行为给予处罚和刑事拘留。"
    assert _gaps(text, 0, len(text), "如何处置哄抬物价、造假等行为？") == [(11, 20)]
    # a sentence inside a longer text: offsets are the text's, echoes outside the sentence do not count
    doubled = "数据产权。" + GAP_TEXT
    assert _gaps(doubled, 5, len(doubled), GAP_QUESTION) == [(7, 9), (7, 22), (15, 27)]
    assert _gaps(doubled, 5, 7, GAP_QUESTION) == []  # 建立 alone: echoes, no run of 2 chars beside it


def test_gap_spans_number_their_sentences_and_skip_known_spans():
    from answers.candidates import gap_spans

    text = GAP_TEXT + GAP_TEXT
    n = len(GAP_TEXT)
    got = gap_spans(text, [(0, n), (n, 2 * n)], GAP_QUESTION, {(2, 17)})
    assert [(sp.start, sp.end, sp.first) for sp in got] == [(2, 4, 0), (10, 22, 0), (n + 2, n + 4, 1),
                                                            (n + 2, n + 17, 1), (n + 10, n + 22, 1)]


def test_gaps_in_real_sentences_stay_inside_them_and_are_trimmed():
    """On the test documents: each gap lies in its sentence, has 2..120 chars and no edge punctuation."""
    from answers.candidates import _PUNCT_EDGE

    questions = ["如何处置哄抬物价、造假等行为？", "数据产权制度要求建立什么？", "三、完善 收益分配制度？"]
    found = 0
    for text, _ in DOCS:
        for s, e in sentence_offsets(text):
            for q in questions:
                for a, b in _gaps(text, s, e, q):
                    found += 1
                    assert s <= a < b <= e and 2 <= b - a <= 120, (q, text[a:b])
                    assert text[a] not in _PUNCT_EDGE and text[b - 1] not in _PUNCT_EDGE, (q, text[a:b])
    assert found >= 8
    text = DOCS[1][0]
    s, e = sentence_offsets(text)[1]
    assert "给予处罚和刑事拘留" in {text[a:b] for a, b in _gaps(text, s, e, "如何处置哄抬物价、造假等行为？")}


def test_a_question_in_the_text_is_never_offered_as_an_answer(tok):
    from dataclasses import replace as dc_replace

    from answers.answer import AnswerConfig, _focused
    from answers.candidates import is_question

    assert is_question("意见出台的总体考虑是什么？") and is_question("问：怎样理解其内涵？”") and is_question("Why? ")
    assert not is_question("这是答案。") and not is_question("“是什么？”他说。")
    text = "问：意见出台的总体考虑是什么？答：坚持促进数据合规高效流通使用，赋能实体经济。问：如何保障安全？答：建立制度。"
    e = build_entry(text, "答记者问", sentence_offsets(text), tok[0])
    assert e.asks.tolist() == [True, False, True, False]
    bm = np.arange(len(e.sentences), dtype=np.float32)[::-1].copy()
    spans, rows = _focused("意见出台的总体考虑是什么？", bm, e, "", dc_replace(AnswerConfig(), focus_sentences=0))
    assert rows.shape == (len(spans), len(STATIC)) and spans
    assert all(not e.asks[sp.first] for sp in spans)
    assert any(text[sp.start:sp.end].startswith("答：坚持") for sp in spans)


def test_long_document_read_near_hits_is_the_same_with_its_whole_text_cached(tok):
    """A document too long to read whole is read near each question's hits: with its whole-text part cached
    (code points, normalised text, sentence offsets, sentence tokens) and only the kept spans' rows computed,
    the question's spans and rows equal those of an entry built from scratch."""
    from dataclasses import replace as dc_replace

    from answers.answer import AnswerConfig, _focused
    from answers.doc_cache import DocumentCache

    text = "".join(f"第{i}条 本市对{'数据' if i % 3 else '物资'}保障工作给予补贴{i * 10}万元；具体办法由市政府另行制定。"
                   for i in range(1, 80))
    cache, cfg = DocumentCache(4), dc_replace(AnswerConfig(), focus_sentences=3)
    ranges = [(120, 400), (1500, 1700)]
    want_sents = [s for s in sentence_offsets(text) if any(a - cfg.margin <= s[0] < b + cfg.margin for a, b in ranges)]
    whole = cache.whole("d", text)
    assert whole.near(ranges, cfg.margin) == want_sents and 0 < len(want_sents) < len(sentence_offsets(text))
    assert cache.whole("d", text) is whole  # kept, not recomputed
    fresh = build_entry(text, "补贴办法", want_sents, tok[0])
    for _ in range(2):  # the second reads its sentence tokens from the cache
        cached = build_entry(text, "补贴办法", want_sents, tok[0], whole, static=False)
        assert cached.static is None and cached.sent_counts == fresh.sent_counts and cached.norm == fresh.norm
        assert np.array_equal(cached.norm_at, fresh.norm_at) and np.array_equal(cached.codes, fresh.codes)
        bm = bm25_scores(["数据", "补贴"], cached.sent_counts, cached.sent_lens)
        spans, rows = _focused("数据保障补贴多少？", bm, cached, "补贴办法", cfg)
        want_spans, want_rows = _focused("数据保障补贴多少？", bm, fresh, "补贴办法", cfg)
        assert spans == want_spans and np.array_equal(rows, want_rows) and len(spans) > 0
    assert set(whole.tokens) == {text[a:b] for a, b in want_sents} | {"补贴办法"}  # each text segmented once


def test_warm_builds_short_entries_and_long_whole_texts(tok):
    from types import SimpleNamespace

    from answers.doc_cache import DocumentCache

    long_text = "第一条 本市对数据保障工作给予补贴。" * 40
    store = SimpleNamespace(text={"short": DOCS[0][0], "long": long_text, "empty": ""},
                            meta={"short": {"title": DOCS[0][1]}})
    cache = DocumentCache(8)
    assert cache.warm(store, tok[0], max_chars=200) == 2
    assert len(cache) == 1 and len(cache._wholes) == 1  # the long one only as its whole-text part
    assert cache.whole("long", long_text).norm == normalized(long_text)[0]
