"""flows/summary.py: the run summary of a corpus too small for held-out documents or test pairs."""
from flows.summary import format_summary


def test_summary_of_a_tiny_corpus_prints_n_a_instead_of_crashing():
    s = {"profile": "tiny", "documents_in": 1, "documents_out": 1, "rejects_by_reason": {}, "sentences": 40,
         "segmenter": {"backend": "hanlp-dict", "model_id": "x"}, "vocab_size": 12, "sentence_coverage": 0.5,
         "pairs": {"policysm1": {"train": {"1": 10, "0": 10}}},
         "probe": {"policysm1": {"accuracy": None, "majority": None}},
         "pretrain_heldout": None,
         "finetune_policysm1": {"dev": {"accuracy": 0.0, "f1": 0.0, "examples": 0}, "test": None,
                                "majority_test": None},
         "index": {"version": "v1", "chunks": 3, "documents": 1, "embedded": 3, "reused": 0, "removed": 0},
         "retrieval_eval": [], "sample_query": []}
    text = format_summary(s)
    assert "MLM loss n/a" in text and "(majority n/a)" in text and "probe n/a" in text


def test_summary_says_when_pretraining_ran_no_step():
    s = {"profile": "cpu-small", "documents_in": 1, "documents_out": 1, "rejects_by_reason": {}, "sentences": 40,
         "segmenter": {"backend": "hanlp-dict", "model_id": "x"}, "vocab_size": 12, "sentence_coverage": 0.5,
         "pairs": {}, "probe": {}, "pretrain_heldout": None, "pretrain_steps": 0,
         "finetune_policysm1": {"dev": {"accuracy": 0.77, "f1": 0.78}, "test": {"accuracy": 0.79, "f1": 0.8},
                                "majority_test": 0.5},
         "index": {"version": "v1", "chunks": 3, "documents": 1, "embedded": 3, "reused": 0, "removed": 0},
         "retrieval_eval": [], "sample_query": []}
    text = format_summary(s)
    assert "no MLM + NSP steps" in text and "MLM loss" not in text and "test acc 0.790" in text


def test_a_sample_answer_below_the_threshold_is_shown_as_no_answer_with_the_closest_span():
    """As flows.ask shows it: the summary must not present a refused span as the answer."""
    s = {"profile": "cpu-small", "documents_in": 1, "documents_out": 1, "rejects_by_reason": {}, "sentences": 40,
         "segmenter": {"backend": "hanlp-dict", "model_id": "x"}, "vocab_size": 12, "sentence_coverage": 0.5,
         "pairs": {}, "probe": {}, "pretrain_heldout": None, "pretrain_steps": 0,
         "finetune_policysm1": {"dev": {}, "test": None, "majority_test": None},
         "index": {"version": "v1", "chunks": 3, "documents": 1, "embedded": 3, "reused": 0, "removed": 0},
         "retrieval_eval": [], "sample_query": []}
    span = {"text": "补齐数据要素协同治理制度短板", "score": 0.19, "title": "数据基础制度", "threshold": 0.3}
    low = format_summary({**s, "sample_answer": {**span, "found": False}}).splitlines()[-1]
    assert low == ("sample answer: no answer found (best score 0.19 < 0.30); "
                   "closest: 补齐数据要素协同治理制度短板 (0.19; 数据基础制度)")
    high = format_summary({**s, "sample_answer": {**span, "score": 0.62, "found": True}}).splitlines()[-1]
    assert high == "sample answer: 补齐数据要素协同治理制度短板 (0.62; 数据基础制度)"
    refused = format_summary({**s, "sample_answer": {"note": "no answer found"}})
    assert refused.endswith("sample answer: no answer found")
