"""``PolicyBertConfig``: a BERT config plus the char-word fusion settings (SPEC §6)."""
from __future__ import annotations

from transformers import PretrainedConfig

FUSIONS = ("none", "gate", "attn")
FUSION_INITS = ("thesis", "identity")
TOKEN_STREAMS = ("chars", "pieces")


def _check(fusion: str, fusion_init: str, token_stream: str, num_hidden_layers: int, num_word_layers: int,
           fusion_start: int) -> None:
    """Raise ValueError for a setting :class:`PolicyBertConfig` does not know or a layer count out of range."""
    if fusion not in FUSIONS:
        raise ValueError(f"fusion must be one of {FUSIONS}, got {fusion!r}")
    if fusion_init not in FUSION_INITS:
        raise ValueError(f"fusion_init must be one of {FUSION_INITS}, got {fusion_init!r}")
    if token_stream not in TOKEN_STREAMS:
        raise ValueError(f"token_stream must be one of {TOKEN_STREAMS}, got {token_stream!r}")
    if not 0 <= num_word_layers <= num_hidden_layers:
        raise ValueError(f"num_word_layers={num_word_layers} must be in [0, {num_hidden_layers}]")
    if not 0 <= fusion_start <= num_hidden_layers - num_word_layers:
        raise ValueError(f"fusion_start={fusion_start} must be in [0, {num_hidden_layers - num_word_layers}] "
                         f"({num_hidden_layers} char layers, {num_word_layers} word layers)")


class PolicyBertConfig(PretrainedConfig):
    """Configuration of PolicyBERT (thesis §3.1).

    The BERT fields (``vocab_size`` … ``layer_norm_eps``) describe the char encoder; the word
    encoder shares ``hidden_size``/heads/intermediate size.

    Args:
        fusion: ``"none"`` (ZEN: add), ``"gate"`` (sigmoid gate, bias ``gate_bias_init``) or
            ``"attn"`` (multi-head attention from chars to char-aligned word states).
        num_word_layers: BERT layers of the word encoder (L_w <= num_hidden_layers; 0 = plain BERT).
        word_vocab_size: size of the word vocabulary incl. id 0 = padding.
        max_words: words per example (matching matrix rows).
        gate_bias_init: initial bias of the gate's Linear (5.0: the gate starts open).
        word_add_above: add the last word states to the char states at every layer >= num_word_layers, as ZEN
            does (SPEC §6; default). False fuses words only at the first num_word_layers layers, which keeps a
            pretrained char body's upper layers as they were (measured on the public benchmarks: README).
        fusion_init: ``"thesis"`` (default; from-scratch models and the thesis fidelity check): every fusion adds
            the word side at full strength as SPEC §6 writes it. ``"identity"`` (a pretrained body, SPEC §6 "On a
            pretrained body"): each fused layer gets a per-channel scale ``word_scale`` initialised at 0 and
            computes ``C + word_scale ⊙ (fusion(C, P) − C)``, so at step 0 the model outputs exactly what the body
            outputs and the word side earns its weight (ReZero, Bachlechner et al. 2020; ControlNet's zero
            convolutions, Zhang et al. 2023).
        fusion_start: the char layer the first word layer runs beside (default 0, the thesis's: words from the
            bottom up). ``k > 0`` keeps the word side out of char layers ``0..k-1``: words are fused into the
            upper layers only, e.g. above a frozen, precomputed bottom (:mod:`model.benchmark.frozen`).
        token_stream: what a position holds: ``"chars"`` (one char) or ``"pieces"`` (the body's own
            SentencePiece pieces; :mod:`model.tokens`). Recorded so a checkpoint reloads with its inputs.

    Raises:
        ValueError: unknown fusion, fusion_init or token_stream, num_word_layers outside [0, num_hidden_layers],
            or fusion_start outside [0, num_hidden_layers - num_word_layers].
    """

    model_type = "policybert"

    def __init__(self, vocab_size: int = 21128, hidden_size: int = 768, num_hidden_layers: int = 12,
                 num_attention_heads: int = 12, intermediate_size: int = 3072, hidden_act: str = "gelu",
                 hidden_dropout_prob: float = 0.1, attention_probs_dropout_prob: float = 0.1,
                 max_position_embeddings: int = 512, type_vocab_size: int = 2,
                 initializer_range: float = 0.02, layer_norm_eps: float = 1e-12, pad_token_id: int = 0,
                 fusion: str = "gate", num_word_layers: int = 6, word_vocab_size: int = 104089,
                 max_words: int = 40, gate_bias_init: float = 5.0, classifier_dropout: float | None = None,
                 word_add_above: bool = True, fusion_init: str = "thesis", token_stream: str = "chars",
                 fusion_start: int = 0, **kwargs):
        _check(fusion, fusion_init, token_stream, num_hidden_layers, num_word_layers, fusion_start)
        kwargs.setdefault("is_decoder", False)
        kwargs.setdefault("add_cross_attention", False)
        tie = kwargs.pop("tie_word_embeddings", True)
        super().__init__(pad_token_id=pad_token_id, **kwargs)
        self.vocab_size = vocab_size
        self.hidden_size = hidden_size
        self.num_hidden_layers = num_hidden_layers
        self.num_attention_heads = num_attention_heads
        self.intermediate_size = intermediate_size
        self.hidden_act = hidden_act
        self.hidden_dropout_prob = hidden_dropout_prob
        self.attention_probs_dropout_prob = attention_probs_dropout_prob
        self.max_position_embeddings = max_position_embeddings
        self.type_vocab_size = type_vocab_size
        self.initializer_range = initializer_range
        self.layer_norm_eps = layer_norm_eps
        self.fusion = fusion
        self.num_word_layers = num_word_layers
        self.word_vocab_size = word_vocab_size
        self.max_words = max_words
        self.gate_bias_init = gate_bias_init
        self.word_add_above = word_add_above
        self.fusion_init = fusion_init
        self.token_stream = token_stream
        self.fusion_start = fusion_start
        self.classifier_dropout = classifier_dropout
        self.tie_word_embeddings = tie
        self.is_decoder = kwargs["is_decoder"]
        self.add_cross_attention = kwargs["add_cross_attention"]
        if not hasattr(self, "chunk_size_feed_forward"):
            self.chunk_size_feed_forward = 0
