"""The neural span reader as a reader part of an index version (SPEC §9; :mod:`model.span_reader`).

A :class:`~model.span_reader.SpanReader` (the first layers of the version's encoder, a start/end head, [CLS] as
the null "no answer" span; Devlin et al. 2019's SQuAD 2.0 head) reads each candidate document's focus passages:
its ``focus_sentences`` best BM25 sentences for the question, each with the ``focus_after`` sentences after it
(the span scorer's cascade, docs/answers.md "Latency": they hold the gold span's sentence 94 % of the time).
A document's answer is its best span by margin over the null score; documents keep the search's order (ranked
by their margins, the documents' answers fell from the gold document 0.78 of the time to 0.18 on held-out NCPQA
questions: a margin is not comparable across documents), and the score shown is ``sigmoid(margin)`` (0.5: the
reader prefers the span to "no answer"), compared with the part's ``threshold``.

The part is ``span-reader.json`` (the reader's config, focus settings, threshold, provenance) and the fp16
weights it names (``span-reader.safetensors``): every tensor but the token embeddings, which are the version
encoder's. The reader trains with them frozen (``python -m flows.train_reader --freeze-embeddings``), so the part
is the top layers and head only (~15 MB for e5-small's 4 layers) and is pinned to the encoder
(``encoder_model_id``): a version of another encoder refuses it at publication. Installed with
``--set part_files.span_reader=FILE``; a version that holds it answers through it
(:meth:`answers.backend.SearchBackend.reader`). ``python -m answers.span_reader --reader DIR --encoder CKPT --out
FILE`` turns a trained reader folder into the part.
"""
from __future__ import annotations

import json
import math
import os
from pathlib import Path

KIND = "span_reader"
WEIGHTS = "span-reader.safetensors"
TOKEN_EMBEDDINGS = "bert.embeddings.word_embeddings.weight"


def reader_from_encoder(encoder, layers: int, max_len: int = 192, doc_stride: int = 64, max_answer_chars: int = 64):
    """A new :class:`~model.span_reader.SpanReader` whose body is the first ``layers`` layers of ``encoder``
    (a :class:`retrieval.encoders.BertEncoder`: ``model`` a ``BertModel``, ``tokenizer`` a fast tokenizer),
    its token embeddings copied and frozen, the head random; the encoder's tokenizer attached.

    Raises:
        ValueError: ``layers`` outside 1..the encoder's layer count.
    """
    from model.span_reader import SpanReader, SpanReaderConfig

    n = encoder.model.config.num_hidden_layers
    if not 1 <= layers <= n:
        raise ValueError(f"layers = {layers}: the encoder has {n}")
    cfg = SpanReaderConfig(max_len=max_len, doc_stride=doc_stride, max_answer_chars=max_answer_chars,
                           **{**encoder.model.config.to_dict(), "num_hidden_layers": layers,
                              "architectures": ["SpanReader"]})
    model = SpanReader(cfg)
    state = {k: v for k, v in encoder.model.state_dict().items()
             if not k.startswith("encoder.layer.") or int(k.split(".")[2]) < layers}
    model.bert.load_state_dict(state)
    for p in model.bert.embeddings.word_embeddings.parameters():
        p.requires_grad = False
    model.tokenizer = encoder.tokenizer
    return model


