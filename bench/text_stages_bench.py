"""Text-stage benchmark on the real corpus (SPEC §3-§5), in one run:
the time of each text stage (import, clean, sentences, segment, vocab, datasets, report) and the
throughput of each segmenter backend in chars/s over the same sentences, side by side.

    python bench/text_stages_bench.py [--input ../shared/corpus/policy_docs.csv]
"""
from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

from corpus import stages as S
from corpus.clean import CleanConfig
from corpus.pairs import PairConfig
from corpus.report import build_report
from corpus.segment import SegmenterUnavailable, load_segmenter
from corpus.sentences import SentenceConfig
from corpus.vocab import VocabConfig
from storage import read_table

REPO = Path(__file__).resolve().parent.parent


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--input", default=str(REPO.parent / "shared" / "corpus" / "policy_docs.csv"))
    args = ap.parse_args()
    corpus = Path(args.input).parent
    d = Path(tempfile.mkdtemp(prefix="bench-text-"))
    steps = [
        ("import", lambda: S.import_documents(args.input, d / "documents", corpus / "policy_sources.csv")),
        ("clean", lambda: S.clean_stage(d / "documents", d / "documents_clean", d / "rejects", CleanConfig())),
        ("sentences", lambda: S.sentences_stage(d / "documents_clean", d / "sentences", SentenceConfig())),
        ("segment", lambda: S.segment_stage(d / "sentences", d / "segments", "auto", cache_root=d / "cache")),
        ("segment (cached)", lambda: S.segment_stage(d / "sentences", d / "segments", "auto", cache_root=d / "cache")),
        ("vocab", lambda: S.vocab_stage(d / "segments", d / "vocab", str(corpus / "stopwords.txt"), VocabConfig())),
        ("datasets+probe", lambda: S.datasets_stage(d / "sentences", d / "documents_clean", S.DATASETS.write_paths(d), PairConfig())),
        ("report", lambda: build_report(S.REPORT.read_paths(d), d / "report")),
    ]
    try:
        print(f"{'stage':<18}{'seconds':>9}")
        for name, fn in steps:
            t = time.perf_counter()
            fn()
            print(f"{name:<18}{time.perf_counter() - t:>9.2f}")
        texts = read_table(d / "sentences", ["text"])["text"].tolist()
        chars = sum(map(len, texts))
        print(f"\nsegmenter throughput over {len(texts)} sentences, {chars} chars")
        print(f"{'backend':<14}{'load s':>8}{'chars/s':>12}{'words':>9}")
        for backend in ("hanlp-dict", "jieba", "hanlp-neural"):
            try:
                t = time.perf_counter()
                seg = load_segmenter(backend)
                load = time.perf_counter() - t
                seg.segment(texts[:50])  # warm-up (jieba builds its prefix dict lazily)
                t = time.perf_counter()
                words = seg.segment(texts)
                secs = time.perf_counter() - t
                print(f"{backend:<14}{load:>8.2f}{chars / secs:>12,.0f}{sum(map(len, words)):>9}")
            except SegmenterUnavailable as exc:
                print(f"{backend:<14}  unavailable: {exc}")
    finally:
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
