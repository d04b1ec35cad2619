"""Answers with sources (SPEC §9) from the command line, over a data dir's serving index:

    python -m flows.ask "什么是数据基础制度体系？" --data-dir data [-k 3] [--json]
    python -m flows.ask --questions FILE.jsonl --data-dir data --json
    python -m flows.ask "数据条例对公共数据开放有何规定？" --data-dir data --region 浙江省 [--level L] [--issuer I]
        [--from D] [--to D] [--in-force] [--no-infer-scope]

One question prints a readable answer (the span, its score, its source and passage, the other documents'
answers) or with ``--json`` one JSON object. ``--questions`` answers every line's ``question`` in one process
and prints one JSON line per input line, in order, echoing its ``qid``; a line that cannot be answered (not
JSON, no question, a bad question) gets ``error`` instead of ``answers``. A bad question or ``-k`` on the
command line is one ``error:`` line and exit 2, before anything loads; so is a missing index or scorer.

Scoped answers (SPEC §7 search filters, :mod:`retrieval.scoped`): the filter flags of ``flows.search``
(``--region --level --issuer --from --to --in-force``) restrict the documents answers come from, over the
serving version's policy records; without ``--region`` the places the question names scope it unless
``--no-infer-scope``. A scoped result has ``scope`` (its fields and ``label``, e.g. ``范围：浙江省 + 国家``),
shown first in the readable rendering. In ``--questions`` a line's own filter fields (``region``, ``level``,
``issuer``, ``from``, ``to``, ``in_force``) replace the command line's; a bad one is that line's ``error``.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from flows.search import add_filter_args, filters_from_args

FIELDS = ("text", "score", "doc_id", "external_id", "title", "url", "source", "pubtime", "start", "end", "passage")


def _public(result: dict) -> dict:
    return {**{k: result[k] for k in ("question", "found", "threshold", "version", "encoder")},
            **({"scope": result["scope"]} if "scope" in result else {}),
            "answers": [{k: a.get(k) for k in FIELDS} for a in result["answers"]]}


def refusal(score: float, threshold: float) -> str:
    """How an answer below the version's threshold is announced (:func:`answers.render.refusal`)."""
    from answers.render import refusal as said

    return said(score, threshold)


def format_result(r: dict) -> str:
    """A readable rendering of :meth:`answers.answer.Answerer.answer`'s result (:func:`answers.render.result_text`)."""
    from answers.render import result_text

    return result_text(r)


def _batch(answerer, path: str, k: int, filters: dict | None = None, infer_scope: bool = False) -> int:
    """Answer every line of the JSON Lines file ``path``; one JSON line out per line in, in order. A line that
    cannot be answered gets ``error``: not UTF-8, not JSON (also nested too deep for the parser), not an
    object, a question that is not valid Unicode text (a lone surrogate from a ``\\ud800`` escape) or that the
    answerer refuses. A UTF-8 byte order mark before the first line is the file's, not the question's."""
    from answers.answer import AnswerInputError
    from retrieval.scoped import filters_of

    with open(path, "rb") as fh:
        for n, raw in enumerate(fh, 1):
            if n == 1 and raw.startswith(b"\xef\xbb\xbf"):
                raw = raw[3:]
            out: dict = {"line": n}
            try:
                rec = json.loads(raw.decode("utf-8"))
                if not isinstance(rec, dict):
                    raise ValueError("not a JSON object")
                out = {"qid": _plain_text(rec.get("qid")), **out}
                question = rec.get("question")
                if isinstance(question, str) and _plain_text(question) is None:
                    raise ValueError("the question is not valid Unicode text (a lone surrogate)")
                res = answerer.answer(question, k, filters={**(filters or {}), **filters_of(rec)},
                                      infer_scope=infer_scope)
                out.update(_public(res))
            except UnicodeDecodeError:
                out["error"] = "line is not valid UTF-8"
            except RecursionError:
                out["error"] = "not JSON (nested too deep)"
            except (ValueError, AnswerInputError) as exc:  # JSONDecodeError is a ValueError
                out["error"] = str(exc)
            print(_json_line(out), flush=True)
    return 0


def _plain_text(value):
    """``value`` unless it is a string that does not encode as UTF-8 (a lone surrogate): then None."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return None
    return value


def _json_line(out: dict) -> str:
    """``out`` as one JSON line; a value that cannot be written as UTF-8 (a lone surrogate echoed in an
    error message or ``qid``) leaves the line with its ``line`` number and an ``error`` only."""
    text = json.dumps(out, ensure_ascii=False, default=str)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = json.dumps({"qid": None, "line": out["line"], "error": "record holds text that is not valid Unicode"},
                          ensure_ascii=False)
    return text


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m flows.ask")
    ap.add_argument("question", nargs="?")
    ap.add_argument("--questions", help="JSON Lines file with question (and qid) per line")
    ap.add_argument("--data-dir", required=True)
    ap.add_argument("-k", type=int, default=3, help="answers (from distinct documents) to return")
    ap.add_argument("--json", action="store_true")
    add_filter_args(ap, "question")
    args = ap.parse_args(argv)
    filters = filters_from_args(args)
    from answers.answer import AnswerConfig, AnswerInputError, check_question

    cfg = AnswerConfig()
    if (args.question is None) == (args.questions is None):
        print("error: give one question or --questions FILE", file=sys.stderr)
        return 2
    try:  # before the index and the encoder load
        if args.question is not None:
            check_question(args.question, args.k, cfg)
        else:
            check_question("?1", args.k, cfg)
            if not Path(args.questions).is_file():
                raise AnswerInputError(f"{args.questions} not found")
        from retrieval.scope import parse_filters

        parse_filters(filters)
    except (AnswerInputError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    from transformers.utils import logging as hf_logging

    from answers.answer import Answerer
    from answers.scorer import ScorerMissingError
    from retrieval.bundle import IndexMissingError
    from retrieval.parts import PartError
    from retrieval.pinning import EncoderMismatchError

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    try:
        answerer = Answerer(args.data_dir)  # read with the settings pinned in the serving version
        answerer.check()  # a missing or refused part of the serving version: one error before any question
        if args.questions:
            return _batch(answerer, args.questions, args.k, filters, not args.no_infer_scope)
        res = answerer.answer(args.question, args.k, filters=filters, infer_scope=not args.no_infer_scope)
    except (ScorerMissingError, IndexMissingError, PartError, EncoderMismatchError, FileNotFoundError,
            ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(_public(res), ensure_ascii=False, default=str))
    else:
        shown = res.get("scope") and res["scope"]["label"] != "范围：不限"
        print((res["scope"]["label"] + "\n" if shown else "") + format_result(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