def export_span_reader(model, encoder, encoder_model_id: str, out: str | os.PathLike, threshold: float = 0.5,
                       focus_sentences: int = 3, focus_after: int = 1, info: dict | None = None) -> Path:
    """Write ``model`` (a :class:`~model.span_reader.SpanReader` trained on ``encoder``, a
    :class:`retrieval.encoders.BertEncoder` whose id is ``encoder_model_id``) as the part file ``out`` and its
    fp16 weights (:data:`WEIGHTS`) beside it, both written whole or not at all; returns ``out``.

    Raises:
        ValueError: the reader's token embeddings are not the encoder's, to fp16 rounding (trained unfrozen, or
            on another encoder): the part could not share them; ``threshold`` outside (0, 1) or focus counts < 0.
    """
    import torch
    from safetensors.torch import save_file

    from storage.hashing import file_sha256

    if not 0 < threshold < 1 or focus_sentences < 1 or focus_after < 0:
        raise ValueError(f"threshold {threshold} must be in (0, 1), focus_sentences >= 1, focus_after >= 0")
    mine = model.bert.embeddings.word_embeddings.weight.detach()
    theirs = encoder.model.embeddings.word_embeddings.weight.detach()
    if mine.shape != theirs.shape or not torch.equal(mine.half(), theirs.half()):  # a reader saved in fp16 too
        raise ValueError("the span reader's token embeddings are not this encoder's: train it on this encoder with "
                         "its token embeddings frozen (flows.train_reader --freeze-embeddings)")
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().half().contiguous() for k, v in model.state_dict().items() if k != TOKEN_EMBEDDINGS}
    tmp = out.parent / f".{WEIGHTS}.tmp"
    save_file(state, str(tmp))
    os.replace(tmp, out.parent / WEIGHTS)
    part = {"kind": KIND, "config": model.config.to_dict(), "threshold": float(threshold),
            "focus_sentences": int(focus_sentences), "focus_after": int(focus_after),
            "weights": {"file": WEIGHTS, "sha256": file_sha256(out.parent / WEIGHTS)},
            "info": {**(info or {}), "provenance": {"encoder_model_id": encoder_model_id}}}
    tmp = out.parent / f".{out.name}.tmp"
    tmp.write_text(json.dumps(part, ensure_ascii=False, indent=1), encoding="utf-8")
    os.replace(tmp, out)
    return out


def load_span_reader(bundle, path: Path) -> "NeuralSpanReader":
    """The version's span reader (its file already checked against the manifest) on the version's encoder,
    whose token embeddings it shares.

    Raises:
        PartError: not a span reader part (or a malformed one), another encoder's, its weights changed since
            export (sha256), tensors that do not fit its config, or a version encoder that is not a plain BERT.
    """
    from safetensors.torch import load_file

    from model.span_reader import SpanReader, SpanReaderConfig
    from retrieval.parts import PartError
    from storage.hashing import file_sha256

    try:
        d = json.loads(Path(path).read_text(encoding="utf-8"))
        if not isinstance(d, dict) or d.get("kind") != KIND:
            raise ValueError(f"not a {KIND} file")
        want = ((d.get("info") or {}).get("provenance") or {}).get("encoder_model_id")
        weights = Path(path).parent / Path(str(d["weights"]["file"])).name
        settings = (float(d["threshold"]), int(d["focus_sentences"]), int(d["focus_after"]))
        config = SpanReaderConfig.from_dict(dict(d["config"]))
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise PartError(f"span reader part {path}: malformed ({str(exc)[:120]})") from None
    if want != bundle.model_id:
        raise PartError(f"span reader part {path}: trained on encoder {want}, this version's is {bundle.model_id}")
    if not weights.is_file() or file_sha256(weights) != d["weights"].get("sha256"):
        raise PartError(f"span reader part {path}: weights file {weights.name} missing or changed since export")
    encoder = bundle.retriever.dense.encoder
    if not hasattr(getattr(encoder, "model", None), "embeddings"):
        raise PartError(f"span reader part {path}: the version's encoder is not a plain BERT encoder")
    model = SpanReader(config)
    state = {k: v.float() for k, v in load_file(str(weights)).items()}
    own = {k: tuple(v.shape) for k, v in model.state_dict().items() if k != TOKEN_EMBEDDINGS}
    if {k: tuple(v.shape) for k, v in state.items()} != own:
        raise PartError(f"span reader part {path}: its tensors do not fit its config")
    model.load_state_dict(state, strict=False)
    shared = encoder.model.embeddings.word_embeddings.weight
    if tuple(shared.shape) != tuple(model.bert.embeddings.word_embeddings.weight.shape):
        raise PartError(f"span reader part {path}: the encoder's token embeddings have another shape")
    model.bert.embeddings.word_embeddings.weight = shared  # shared, not copied
    model.tokenizer = encoder.tokenizer
    model.eval()
    return NeuralSpanReader(model, *settings, version=bundle.version)


