"""Scoped-search bench (SPEC §7, search filters): held-out-style questions that name a place and ask about a clause
of that place's local regulation, where another place has a regulation of the same name.

Recipe (seeded, ``--seed``): over lawrefbook.jsonl.gz (``region``: province short name or None = national), a doc's
jurisdiction is the narrowest place leading its title inside the region's province (else the province; None ->
``000000``); the title with its place prefix stripped
(every leading :func:`corpus.divisions.find_places` match) is its *name*; names held by >= 2 regions are the ambiguous ones.
For each such doc (``--max-questions`` sampled): one clause sentence (a ``第…条`` line of >= 20 chars, seeded), its
text after the article number, first 24 chars, is the clause keywords; the question is ``"<place full name>
<keywords>"``. Gold: the doc. BM25 (bm25s, char bigrams) over title + text of every doc of the corpus (or
``--sample`` docs incl. all gold ones).

Reports hit@1 (gold doc first) and in-scope@5 (share of the top-5 docs whose jurisdiction is the asked place, inside it,
a parent or national) for: ``bm25`` (no scope), ``gold_scope`` (the asked place as filter, applied inside the
ranking: scores outside zeroed), ``inferred`` (:func:`retrieval.scope.scope_from_question`), ``ordered`` (the
inferred scope's top 100 reordered by :class:`retrieval.scope_order.ScopeOrder`, as the serving search does), and the cost of the
allowed-documents step alone (``allowed_ms``): p50 / mean ms per question of :func:`retrieval.scope.allowed_docs`
recomputed, and of :class:`retrieval.scope.AllowedCache` warm (its scopes computed once before timing).

``--write-questions FILE`` writes the same questions as the JSON Lines ``flows.search --questions`` reads (qid and
question only: the scope is left to the search to infer); ``--score FILE`` scores what that search printed
(``flows.search --questions FILE --json``: the first hit's ``external_id`` against the gold id, in-scope@5 over
the distinct documents of the printed hits, their ``jurisdiction.code``), so the figure is the serving search's
own, end to end (:func:`score_results`).

``--data-dir DIR`` measures the serving search instead (:func:`serving`): the version ``DIR/index/CURRENT`` names,
questions ``"<place> <title>"`` on its documents of a known place below 全国, warm p50 per question of the
unscoped search, the search scoped to the place (explicit ``region``, :func:`retrieval.scoped.scoped_docs`: the
allowed set cached per scope), the same scope with the allowed set recomputed per question, and the scoped search
with its reorder (:func:`retrieval.scoped.scope_order`, what ``flows.search`` serves).

    .venv/bin/python -m bench.scope_bench --corpus /work/shared/corpora/lawrefbook.jsonl.gz --out scope.json
    .venv/bin/python -m bench.scope_bench --data-dir data --rounds 5
    .venv/bin/python -m bench.scope_bench --write-questions q.jsonl
    .venv/bin/python -m flows.search --questions q.jsonl --data-dir DIR -k 10 --json > r.jsonl
    .venv/bin/python -m bench.scope_bench --score r.jsonl
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

from corpus import divisions as D
from retrieval.scope import AllowedCache, allowed_docs, parse_filters, scope_from_question

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
    text_of = {r["id"]: r["title"] + "\n" + r["text"] for r in rows}
    res = {m: {"hit@1": 0, "in_scope@5": 0.0, "seconds": 0.0} for m in ("bm25", "gold_scope", "inferred", "ordered")}
    wrong_scope = 0
    for q in qs:
        scores = bm.get_scores(bigrams(q["question"]))
        gold_scope = parse_filters({"region": q["region"]}, divs)
        for m in res:
            t = time.perf_counter()
            scope = (None if m == "bm25" else gold_scope if m == "gold_scope"
                     else scope_from_question(q["question"], divs))
            s = scores
            if scope is not None:
                allowed = allowed_docs(scope, records, divs)
                if allowed is not None:
                    s = np.where(np.isin(ids, list(allowed)), scores, -np.inf)
                if m == "inferred" and scope.asked != gold_scope.asked:
                    wrong_scope += 1
            order = np.argsort(-s, kind="stable")[:5 if m != "ordered" else 100]
            top = ids[order[np.isfinite(s[order])]]
            if m == "ordered" and scope is not None and scope.asked:
                top = np.array(reorder(q["question"], top, scope, code_of, text_of))[:5]
            res[m]["seconds"] += time.perf_counter() - t
            res[m]["hit@1"] += int(top[0] == q["gold"])
            res[m]["in_scope@5"] += float(np.mean([_in(code_of[d], gold_scope, divs) for d in top])) if len(top) else 1.0
    for m in res:
        res[m] = {"hit@1": round(res[m]["hit@1"] / len(qs), 4), "in_scope@5": round(res[m]["in_scope@5"] / len(qs), 4),
                  "ms_per_query_rank": round(1000 * res[m]["seconds"] / len(qs), 2)}
    return {"corpus": corpus, "docs": len(rows), "questions": len(qs), "seed": seed, "bm25_build_s": round(build_s, 1),
            "inferred_scope_differs": wrong_scope, "systems": res,
            "allowed_ms": allowed_cost([parse_filters({"region": q["region"]}, divs) for q in qs], records, divs),
            "examples": qs[:3]}


def score_results(results: list[dict], qs: list[dict]) -> dict:
    """hit@1 and in-scope@5 of ``flows.search --questions --json`` output lines ``results`` for questions ``qs``
    (:func:`questions`, matched by qid): the first hit's ``external_id`` (else ``doc_id``) against the gold id;
    in-scope@5 over the first 5 distinct documents of the hits, by each hit's ``jurisdiction.code`` against the
    question's gold place (a hit of unknown jurisdiction counts out of scope). ``scope_differs``: questions whose
    printed scope did not ask exactly the gold place; ``errors``: error lines or questions with no output line."""
    divs, by_qid = D.load_divisions(), {str(r.get("qid")): r for r in results}
    hit1, in5, differs, errors = 0, 0.0, 0, 0
    for q in qs:
        r = by_qid.get(q["qid"])
        if r is None or "error" in r:
            errors += 1
            continue
        docs, seen = [], set()
        for h in r.get("hits", []):
            d = str(h.get("external_id") or h.get("doc_id"))
            if d not in seen:
                seen.add(d)
                docs.append((d, (h.get("jurisdiction") or {}).get("code")))
        gold_scope = parse_filters({"region": q["region"]}, divs)
        hit1 += int(bool(docs) and docs[0][0] == q["gold"])
        top = docs[:5]
        in5 += float(np.mean([c is not None and _in(c, gold_scope, divs) for _, c in top])) if top else 1.0
        differs += int(tuple((r.get("scope") or {}).get("region") or ()) != gold_scope.asked)
    n = len(qs)
    return {"questions": n, "hit@1": round(hit1 / n, 4), "in_scope@5": round(in5 / n, 4),
            "scope_differs": differs, "errors": errors}


def reorder(question: str, top, scope, code_of: dict, text_of: dict) -> list[str]:
    """Doc ids ``top`` (best first) in :class:`retrieval.scope_order.ScopeOrder`'s order for ``scope``, each
    document's whole text standing for its hit's chunk."""
    from retrieval.hits import SearchHit
    from retrieval.scope_order import ScopeOrder

    hits = [SearchHit(score=0.0, mode="sparse", chunk_id=i, doc_id=d, start=0, end=0, text=text_of[d])
            for i, d in enumerate(top)]
    return [h.doc_id for h in ScopeOrder(frozenset(scope.asked), code_of.get)(question, hits)]


def _ms(times: list[float]) -> dict:
    return {"p50": round(1000 * float(np.median(times)), 3), "mean": round(1000 * float(np.mean(times)), 3)}


def allowed_cost(scopes: list, records: list[dict], divs) -> dict:
    """ms per question of the allowed-documents step: :func:`allowed_docs` recomputed, and
    :class:`AllowedCache` warm (each scope computed once before timing); checks both give the same sets."""
    cache = AllowedCache(records, divs, maxsize=max(64, len(scopes)))
    for s in scopes:
        assert cache.allowed(s) == allowed_docs(s, records, divs)
    timed: dict[str, list[float]] = {"recomputed": [], "cached": []}
    for s in scopes:
        t = time.perf_counter()
        allowed_docs(s, records, divs)
        timed["recomputed"].append(time.perf_counter() - t)
        t = time.perf_counter()
        cache.allowed(s)
        timed["cached"].append(time.perf_counter() - t)
    return {m: _ms(v) for m, v in timed.items()}


def serving(data_dir: str, rounds: int = 5, k: int = 10, limit: int = 200,
            modes: tuple[str, ...] = ("sparse", "hybrid"), reuse_vectors: bool = False) -> dict:
    """Warm p50 of the serving search (module doc) in each of ``modes`` (``sparse``: BM25 alone, where the filter's
    share shows; ``hybrid``: what ``flows.search`` serves, the query encoder included): ``unscoped``, ``scoped``
    (the place as ``region``, allowed set cached per scope by :func:`retrieval.scoped.scoped_docs`) and
    ``scoped_recomputed`` (the same scope, the allowed set recomputed per question), ``scoped_ordered`` (the
    cached scope and its :func:`retrieval.scoped.scope_order`: what ``flows.search`` serves), each question once per
    round in rotating order after a warm-up pass; ``scope_step``: the request's scope and allowed set alone,
    cached and recomputed; ``allowed``: the mean size of the allowed set. ``reuse_vectors``: each question's query
    vector computed once (in the warm-up) and reused, so the timings are the search without the query encoder
    (on a shared machine the encoder's ~30 ms varies by more than the whole filter costs)."""
    from pathlib import Path

    from retrieval.bundle import load_bundle
    from retrieval.policy_records import POLICY_PART
    from retrieval.scoped import request_scope, scope_order, scoped_docs

    bundle = load_bundle(Path(data_dir) / "index")
    records = bundle.load(POLICY_PART)
    if reuse_vectors:
        encoder, vectors = bundle.retriever.dense.encoder, {}
        encode = encoder.encode_queries

        def encode_once(texts):
            key = tuple(texts)
            if key not in vectors:
                vectors[key] = encode(list(texts))
            return vectors[key]

        encoder.encode_queries = encode_once  # this bundle's encoder only
    plain = list(records.values())
    titles = dict(zip(bundle.texts["doc_id"].astype(str), bundle.texts["title"].fillna("")))
    qs = [(f"{r['jurisdiction_name']} {titles.get(d, '')[:24]}", r["jurisdiction_code"]) for d, r in records.items()
          if r.get("jurisdiction_code") not in (None, D.NATIONAL) and titles.get(d)][:limit]

    def step_cached(q, code):
        return scoped_docs(bundle, request_scope(q, {"region": code}, infer=False))[1]

    def order_of(q, code):
        return scope_order(bundle, request_scope(q, {"region": code}, infer=False))

    def step_recomputed(q, code):
        scope = request_scope(q, {"region": code}, infer=False)
        return allowed_docs(scope, plain, keep_unknown_place=scope.inferred)

    systems = {"scope_step_cached": step_cached, "scope_step_recomputed": step_recomputed}
    for mode in modes:
        systems[f"{mode}_unscoped"] = lambda q, code, mode=mode: bundle.pipeline.search(q, k, mode)
        systems[f"{mode}_scoped"] = lambda q, code, mode=mode: bundle.pipeline.search(
            q, k, mode, docs=step_cached(q, code))
        systems[f"{mode}_scoped_recomputed"] = lambda q, code, mode=mode: bundle.pipeline.search(
            q, k, mode, docs=step_recomputed(q, code))
        systems[f"{mode}_scoped_ordered"] = lambda q, code, mode=mode: bundle.pipeline.search(
            q, k, mode, docs=step_cached(q, code), order=order_of(q, code))
    for q, code in qs:  # warm-up: the encoder, the parts, every scope's allowed set; and the same sets
        assert step_cached(q, code) == step_recomputed(q, code)
        for f in systems.values():
            f(q, code)
    timed: dict[str, list[float]] = {m: [] for m in systems}
    names = list(systems)
    for r in range(rounds):
        for n, (q, code) in enumerate(qs):
            shift = (r + n) % len(names)
            for m in names[shift:] + names[:shift]:
                t = time.perf_counter()
                systems[m](q, code)
                timed[m].append(time.perf_counter() - t)
    sizes = [len(step_cached(q, c)) for q, c in qs]
    return {"data_dir": str(data_dir), "version": bundle.version, "docs": len(records),
            "chunks": int(len(bundle.retriever.chunks)), "questions": len(qs), "rounds": rounds, "k": k,
            "query_vectors_reused": reuse_vectors,
            "allowed": round(float(np.mean(sizes)), 1) if sizes else 0,
            "ms": {m: _ms(v) for m, v in timed.items()}, "examples": [q for q, _ in qs[:3]]}


def main(argv: list[str] | None = None) -> int:
    """CLI: prints the figures as JSON (and writes them to ``--out``)."""
    p = argparse.ArgumentParser(prog="python -m bench.scope_bench")
    p.add_argument("--corpus", default="/work/shared/corpora/lawrefbook.jsonl.gz")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--max-questions", type=int, default=300)
    p.add_argument("--sample", type=int, default=None, help="index only this many docs (all gold docs kept)")
    p.add_argument("--data-dir", default=None, help="measure the serving search over this data dir's version")
    p.add_argument("--rounds", type=int, default=5, help="with --data-dir: timed passes over the questions")
    p.add_argument("--modes", default="sparse,hybrid", help="with --data-dir: search modes timed (comma-separated)")
    p.add_argument("--reuse-query-vectors", action="store_true",
                   help="with --data-dir: encode each question once, time the search without the encoder")
    p.add_argument("--write-questions", default=None, help="write the questions for flows.search --questions")
    p.add_argument("--score", default=None, help="score flows.search --questions --json output for the questions")
    p.add_argument("--out", default=None)
    a = p.parse_args(argv)
    if a.write_questions or a.score:
        qs = questions(load(a.corpus), a.seed, a.max_questions)
        if a.write_questions:
            with open(a.write_questions, "w", encoding="utf-8") as f:
                f.writelines(json.dumps({"qid": q["qid"], "question": q["question"]}, ensure_ascii=False) + "\n"
                             for q in qs)
            return 0
        with open(a.score, encoding="utf-8") as f:
            got = score_results([json.loads(line) for line in f if line.strip()], qs)
        print(json.dumps(got, ensure_ascii=False, indent=1))
        return 0
    got = (serving(a.data_dir, a.rounds, modes=tuple(a.modes.split(",")), reuse_vectors=a.reuse_query_vectors)
           if a.data_dir else run(a.corpus, a.seed, a.max_questions, a.sample))
    out = json.dumps(got, ensure_ascii=False, indent=1)
    if a.out:
        with open(a.out, "w", encoding="utf-8") as f:
            f.write(out)
    print(out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
