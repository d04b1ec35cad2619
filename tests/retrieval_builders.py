"""Small real inputs for the retrieval tests: a policy-like corpus table and tiny encoder checkpoints
(PolicyBERT and plain BERT) saved in HF format, randomly initialised with a given seed."""
from __future__ import annotations

from pathlib import Path

import pandas as pd

TOPICS = [
    ("关于构建数据基础制度更好发挥数据要素作用的意见", "数据要素", "数据产权制度、数据要素流通和交易制度、数据要素收益分配制度"),
    ("关于加快建设全国统一大市场的意见", "统一大市场", "市场准入规则、公平竞争审查制度、商品和服务市场高水平统一"),
    ("关于进一步优化营商环境降低市场主体制度性交易成本的意见", "营商环境", "涉企收费清理、政务服务标准化、审批事项精简"),
    ("关于推动职业教育高质量发展的意见", "职业教育", "产教融合、校企合作、职业院校办学条件和技能人才培养"),
    ("关于加强生态环境保护坚决打好污染防治攻坚战的意见", "生态环境", "大气污染治理、水污染防治、土壤污染修复和生态保护红线"),
    ("关于促进养老托育服务健康发展的意见", "养老托育", "养老服务体系、普惠托育服务、医养结合和社区居家养老"),
    ("关于深化医药卫生体制改革的意见", "医药卫生", "公立医院改革、药品集中采购、医疗保障制度和基层医疗卫生"),
    ("关于实施乡村振兴战略的意见", "乡村振兴", "农业农村现代化、耕地保护、农村人居环境整治和农民增收"),
]


def policy_docs(edit: int | None = None) -> pd.DataFrame:
    """``documents_clean`` rows (doc_id, text, title, source, url, citation, n_chars) of 8 policy-like
    documents, each ~20 sentences about its own topic; ``edit`` changes one sentence of that document."""
    rows = []
    for i, (title, topic, detail) in enumerate(TOPICS):
        sents = [f"为推进{topic}工作，现就{detail}提出如下意见。"]
        sents += [f"第{j}项，围绕{topic}完善{detail.split('、')[j % 3]}的具体措施并抓好落实。" for j in range(1, 20)]
        if edit == i:
            sents[10] = f"第十项，{topic}相关部门要建立定期评估和督促检查机制。"
        text = "".join(sents)
        rows.append({"doc_id": f"d{i}", "text": text, "title": title, "source": "国务院", "url": None,
                     "citation": None, "n_chars": len(text)})
    return pd.DataFrame(rows)


def write_clean(docs: pd.DataFrame, out_dir: Path) -> Path:
    """Write ``docs`` as a ``documents_clean`` table; returns the folder."""
    from storage import write_table

    write_table(docs, out_dir, name="documents_clean")
    return out_dir


def save_tiny_policybert(out_dir: Path, seed: int, hidden: int = 32) -> Path:
    """A randomly initialised PolicyBERT (hidden ``hidden``, 2 layers) saved with its char tokenizer and
    word vocabulary, as the fine-tuning stage saves checkpoints."""
    import torch

    from model import PolicyBertConfig, PolicyBertModel
    from model.features import CharEncoder, build_char_vocab, save_char_tokenizer

    texts = policy_docs()["text"].tolist() + policy_docs()["title"].tolist() + ["什么是制度体系？"]
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    tok = save_char_tokenizer(build_char_vocab(texts), out_dir)
    words = ["数据", "要素", "市场", "制度", "环境", "教育", "养老", "乡村", "医疗", "改革"]
    (out_dir / "word_vocab.txt").write_text("\n".join(words) + "\n", encoding="utf-8")
    torch.manual_seed(seed)
    cfg = PolicyBertConfig(vocab_size=CharEncoder(tok.get_vocab()).size, hidden_size=hidden, num_hidden_layers=2,
                           num_attention_heads=2, intermediate_size=2 * hidden, max_position_embeddings=128,
                           num_word_layers=1, word_vocab_size=len(words) + 1, max_words=8)
    PolicyBertModel(cfg).save_pretrained(out_dir)
    return out_dir


def save_tiny_bert(out_dir: Path, seed: int = 0) -> Path:
    """A randomly initialised plain ``BertModel`` (hidden 32) with a char ``vocab.txt``: the shape of a
    local sentence-embedding checkpoint such as bge-base-zh-v1.5."""
    import torch
    from transformers import BertConfig, BertModel

    from model.features import build_char_vocab, save_char_tokenizer

    texts = policy_docs()["text"].tolist() + policy_docs()["title"].tolist()
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    tok = save_char_tokenizer(build_char_vocab(texts), out_dir)
    torch.manual_seed(seed)
    cfg = BertConfig(vocab_size=len(tok.get_vocab()), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                     intermediate_size=64, max_position_embeddings=128)
    BertModel(cfg).save_pretrained(out_dir)
    return out_dir


def policy_data_dir(d: Path, docs: pd.DataFrame, max_chars: int = 120, overlap: int = 30) -> tuple[Path, dict]:
    """A data dir ``d`` whose index (v1) holds the texts and the policy records part computed from
    ``documents_clean`` (no policy stage ran), over a tiny PolicyBERT (seed 5); returns (``d``, the index stage's
    result)."""
    from retrieval.chunks import ChunkConfig
    from retrieval.policy_records import POLICY_PART
    from retrieval.serving_parts import fitted_parts
    from retrieval.sparse import make_tokenizer
    from retrieval.stages import index_stage

    clean = write_clean(docs, d / "documents_clean")
    fitted = fitted_parts((POLICY_PART,), {"clean_dir": clean})
    res = index_stage(clean, save_tiny_policybert(d.parent / "ckpt", seed=5), d / "index",
                      ChunkConfig(max_chars=max_chars, overlap=overlap), tokenizer=make_tokenizer("auto"),
                      fitted_parts=fitted)
    return d, res