class NeuralSpanReader:
    """The span reader as an :class:`answers.reader.Reader` (module docstring): ``model`` a
    :class:`~model.span_reader.SpanReader` with its tokenizer, ``threshold`` on ``sigmoid(margin)``, the focus
    settings, ``version`` stamped into every answer. It reads no cross-encoder scores (``reranker`` None)."""

    reranker = None

    def __init__(self, model, threshold: float, focus_sentences: int = 3, focus_after: int = 1,
                 version: str | None = None):
        self.model, self.threshold, self.version = model, float(threshold), version
        self.focus_sentences, self.focus_after = int(focus_sentences), int(focus_after)

    def focus(self, doc) -> list[tuple[int, int]]:
        """(start, end) char ranges of ``doc``'s text (a :class:`answers.features.DocCandidates`) the reader
        reads: its best BM25 sentences, each with the sentences after it, overlapping ranges merged, in order."""
        import numpy as np

        sents = doc.entry.sentences
        if not sents:
            return []
        best = np.argsort(-np.asarray(doc.bm, dtype=np.float64), kind="stable")[:self.focus_sentences]
        spans = sorted((sents[i][0], sents[min(len(sents) - 1, i + self.focus_after)][1]) for i in best)
        merged = [list(spans[0])]
        for a, b in spans[1:]:
            if a <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], b)
            else:
                merged.append([a, b])
        return [(a, b) for a, b in merged]

    def best_span(self, question: str, doc) -> tuple[int, int, float] | None:
        """(start, end, margin) of ``doc``'s best span over its focus ranges (offsets into its text), or None."""
        best = None
        for a, b in self.focus(doc):
            for s, e, margin in self.model.predict(question, doc.text[a:b], top_n=1):
                if best is None or margin > best[2]:
                    best = (a + s, a + e, float(margin))
        return best

    def read(self, question: str, prep, k: int, passage_chars: int = 150) -> list:
        """The best span of each document (its focus ranges read by the model), in the search's order of the
        documents, at most ``k``, as :class:`~answers.render.Answer` records (``kind`` ``"neural"``)."""
        from answers.reader import passage
        from answers.render import Answer

        found = []
        for g, d in enumerate(prep.docs):
            hit = None if d.extra or len(found) >= k else self.best_span(question, d)
            if hit is not None:
                found.append((g, d, hit))
        out = []
        for g, d, (s, e, m) in found:
            pa, pb = passage(d.text, s, e, passage_chars)
            out.append(Answer(d.text[s:e], 1.0 / (1.0 + math.exp(-m)), s, e, d.doc_id,
                              **{c: d.meta.get(c) for c in ("external_id", "title", "url", "source", "pubtime")},
                              passage=d.text[pa:pb], version=self.version, raw_score=m, passage_start=pa,
                              passage_end=pb, kind="neural", doc_rank=g + 1))
        return out


def main(argv=None) -> int:
    """``--reader DIR`` (a folder of :func:`flows.train_reader.save`), ``--encoder CKPT`` (the encoder checkpoint
    it was trained on), ``--out FILE`` [``--threshold 0.5``]: the part file. Exit 2 with a one-line error when
    the reader does not fit the encoder."""
    import argparse
    import sys

    from model.span_reader import load_reader
    from retrieval.encoders import BertEncoder
    from retrieval.pinning import model_id

    p = argparse.ArgumentParser(prog="python -m answers.span_reader")
    p.add_argument("--reader", required=True)
    p.add_argument("--encoder", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--threshold", type=float, default=0.5)
    a = p.parse_args(argv)
    try:
        out = export_span_reader(load_reader(a.reader), BertEncoder.from_checkpoint(a.encoder), model_id(a.encoder),
                                 a.out, a.threshold, info={"trained": str(a.reader)})
    except (OSError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
