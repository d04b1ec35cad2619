"""The end-of-run summary: collected from the stage results, printed and saved as summary.json."""
from __future__ import annotations


def build_summary(profile: str, results: dict) -> dict:
    """Pick the figures a user checks after a run from the stage results (all JSON-able)."""
    clean, vocab, ds = results["clean"], results["vocab"], results["datasets"]
    pre, fin, idx = results["pretrain"], results["finetune"], results["index"]
    return {
        "profile": profile,
        "documents_in": clean["documents_in"],
        "documents_out": clean["documents_out"],
        "rejects_by_reason": clean["rejects_by_reason"],
        "sentences": results["sentences"]["sentences"],
        "segmenter": {"backend": results["segment"]["backend"], "model_id": results["segment"]["model_id"]},
        "vocab_size": vocab["size"],
        "sentence_coverage": round(vocab["sentence_coverage"], 4),
        "pairs": {name: ds[name]["per_split_label"] for name in ("policysm1", "policysm2")},
        "probe": {name: ds[name]["probe"] for name in ("policysm1", "policysm2")},
        "pretrain_heldout": pre["heldout"],
        "pretrain_steps": (pre.get("train") or {}).get("steps"),
        "finetune_policysm1": {"dev": fin["dev"], "test": fin["test"], "majority_test": fin["majority_test"]},
        "index": {k: idx.get(k) for k in ("version", "chunks", "documents", "embedded", "reused", "removed", "full_rebuild",
                                          "index_kind", "ann_recall@10")},
        "retrieval_eval": results["retrieval_eval"]["table"],
        "ann_recall@10": {k: v for k, v in results["retrieval_eval"].items() if k.endswith("_vs_exact")},
        "sample_query": results["sample_query"],
        "sample_answer": results.get("sample_answer"),
        "crawl": crawl_summary(results["import"]),
    }


def crawl_summary(stats: dict) -> dict | None:
    """The crawl part of the summary (None after an import): the diff counts in all and per source, the
    unreachable sources and the per-source document counts."""
    if not isinstance(stats, dict) or "diff" not in stats:
        return None
    per = stats.get("per_source", {})
    return {"diff": stats["diff"]["all"], "unreachable": stats.get("unreachable", []),
            "per_source": {sid: {**counts, "documents": per.get(sid, {}).get("documents", 0),
                                 "name": per.get(sid, {}).get("name", sid)}
                           for sid, counts in stats["diff"].items() if sid != "all"}}


def format_crawl(c: dict) -> list[str]:
    """Lines for :func:`crawl_summary`'s dict: the totals, then one line per source that changed or failed."""
    d = c["diff"]
    lines = ["crawl diff: " + ", ".join(f"{k} {v}" for k, v in d.items())
             + (f"; unreachable sources: {', '.join(c['unreachable'])}" if c["unreachable"] else "")]
    for sid, v in c["per_source"].items():
        if v["new"] or v["changed"] or v["gone"] or sid in c["unreachable"]:
            lines.append(f"  {v['name']} ({sid}): new {v['new']}, changed {v['changed']}, unchanged {v['unchanged']}, "
                         f"gone {v['gone']}, kept {v['kept']}; {v['documents']} documents")
    return lines


def _f(value, spec: str = ".3f") -> str:
    """``value`` formatted, or ``n/a`` when a tiny corpus left it undefined (no held-out documents, an empty split)."""
    return "n/a" if value is None else format(value, spec)


