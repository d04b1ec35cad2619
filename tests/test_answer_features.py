"""The answer stage's per-question work (SPEC §9): BM25 over a document's cached term counts equals bm25s's,
the span features computed for several documents at once equal those of each document alone and the
definitions checked by hand, the cascade's focus, and the document cache (warm or cold, the same answers)."""
from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from answers.answer import focus_sentences
from answers.candidates import document_spans, sentence_offsets
from answers.echo import ECHO_FEATURES, EchoQuery, echo_matrix, normalized, question_parts
from answers.features import SPAN_FEATURES, question_chars, sentence_bm25, span_matrix, static_span_features
from answers.metrics import normalize

DOCS = [("一、总体要求。坚持促进数据合规高效流通使用，赋能实体经济，保障安全。二、建立数据产权制度；探索数据产权分置运行机制！"
         "三、完善收益分配制度。", "数据基础制度"),
        ("各地要做好防疫物资保障工作。对哄抬物价、造假等行为给予处罚和刑事拘留。咨询热线：86512345。", "防疫物资保障"),
        ("数据产权制度要求：建立公共数据、企业数据、个人数据的分类分级确权授权制度。", "数据产权")]


def _doc(text, title, q_tokens, tokenize):
    sents = sentence_offsets(text)
    spans = document_spans(text, sents)
    toks = tokenize([text[a:b] for a, b in sents])
    bm = sentence_bm25(q_tokens, [Counter(t) for t in toks], np.array([len(t) for t in toks]))
    d = {"text": text, "codes": np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32), "sentences": sents,
         **dict(zip(("norm", "norm_at"), normalized(text))),
         "spans": spans, "sent_tokens": [set(t) for t in toks], "bm": bm,
         "dense": np.where(np.arange(len(sents)) % 2 == 0, np.linspace(0.2, 0.9, len(sents)), np.nan),
         "hits": [{"start": 0, "end": min(40, len(text)), "rank": 3}]}
    return d, static_span_features(text, sents, spans, title)


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
    got = sentence_bm25(q, [Counter(t) for t in toks], np.array([len(t) for t in toks]))
    assert got.dtype == np.float32 and got.shape == (5,) and got[0] > got[2] > 0 and got[1] == 0
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)
    assert not sentence_bm25(["不在任何句子里"], [Counter(t) for t in toks], np.ones(5)).any()
    assert sentence_bm25(q, [], np.zeros(0)).shape == (0,)


def test_span_features_of_documents_together_equal_each_alone_and_their_definitions(tok):
    question = "数据产权制度有哪些要求？"
    q_tokens = tok[0]([question])[0]
    docs, statics = zip(*(_doc(t, title, q_tokens, tok[0]) for t, title in DOCS))
    best_all = max(float(d["bm"].max()) for d in docs)
    assert best_all > 0 and float(docs[1]["bm"].max()) == 0  # a document that matches nothing reads zeros
    q_tok, q_chars = set(q_tokens), question_chars(question)
    together = span_matrix(question, list(docs), list(statics), best_all, q_tok, q_chars, 20)
    alone = np.vstack([span_matrix(question, [d], [s], best_all, q_tok, q_chars, 20) for d, s in zip(docs, statics)])
    assert together.shape == (sum(len(d["spans"]) for d in docs), len(SPAN_FEATURES))
    np.testing.assert_array_equal(together, alone)  # nothing reads across a document's edge
    col = {f: k for k, f in enumerate(SPAN_FEATURES)}
    row = 0
    for d in docs:
        top = float(d["bm"].max())
        text, sents, rel = d["text"], d["sentences"], (d["bm"] / top if top > 0 else 0 * d["bm"])
        for sp in d["spans"]:
            x, span = together[row], text[sp.start:sp.end]
            row += 1
            assert x[col["char_cover"]] == pytest.approx(len(q_chars & set(span)) / len(q_chars))
            before = text[sents[sp.first][0]:sp.start]
            assert x[col["pre_char_cover"]] == pytest.approx(len(q_chars & set(before)) / len(q_chars))
            assert x[col["new_char_share"]] == pytest.approx(len(set(span) - q_chars) / len(set(span)))
            toks = set().union(*d["sent_tokens"][sp.first:sp.last + 1])
            assert x[col["cover"]] == pytest.approx(len(q_tok & toks) / len(q_tok))
            assert x[col["bm25_prev"]] == pytest.approx(rel[sp.first - 1] if sp.first else 0.0)
            assert x[col["bm25_next"]] == pytest.approx(rel[sp.last + 1] if sp.last + 1 < len(sents) else 0.0)
            has = not np.isnan(d["dense"][sp.first])
            want = d["dense"][sp.first] - np.nanmax(d["dense"]) if has else -1.0
            assert x[col["dense_first"]] == pytest.approx(want)
            assert x[col["in_chunk"]] == float(sp.start < 40) and x[col["len_log"]] == pytest.approx(np.log1p(len(span)))
            q = normalize(question)
            left, right = normalize(text[:sp.start]), normalize(text[sp.end:])
            assert x[col["echo_before"]] == _longest(lambda n: left[len(left) - n:], q)
            assert x[col["echo_after"]] == _longest(lambda n: right[:n], q)
            assert x[col["echo_opens"]] == _longest(lambda n: normalize(span)[:n], q)
            assert x[col["wh_echo_before"]] == _longest(lambda n: left[len(left) - n:], q[:q.index("哪些")])
            assert x[col["wh_echo_after"]] == _longest(lambda n: right[:n], q[q.index("哪些") + 2:])


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


