"""PolicyBERT (thesis §3.1, SPEC §6): a BERT char encoder fused with a word encoder.

Inputs per example: char ids ``input_ids`` (batch, seq_len), ``word_ids`` (batch, max_words) of the
vocabulary words found in the text (0 = padding) and the 0/1 matching matrix
``matching_matrix`` (batch, max_words, seq_len), M[q, p] = 1 iff char p lies in word q.

Per char layer l: the char states go through BERT layer l; for l < L_w the word states go through
word layer l, are projected onto chars ``P = Mᵀ·W`` (batch, seq_len, hidden) and fused by
``config.fusion``: none ``C + P`` (ZEN), gate ``C + sigmoid(Linear([C; P])) ⊙ P`` (bias 5.0), attn
``LayerNorm(C + Dropout(MHA(q=C, k=P, v=P)))`` with padding masked. For l >= L_w the last word states
are added as in ZEN (``config.word_add_above``; False stops fusing after layer L_w). ``config.fusion_start = k``
shifts the word side up: word layer j runs beside char layer k + j, and char layers below k see no words.

``config.fusion_init="identity"`` (a pretrained body, SPEC §6 "On a pretrained body"): every fused layer l
computes ``C + s_l ⊙ Δ_l`` where ``Δ_l`` is what its fusion adds to C (none/above: ``P``; gate:
``sigmoid(Linear([C; P])) ⊙ P``; attn: ``LayerNorm(C + Dropout(MHA)) − C``) and ``s_l`` (hidden,) is a learned
scale initialised at 0 (ReZero, Bachlechner et al. 2020; ControlNet's zero convolutions, Zhang et al. 2023):
at step 0 the output is exactly the body's, and training moves ``s_l`` (its gradient is ``Σ ∂L/∂C ⊙ Δ_l``).
``"thesis"`` (default) is SPEC §6 as written.
"""
from __future__ import annotations

import torch
from torch import nn
from transformers import PreTrainedModel
from transformers import initialization as init
from transformers.modeling_outputs import (
    BaseModelOutputWithPooling,
    SequenceClassifierOutput,
    TokenClassifierOutput,
)
from transformers.models.bert.modeling_bert import (
    BertEmbeddings,
    BertForPreTrainingOutput,
    BertLayer,
    BertPooler,
    BertPreTrainingHeads,
)

from model.configuration import PolicyBertConfig


def additive_mask(mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """(batch, len) 0/1 mask -> (batch, 1, 1, len) additive mask (0 keep, dtype min drop)."""
    return (1.0 - mask[:, None, None, :].to(dtype)) * torch.finfo(dtype).min


class WordEmbeddings(nn.Module):
    """Word embeddings + token type embeddings (no positions), LayerNorm, dropout.

    Forward: word_ids (batch, max_words), token_type_ids (batch, max_words) -> (batch, max_words, hidden).
    """

    def __init__(self, config: PolicyBertConfig):
        super().__init__()
        self.word_embeddings = nn.Embedding(config.word_vocab_size, config.hidden_size, padding_idx=0)
        self.token_type_embeddings = nn.Embedding(config.type_vocab_size, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(self, word_ids: torch.Tensor, token_type_ids: torch.Tensor) -> torch.Tensor:
        return self.dropout(self.LayerNorm(self.word_embeddings(word_ids) + self.token_type_embeddings(token_type_ids)))


class GateLinear(nn.Linear):
    """The gate's ``Linear(2 * hidden, hidden)``: its own type so that weight init can find it (transformers
    never calls ``_init_weights`` on a custom module without direct parameters, such as GateFusion)."""


class GateFusion(nn.Module):
    """``C + sigmoid(Linear([C; P])) ⊙ P``; the Linear's bias starts at ``config.gate_bias_init`` (5.0)."""

    def __init__(self, config: PolicyBertConfig):
        super().__init__()
        self.gate = GateLinear(2 * config.hidden_size, config.hidden_size)

    def delta(self, chars: torch.Tensor, words: torch.Tensor, char_mask: torch.Tensor) -> torch.Tensor:
        """What the gate adds to the char states: ``sigmoid(Linear([C; P])) ⊙ P`` (batch, seq_len, hidden)."""
        return torch.sigmoid(self.gate(torch.cat([chars, words], dim=-1))) * words

    def forward(self, chars: torch.Tensor, words: torch.Tensor, char_mask: torch.Tensor) -> torch.Tensor:
        return chars + self.delta(chars, words, char_mask)


class AttnFusion(nn.Module):
    """``LayerNorm(C + Dropout(MHA(q=C, k=P, v=P)))``, padded char positions masked as keys."""

    def __init__(self, config: PolicyBertConfig):
        super().__init__()
        self.attn = nn.MultiheadAttention(config.hidden_size, config.num_attention_heads,
                                          dropout=config.attention_probs_dropout_prob, batch_first=True)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)

    def forward(self, chars: torch.Tensor, words: torch.Tensor, char_mask: torch.Tensor) -> torch.Tensor:
        out, _ = self.attn(chars, words, words, key_padding_mask=char_mask == 0, need_weights=False)
        return self.LayerNorm(chars + self.dropout(out))

    def delta(self, chars: torch.Tensor, words: torch.Tensor, char_mask: torch.Tensor) -> torch.Tensor:
        """``forward − C``: the move the attention fusion makes (batch, seq_len, hidden)."""
        return self.forward(chars, words, char_mask) - chars


class AddFusion(nn.Module):
    """ZEN: ``C + P``."""

    def delta(self, chars: torch.Tensor, words: torch.Tensor, char_mask: torch.Tensor) -> torch.Tensor:
        """``P``."""
        return words

    def forward(self, chars: torch.Tensor, words: torch.Tensor, char_mask: torch.Tensor) -> torch.Tensor:
        return chars + words


class WordScale(nn.Module):
    """A per-channel scale ``weight`` (hidden,), initialised at 0 (identity fusion): ``x ⊙ weight``."""

    def __init__(self, config: PolicyBertConfig):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(config.hidden_size))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.weight


