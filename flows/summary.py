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
        "finetune_policysm1": {"dev": fin["dev"], "test": fin["test"], "majority_test": fin["majority_test"]},
        "index": {k: idx[k] for k in ("version", "chunks", "documents", "embedded", "reused", "removed", "full_rebuild")},
        "retrieval_eval": results["retrieval_eval"]["table"],
        "ann_recall@10": {k: v for k, v in results["retrieval_eval"].items() if k.endswith("_vs_exact")},
        "sample_query": results["sample_query"],
    }


def format_summary(s: dict) -> str:
    """Human-readable multi-line rendering of :func:`build_summary`'s dict."""
    h = s["pretrain_heldout"]
    f = s["finetune_policysm1"]
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
        f"pretrain (held-out docs): MLM loss {h['mlm_loss']:.3f}, MLM acc {h['mlm_accuracy']:.3f}, "
        f"perplexity {h['perplexity']:.1f}, NSP acc {h['nsp_accuracy']:.3f}",
        f"finetune PolicySM-1: dev acc {f['dev']['accuracy']:.3f} F1 {f['dev']['f1']:.3f}; "
        f"test acc {f['test']['accuracy']:.3f} F1 {f['test']['f1']:.3f} (majority {f['majority_test']:.3f})",
        f"index {s['index']['version']}: {s['index']['chunks']} chunks from {s['index']['documents']} documents "
        f"({s['index']['embedded']} embedded, {s['index']['reused']} reused, {s['index']['removed']} removed)",
        "retrieval (title/citation -> document): "
        + "; ".join(f"{r['system']} R@1 {r['recall@1']:.2f} R@10 {r['recall@10']:.2f} MRR {r['mrr@10']:.2f}"
                    for r in s["retrieval_eval"]),
        "sample query top 3:",
    ]
    for i, hit in enumerate(s["sample_query"], 1):
        lines.append(f"  {i}. {hit['score']:.3f} {hit['title']} [{hit['source']}] {hit['url'] or ''}")
    return "\n".join(lines)
