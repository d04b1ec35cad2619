"""Answers with sources (SPEC §9) from the command line, over a data dir's serving index:

    python -m flows.ask "什么是数据基础制度体系？" --data-dir data [-k 3] [--json]
    python -m flows.ask --questions FILE.jsonl --data-dir data --json

One question prints a readable answer (the span, its score, its source and passage, the other documents'
answers) or with ``--json`` one JSON object. ``--questions`` answers every line's ``question`` in one process
and prints one JSON line per input line, in order, echoing its ``qid``; a line that cannot be answered (not
JSON, no question, a bad question) gets ``error`` instead of ``answers``. A bad question or ``-k`` on the
command line is one ``error:`` line and exit 2, before anything loads; so is a missing index or scorer.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

FIELDS = ("text", "score", "doc_id", "external_id", "title", "url", "source", "pubtime", "start", "end", "passage")


def _public(result: dict) -> dict:
    return {**{k: result[k] for k in ("question", "found", "threshold", "version", "encoder")},
            "answers": [{k: a.get(k) for k in FIELDS} for a in result["answers"]]}


def format_result(r: dict) -> str:
    """A readable rendering of :meth:`answers.answer.Answerer.answer`'s result (answer span in 【】)."""
    lines = [f"Q: {r['question']}"]
    ans = r["answers"]
    if not ans:
        lines.append("no answer found (nothing retrieved)")
    else:
        a = ans[0]
        head = (f"A ({a['score']:.2f}): {a['text']}" if r["found"] else
                f"no answer found (best score {a['score']:.2f} < {r['threshold']:.2f}); closest: {a['text']}")
        p = a["passage"]
        i = p.find(a["text"])
        shown = p[:i] + "【" + a["text"] + "】" + p[i + len(a["text"]):] if i >= 0 else p
        lines += [head, f"   source: {a['title'] or a['doc_id']} | {a['source'] or ''} {a['pubtime'] or ''} | "
                  f"{a['url'] or '(no url)'} | chars {a['start']}-{a['end']} of {a['doc_id']}",
                  f"   passage: {shown}"]
        for n, b in enumerate(ans[1:], 2):
            lines.append(f"{n}. ({b['score']:.2f}) {b['text'][:120]} | {b['title'] or b['doc_id']} {b['url'] or ''}")
    lines.append(f"[index {r['version']}, encoder {r['encoder']}]")
    return "\n".join(lines)


def _batch(answerer, path: str, k: int) -> int:
    from answers.answer import AnswerInputError

    with open(path, "rb") as fh:
        for n, raw in enumerate(fh, 1):
            out: dict = {"line": n}
            try:
                rec = json.loads(raw.decode("utf-8"))
                if not isinstance(rec, dict):
                    raise ValueError("not a JSON object")
                out = {"qid": rec.get("qid"), **out}
                res = answerer.answer(rec.get("question"), k)
                out.update(_public(res))
            except UnicodeDecodeError:
                out["error"] = "line is not valid UTF-8"
            except (ValueError, AnswerInputError) as exc:  # JSONDecodeError is a ValueError
                out["error"] = str(exc)
            print(json.dumps(out, ensure_ascii=False, default=str), flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m flows.ask")
    ap.add_argument("question", nargs="?")
    ap.add_argument("--questions", help="JSON Lines file with question (and qid) per line")
    ap.add_argument("--data-dir", required=True)
    ap.add_argument("-k", type=int, default=3, help="answers (from distinct documents) to return")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--scorer", default=None, help="answer scorer JSON (default DATA/answers/scorer.json, then the cache)")
    args = ap.parse_args(argv)
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
    except AnswerInputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    from transformers.utils import logging as hf_logging

    from answers.answer import Answerer
    from answers.backend import IndexMissingError
    from answers.scorer import ScorerMissingError
    from retrieval.pinning import EncoderMismatchError

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    try:
        answerer = Answerer(args.data_dir, cfg=cfg, scorer_path=args.scorer)
        if args.questions:
            return _batch(answerer, args.questions, args.k)
        res = answerer.answer(args.question, args.k)
    except (ScorerMissingError, IndexMissingError, EncoderMismatchError, FileNotFoundError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(_public(res), ensure_ascii=False, default=str) if args.json else format_result(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