_FUSION = {"none": lambda c: AddFusion(), "gate": GateFusion, "attn": AttnFusion}


class PolicyBertEncoder(nn.Module):
    """Interleaved char layers, word layers and fusion modules (see module docstring)."""

    def __init__(self, config: PolicyBertConfig):
        super().__init__()
        self.layer = nn.ModuleList([BertLayer(config, layer_idx=i) for i in range(config.num_hidden_layers)])
        self.word_layers = nn.ModuleList([BertLayer(config, layer_idx=i) for i in range(config.num_word_layers)])
        self.fusion = nn.ModuleList([_FUSION[config.fusion](config) for _ in range(config.num_word_layers)])
        self.add_above = getattr(config, "word_add_above", True)
        self.fusion_start = getattr(config, "fusion_start", 0)
        fused = 0 if not config.num_word_layers else (
            config.num_hidden_layers - self.fusion_start if self.add_above else config.num_word_layers)
        identity = getattr(config, "fusion_init", "thesis") == "identity"
        self.fusion_scale = nn.ModuleList([WordScale(config) for _ in range(fused)]) if identity else None

    def forward(self, chars: torch.Tensor, char_mask: torch.Tensor, words: torch.Tensor | None,
                word_mask: torch.Tensor | None, matching_matrix: torch.Tensor | None) -> torch.Tensor:
        """chars (batch, seq_len, hidden), words (batch, max_words, hidden), masks 0/1 -> (batch, seq_len, hidden).

        Char layer i meets word step ``j = i - fusion_start`` (none while j < 0); a caller that removed the bottom
        char layers (:mod:`model.benchmark.frozen`) lowers ``fusion_start`` by as many."""
        char_add = additive_mask(char_mask, chars.dtype)
        use_words = words is not None and len(self.word_layers) > 0
        if use_words:
            word_add = additive_mask(word_mask, words.dtype)
            m_t = matching_matrix.transpose(1, 2).to(chars.dtype)  # (batch, seq_len, max_words)
        for i, layer in enumerate(self.layer):
            j = i - self.fusion_start
            if use_words and 0 <= j < len(self.word_layers):
                words = self.word_layers[j](words, word_add)
            chars = layer(chars, char_add)
            if use_words and j >= 0 and (j < len(self.fusion) or self.add_above):
                projected = torch.bmm(m_t, words)
                if self.fusion_scale is not None:  # identity init: C + s ⊙ Δ, s = 0 at step 0
                    delta = self.fusion[j].delta(chars, projected, char_mask) if j < len(self.fusion) else projected
                    chars = chars + self.fusion_scale[j](delta)
                else:
                    chars = self.fusion[j](chars, projected, char_mask) if j < len(self.fusion) else chars + projected
        return chars