def format_summary(s: dict) -> str:
    """Human-readable multi-line rendering of :func:`build_summary`'s dict (figures a tiny corpus leaves
    undefined print as ``n/a``)."""
    h = s["pretrain_heldout"] or {}
    f = s["finetune_policysm1"]
    dev, test = f.get("dev") or {}, f.get("test") or {}
    lines = [
        f"== policy-pipeline summary (profile {s['profile']}) ==",
        f"documents: {s['documents_in']} in -> {s['documents_out']} out; rejects {s['rejects_by_reason']}",
        f"sentences: {s['sentences']}; segmenter {s['segmenter']['backend']} ({s['segmenter']['model_id']})",
        f"vocabulary: {s['vocab_size']} words; sentence coverage {s['sentence_coverage']:.2%}",
    ]
    for name, per in s["pairs"].items():
        p = s["probe"][name]
        probe = (f"probe {p['accuracy']:.3f} vs majority {p['majority']:.3f}" if p["accuracy"] is not None else "probe n/a")
        lines.append(f"{name}: " + "; ".join(f"{sp} pos {v.get('1', 0)} neg {v.get('0', 0)}" for sp, v in per.items())
                     + f"; {probe}")
    lines += [
        "pretrain: no MLM + NSP steps (domain_adapt=false): PolicyBERT as initialised from its body"
        if s.get("pretrain_steps") == 0 else
        f"pretrain (held-out docs): MLM loss {_f(h.get('mlm_loss'))}, MLM acc {_f(h.get('mlm_accuracy'))}, "
        f"perplexity {_f(h.get('perplexity'), '.1f')}, NSP acc {_f(h.get('nsp_accuracy'))}",
        f"finetune PolicySM-1: dev acc {_f(dev.get('accuracy'))} F1 {_f(dev.get('f1'))}; "
        f"test acc {_f(test.get('accuracy'))} F1 {_f(test.get('f1'))} (majority {_f(f.get('majority_test'))})",
        f"index {s['index']['version']}: {s['index']['chunks']} chunks from {s['index']['documents']} documents "
        f"({s['index']['embedded']} embedded, {s['index']['reused']} reused, {s['index']['removed']} removed); "
        f"{s['index'].get('index_kind') or 'flat'} index"
        + (f", recall@10 vs exact {s['index']['ann_recall@10']:.3f}" if s["index"].get("ann_recall@10") is not None else ""),
        "retrieval (title/citation -> document): "
        + "; ".join(f"{r['system']} R@1 {r['recall@1']:.2f} R@10 {r['recall@10']:.2f} MRR {r['mrr@10']:.2f}"
                    for r in s["retrieval_eval"]),
    ]
    if s.get("crawl"):
        lines += format_crawl(s["crawl"])
    lines += [
        "sample query top 3:",
    ]
    for i, hit in enumerate(s["sample_query"], 1):
        lines.append(f"  {i}. {hit['score']:.3f} {hit['title']} [{hit['source']}] {hit['url'] or ''}")
    lines += _answer_lines(s.get("sample_answer") or {})
    return "\n".join(lines)


def _answer_lines(a: dict) -> list[str]:
    """The sample answer as ``flows.ask`` shows it: below the version's threshold it is no answer, with the
    closest span beside it (a summary must not present what a user would be refused as an answer)."""
    if not a:
        return []
    if not a.get("text"):
        return [f"sample answer: {a.get('note', 'n/a')}"]
    span = f"{a['text'][:160]} ({a['score']:.2f}; {a['title']})"
    if a.get("found", True):
        return [f"sample answer: {span}"]
    from flows.ask import refusal

    return [f"sample answer: {refusal(a['score'], a['threshold'])}; closest: {span}"]


def sample_answer(data_dir: str, question: str) -> dict:
    """The answer stage's top answer to ``question`` (text, score, title, url, start, end), or ``{"note"}``
    saying why there is none (the index version has no answer scorer: why; no answer found)."""
    from answers import Answerer, ScorerMissingError

    try:
        res = Answerer(data_dir).answer(question, 1)
    except ScorerMissingError as exc:
        return {"note": f"n/a ({exc})"}
    except (FileNotFoundError, ValueError) as exc:  # an unreadable part or index: said, not raised
        return {"note": f"n/a ({exc})"}
    if not res["answers"]:
        return {"note": "no answer found"}
    a = res["answers"][0]
    return {**{k: a[k] for k in ("text", "score", "title", "url", "start", "end")}, "found": res["found"],
            "threshold": res["threshold"]}
