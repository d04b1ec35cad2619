"""Scoped-search bench (SPEC §7, search filters): held-out-style questions that name a place and ask about a clause
of that place's local regulation, where another place has a regulation of the same name.

Recipe (seeded, ``--seed``): over lawrefbook.jsonl.gz (``region``: province short name or None = national), a doc's
jurisdiction is the narrowest place leading its title inside the region's province (else the province; None ->
``000000``); the title with its place prefix stripped
(every leading :func:`policy.divisions.find_places` match) is its *name*; names held by >= 2 regions are the ambiguous ones.
For each such doc (``--max-questions`` sampled): one clause sentence (a ``第…条`` line of >= 20 chars, seeded), its
text after the article number, first 24 chars, is the clause keywords; the question is ``"<place full name>
<keywords>"``. Gold: the doc. BM25 (bm25s, char bigrams) over title + text of every doc of the corpus (or
``--sample`` docs incl. all gold ones).

Reports hit@1 (gold doc first) and in-scope@5 (share of the top-5 docs whose jurisdiction is the asked place, inside it,
a parent or national) for: ``bm25`` (no scope), ``gold_scope`` (the asked place as filter, applied inside the
ranking: scores outside zeroed), ``inferred`` (:func:`retrieval.scope.scope_from_question`).

    .venv/bin/python -m bench.scope_bench --corpus /work/shared/corpora/lawrefbook.jsonl.gz --out scope.json
"""
from __future__ import annotations

import argparse
import gzip
import json
import random
import re
import time
from collections import defaultdict

import bm25s
import numpy as np

from policy import divisions as D
from retrieval.scope import allowed_docs, parse_filters, scope_from_question

_CLAUSE = re.compile(r"^第[一二三四五六七八九十百零〇]+条\s*(.{20,})$")


def bigrams(text: str) -> list[str]:
    """Char bigrams of the CJK/alnum runs of ``text``."""
    out = []
    for run in re.findall(r"[\u4e00-\u9fff0-9A-Za-z]+", text):
        out.extend(run[i:i + 2] for i in range(max(1, len(run) - 1)))
    return out


def load(path: str) -> list[dict]:
    """The corpus rows with ``code`` (jurisdiction) and ``name`` (title, place stripped)."""
    divs, rows = D.load_divisions(), []
    for line in gzip.open(path, "rt", encoding="utf-8"):
        r = json.loads(line)
        code = D.NATIONAL
        if r.get("region"):
            found = D.find_places(r["region"])
            code = found[0].code if found and found[0].code in divs else D.NATIONAL
        title, end = r.get("title") or "", 0
        for place in D.find_places(title):  # the title's leading places: the narrowest inside the region is its own
            if place.start != end:
                break
            end = place.end
            if place.code in divs and code != D.NATIONAL and D.contains(code, place.code, divs):
                code = place.code
        name = title[end:]
        rows.append({"id": str(r["id"]), "title": title, "text": r.get("text") or "", "code": code, "name": name})
    return rows


def questions(rows: list[dict], seed: int, n: int) -> list[dict]:
    """Seeded scoped questions on ambiguous local names (module recipe)."""
    rng, by_name, divs = random.Random(seed), defaultdict(set), D.load_divisions()
    for r in rows:
        if r["code"] != D.NATIONAL:
            by_name[r["name"]].add(r["code"])
    cand = [r for r in rows if r["code"] != D.NATIONAL and len(by_name[r["name"]]) >= 2]
    rng.shuffle(cand)
    out = []
    for r in cand:
        clauses = [m.group(1) for m in map(_CLAUSE.match, (s.strip() for s in r["text"].splitlines())) if m]
        if not clauses:
            continue
        kw = rng.choice(clauses)[:24]
        out.append({"qid": f"q{len(out)}", "question": f"{divs[r['code']].name} {kw}", "gold": r["id"],
                    "region": divs[r["code"]].name, "name": r["name"]})
        if len(out) >= n:
            break
    return out


def _in(code: str, scope, divs) -> bool:
    """A doc's place is the asked one, a parent, national, or inside the asked one."""
    return code in scope.places or any(a in scope.asked for a in D.ancestors(code, divs))


def run(corpus: str, seed: int = 0, n: int = 300, sample: int | None = None) -> dict:
    """The bench's figures (module doc)."""
    rows = load(corpus)
    qs = questions(rows, seed, n)
    if sample and sample < len(rows):
        gold = {q["gold"] for q in qs}
        rest = [r for r in rows if r["id"] not in gold]
        random.Random(seed).shuffle(rest)
        rows = [r for r in rows if r["id"] in gold] + rest[:max(0, sample - len(gold))]
    divs = D.load_divisions()
    ids = np.array([r["id"] for r in rows])
    code_of = {r["id"]: r["code"] for r in rows}
    records = [{"doc_id": r["id"], "jurisdiction_code": r["code"]} for r in rows]
    t0 = time.perf_counter()
    bm = bm25s.BM25()
    bm.index([bigrams(r["title"] + "\n" + r["text"]) for r in rows], show_progress=False)
    build_s = time.perf_counter() - t0
    res = {m: {"hit@1": 0, "in_scope@5": 0.0, "seconds": 0.0} for m in ("bm25", "gold_scope", "inferred")}
    wrong_scope = 0
    for q in qs:
        scores = bm.get_scores(bigrams(q["question"]))
        gold_scope = parse_filters({"region": q["region"]}, divs)
        for m in res:
            t = time.perf_counter()
            scope = {"bm25": None, "gold_scope": gold_scope, "inferred": scope_from_question(q["question"], divs)}[m]
            s = scores
            if scope is not None:
                allowed = allowed_docs(scope, records, divs)
                if allowed is not None:
                    s = np.where(np.isin(ids, list(allowed)), scores, -np.inf)
                if m == "inferred" and scope.asked != gold_scope.asked:
                    wrong_scope += 1
            order = np.argsort(-s, kind="stable")[:5]
            top = ids[order[np.isfinite(s[order])]]
            res[m]["seconds"] += time.perf_counter() - t
            res[m]["hit@1"] += int(top[0] == q["gold"])
            res[m]["in_scope@5"] += float(np.mean([_in(code_of[d], gold_scope, divs) for d in top])) if len(top) else 1.0
    for m in res:
        res[m] = {"hit@1": round(res[m]["hit@1"] / len(qs), 4), "in_scope@5": round(res[m]["in_scope@5"] / len(qs), 4),
                  "ms_per_query_rank": round(1000 * res[m]["seconds"] / len(qs), 2)}
    return {"corpus": corpus, "docs": len(rows), "questions": len(qs), "seed": seed, "bm25_build_s": round(build_s, 1),
            "inferred_scope_differs": wrong_scope, "systems": res, "examples": qs[:3]}


def main(argv: list[str] | None = None) -> int:
    """CLI: prints the figures as JSON (and writes them to ``--out``)."""
    p = argparse.ArgumentParser(prog="python -m bench.scope_bench")
    p.add_argument("--corpus", default="/work/shared/corpora/lawrefbook.jsonl.gz")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--max-questions", type=int, default=300)
    p.add_argument("--sample", type=int, default=None, help="index only this many docs (all gold docs kept)")
    p.add_argument("--out", default=None)
    a = p.parse_args(argv)
    out = json.dumps(run(a.corpus, a.seed, a.max_questions, a.sample), ensure_ascii=False, indent=1)
    if a.out:
        with open(a.out, "w", encoding="utf-8") as f:
            f.write(out)
    print(out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