class PolicyBertPreTrainedModel(PreTrainedModel):
    """Base class: config class, weight init (gate bias kept at ``gate_bias_init`` after init),
    and a guard that a checkpoint never loads into a model of another fusion."""

    config_class = PolicyBertConfig
    config: PolicyBertConfig
    base_model_prefix = "bert"
    supports_gradient_checkpointing = False
    _supports_sdpa = True

    @torch.no_grad()
    def _init_weights(self, module: nn.Module) -> None:
        super()._init_weights(module)
        if isinstance(module, BertEmbeddings):
            init.copy_(module.position_ids, torch.arange(module.position_ids.shape[-1]).expand((1, -1)))
            init.zeros_(module.token_type_ids)
        elif isinstance(module, BertPreTrainingHeads):
            init.zeros_(module.predictions.bias)
        elif isinstance(module, GateLinear):
            # on every path that initialises the gate: a fresh model, and from_pretrained filling in a gate
            # missing from the checkpoint (a loaded gate is marked initialised and never gets here). A plain
            # fill_, because the `init` helpers skip a parameter the Linear init above already marked.
            module.bias.fill_(self.config.gate_bias_init)
        elif isinstance(module, WordScale):
            init.zeros_(module.weight)  # identity fusion: a scale missing from a checkpoint starts at 0 too

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path, *args, **kwargs):
        """As :meth:`PreTrainedModel.from_pretrained`, but a ``fusion`` or ``fusion_init`` (keyword or config)
        other than the checkpoint's raises ValueError instead of loading with fresh fusion weights."""
        for key in ("fusion", "fusion_init"):
            wanted = kwargs.get(key)
            if isinstance(kwargs.get("config"), PolicyBertConfig):
                wanted = getattr(kwargs["config"], key)
            if wanted is not None:
                saved = getattr(PolicyBertConfig.from_pretrained(pretrained_model_name_or_path), key)
                if saved != wanted:
                    raise ValueError(f"checkpoint {pretrained_model_name_or_path} was trained with {key}="
                                     f"{saved!r}; refusing to load it as {key}={wanted!r}")
        return super().from_pretrained(pretrained_model_name_or_path, *args, **kwargs)


class PolicyBertModel(PolicyBertPreTrainedModel):
    """The PolicyBERT encoder with pooler. Output ``last_hidden_state`` (batch, seq_len, hidden),
    ``pooler_output`` (batch, hidden)."""

    def __init__(self, config: PolicyBertConfig, add_pooling_layer: bool = True):
        super().__init__(config)
        self.embeddings = BertEmbeddings(config)
        self.word_embeddings = WordEmbeddings(config) if config.num_word_layers > 0 else None
        self.encoder = PolicyBertEncoder(config)
        self.pooler = BertPooler(config) if add_pooling_layer else None
        self.post_init()

    def get_input_embeddings(self) -> nn.Embedding:
        return self.embeddings.word_embeddings

    def set_input_embeddings(self, value: nn.Embedding) -> None:
        self.embeddings.word_embeddings = value

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                token_type_ids: torch.Tensor | None = None, word_ids: torch.Tensor | None = None,
                matching_matrix: torch.Tensor | None = None, **kwargs) -> BaseModelOutputWithPooling:
        """Encode a batch.

        Args:
            input_ids: (batch, seq_len) char ids; attention_mask: (batch, seq_len) 0/1 (default all 1);
            token_type_ids: (batch, seq_len) segment ids (default 0);
            word_ids: (batch, max_words) word ids, 0 = padding (None: no word path);
            matching_matrix: (batch, max_words, seq_len) 0/1, required with word_ids.

        Raises:
            ValueError: word_ids without matching_matrix or with mismatched shapes.
        """
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
        chars = self.embeddings(input_ids=input_ids, token_type_ids=token_type_ids)
        words = word_mask = None
        if word_ids is not None and self.word_embeddings is not None:
            if matching_matrix is None or matching_matrix.shape != (*word_ids.shape, input_ids.shape[1]):
                raise ValueError("matching_matrix must have shape (batch, max_words, seq_len) matching "
                                 f"word_ids {tuple(word_ids.shape)} and input_ids {tuple(input_ids.shape)}")
            word_tt = token_type_ids.gather(1, matching_matrix.argmax(-1))
            words = self.word_embeddings(word_ids, word_tt)
            word_mask = (word_ids != 0).long()
        hidden = self.encoder(chars, attention_mask, words, word_mask, matching_matrix)
        pooled = self.pooler(hidden) if self.pooler is not None else None
        return BaseModelOutputWithPooling(last_hidden_state=hidden, pooler_output=pooled)