def _gap_offsets_by_definition(text, start, end, question, min_chars=2, max_chars=120):
    """Gaps between the question's echoes, char by char (the definition :func:`answers.candidates.gap_offsets`
    vectorises)."""
    from answers.candidates import _CLAUSE_END, _trim

    q = "".join(question.split())
    qb = {q[i:i + 2] for i in range(len(q) - 1)}
    echo = [False] * (end - start)
    for i in range(start, end - 1):
        if text[i:i + 2] in qb:
            echo[i - start] = echo[i - start + 1] = True
    out, i = set(), 0
    while any(echo) and i < len(echo):
        if echo[i]:
            i += 1
            continue
        j = i
        while j < len(echo) and not echo[j]:
            j += 1
        a, b = _trim(text, start + i, start + j)
        if min_chars <= b - a <= max_chars:
            out.add((a, b))
            m = _CLAUSE_END.search(text, b, end)
            c = _trim(text, a, m.start() if m else end)
            if c[1] > b and c[1] - c[0] <= max_chars:
                out.add(c)
        i = j
    return sorted(out)


def test_gaps_between_the_question_s_echoes_follow_their_definition():
    from answers.candidates import echo_bigrams, gap_offsets, gap_spans

    questions = ["如何处置哄抬物价、造假等行为？", "数据产权制度要求建立什么？", "咨询热线是多少", "三、完善 收益分配制度？", "？", "数"]
    checked = 0
    for text, _ in DOCS:
        sents = sentence_offsets(text)
        for q in questions:
            hit = echo_bigrams(np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32), q)
            for s, e in sents + [(0, len(text)), (3, 3), (5, 6)]:
                assert gap_offsets(text, s, e, hit) == _gap_offsets_by_definition(text, s, e, q), (q, text[s:e])
                checked += bool(_gap_offsets_by_definition(text, s, e, q))
            want, seen = [], set()
            for k, (s, e) in enumerate(sents):
                for ab in _gap_offsets_by_definition(text, s, e, q):
                    if ab not in seen:
                        seen.add(ab)
                        want.append((*ab, k))
            assert [(sp.start, sp.end, sp.first) for sp in gap_spans(text, sents, q, set())] == want
    assert checked >= 8
    text = DOCS[1][0]
    s, e = sentence_offsets(text)[1]
    got = {text[a:b] for a, b in gap_offsets(text, s, e, echo_bigrams(
        np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32), "如何处置哄抬物价、造假等行为？"))}
    assert "给予处罚和刑事拘留" in got


def test_a_question_in_the_text_is_never_offered_as_an_answer(tok):
    from dataclasses import replace as dc_replace

    from answers.answer import AnswerConfig, _focused
    from answers.candidates import is_question
    from answers.doc_cache import build_entry

    assert is_question("意见出台的总体考虑是什么？") and is_question("问：怎样理解其内涵？”") and is_question("Why? ")
    assert not is_question("这是答案。") and not is_question("“是什么？”他说。")
    text = "问：意见出台的总体考虑是什么？答：坚持促进数据合规高效流通使用，赋能实体经济。问：如何保障安全？答：建立制度。"
    e = build_entry(text, "答记者问", sentence_offsets(text), tok[0])
    assert e.asks.tolist() == [True, False, True, False]
    d = {"bm": np.arange(len(e.sentences), dtype=np.float32)[::-1].copy(), "meta": {}}
    rows = _focused("意见出台的总体考虑是什么？", d, e, dc_replace(AnswerConfig(), focus_sentences=0))
    assert len(rows) == len(d["spans"]) > 0
    assert all(not e.asks[sp.first] for sp in d["spans"])
    assert any(text[sp.start:sp.end].startswith("答：坚持") for sp in d["spans"])