class PolicyBertForPreTraining(PolicyBertPreTrainedModel):
    """PolicyBERT with MLM (tied to char embeddings) and NSP heads; loss = MLM + NSP.

    ``labels`` (batch, seq_len) with -100 for unmasked chars; ``next_sentence_label`` (batch,)
    with 0 = B follows A, 1 = B is random. Outputs ``prediction_logits`` (batch, seq_len, vocab)
    without ``labels``, and (n_masked, vocab) for the positions ``labels != -100`` in row-major
    order with them (the vocabulary projection is the largest matmul of a small model: computing it
    at the 15 % masked positions only saves most of it); ``seq_relationship_logits`` (batch, 2).
    """

    _tied_weights_keys = {
        "cls.predictions.decoder.weight": "bert.embeddings.word_embeddings.weight",
        "cls.predictions.decoder.bias": "cls.predictions.bias",
    }

    def __init__(self, config: PolicyBertConfig):
        super().__init__(config)
        self.bert = PolicyBertModel(config)
        self.cls = BertPreTrainingHeads(config)
        self.post_init()
        if config.tie_word_embeddings:  # tie explicitly: the generic tying was seen not to apply in some test orders
            self.cls.predictions.decoder.weight = self.bert.embeddings.word_embeddings.weight

    def get_output_embeddings(self) -> nn.Linear:
        return self.cls.predictions.decoder

    def set_output_embeddings(self, new_embeddings: nn.Linear) -> None:
        self.cls.predictions.decoder = new_embeddings
        self.cls.predictions.bias = new_embeddings.bias

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                token_type_ids: torch.Tensor | None = None, word_ids: torch.Tensor | None = None,
                matching_matrix: torch.Tensor | None = None, labels: torch.Tensor | None = None,
                next_sentence_label: torch.Tensor | None = None, **kwargs) -> BertForPreTrainingOutput:
        out = self.bert(input_ids, attention_mask, token_type_ids, word_ids, matching_matrix)
        hidden = out.last_hidden_state
        if labels is not None:  # score the masked positions only: (n_masked, vocab) instead of (batch, seq_len, vocab)
            sel = labels != -100
            hidden, labels = hidden[sel], labels[sel]
        mlm_logits = self.cls.predictions(hidden)
        nsp_logits = self.cls.seq_relationship(out.pooler_output)
        loss = None
        if labels is not None and next_sentence_label is not None:
            ce = nn.CrossEntropyLoss()
            mlm = ce(mlm_logits.float(), labels) if labels.numel() else mlm_logits.sum() * 0.0
            loss = mlm + ce(nsp_logits.view(-1, 2).float(), next_sentence_label.view(-1))
        return BertForPreTrainingOutput(loss=loss, prediction_logits=mlm_logits,
                                        seq_relationship_logits=nsp_logits)


class PolicyBertForSequenceClassification(PolicyBertPreTrainedModel):
    """``[CLS]`` pooled -> Dropout -> Linear(num_labels) (SPEC §6, §10: PolicySM pairs, and n-label DC/SA/SPM);
    cross-entropy loss with ``labels`` (batch,) in ``[0, num_labels)``. Output ``logits`` (batch, num_labels)."""

    def __init__(self, config: PolicyBertConfig):
        super().__init__(config)
        self.num_labels = config.num_labels
        self.bert = PolicyBertModel(config)
        p = config.classifier_dropout if config.classifier_dropout is not None else config.hidden_dropout_prob
        self.dropout = nn.Dropout(p)
        self.classifier = nn.Linear(config.hidden_size, config.num_labels)
        self.post_init()

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                token_type_ids: torch.Tensor | None = None, word_ids: torch.Tensor | None = None,
                matching_matrix: torch.Tensor | None = None, labels: torch.Tensor | None = None,
                **kwargs) -> SequenceClassifierOutput:
        out = self.bert(input_ids, attention_mask, token_type_ids, word_ids, matching_matrix)
        logits = self.classifier(self.dropout(out.pooler_output))
        loss = nn.CrossEntropyLoss()(logits, labels) if labels is not None else None
        return SequenceClassifierOutput(loss=loss, logits=logits)


class PolicyBertForTokenClassification(PolicyBertPreTrainedModel):
    """A label per character (SPEC §10: CWS BMES tags, NER BIO tags; word-level tasks such as POS label each
    word at its first character and give the other characters ``-100``).

    Char states (batch, seq_len, hidden) -> Dropout -> Linear(num_labels) -> ``logits`` (batch, seq_len,
    num_labels); cross-entropy loss over the positions with ``labels`` (batch, seq_len) != -100. No pooler.
    """

    def __init__(self, config: PolicyBertConfig):
        super().__init__(config)
        self.num_labels = config.num_labels
        self.bert = PolicyBertModel(config, add_pooling_layer=False)
        p = config.classifier_dropout if config.classifier_dropout is not None else config.hidden_dropout_prob
        self.dropout = nn.Dropout(p)
        self.classifier = nn.Linear(config.hidden_size, config.num_labels)
        self.post_init()

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                token_type_ids: torch.Tensor | None = None, word_ids: torch.Tensor | None = None,
                matching_matrix: torch.Tensor | None = None, labels: torch.Tensor | None = None,
                **kwargs) -> TokenClassifierOutput:
        out = self.bert(input_ids, attention_mask, token_type_ids, word_ids, matching_matrix)
        logits = self.classifier(self.dropout(out.last_hidden_state))
        loss = None
        if labels is not None:
            loss = nn.CrossEntropyLoss(ignore_index=-100)(logits.view(-1, self.num_labels).float(), labels.view(-1))
        return TokenClassifierOutput(loss=loss, logits=logits)
