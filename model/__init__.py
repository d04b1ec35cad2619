"""PolicyBERT model, features and training (SPEC §6). Plain library: never imports prefect.

Importing this package registers ``policybert`` with the transformers Auto classes, so a saved
checkpoint reloads with ``AutoModel.from_pretrained(dir)``.
"""
from transformers import (
    AutoConfig,
    AutoModel,
    AutoModelForPreTraining,
    AutoModelForSequenceClassification,
    AutoModelForTokenClassification,
)

from model.configuration import FUSIONS, PolicyBertConfig
from model.modeling import (
    PolicyBertForPreTraining,
    PolicyBertForSequenceClassification,
    PolicyBertForTokenClassification,
    PolicyBertModel,
    PolicyBertPreTrainedModel,
)

AutoConfig.register("policybert", PolicyBertConfig, exist_ok=True)
AutoModel.register(PolicyBertConfig, PolicyBertModel, exist_ok=True)
AutoModelForPreTraining.register(PolicyBertConfig, PolicyBertForPreTraining, exist_ok=True)
AutoModelForSequenceClassification.register(PolicyBertConfig, PolicyBertForSequenceClassification, exist_ok=True)
AutoModelForTokenClassification.register(PolicyBertConfig, PolicyBertForTokenClassification, exist_ok=True)

__all__ = ["FUSIONS", "PolicyBertConfig", "PolicyBertForPreTraining", "PolicyBertForSequenceClassification",
           "PolicyBertForTokenClassification", "PolicyBertModel", "PolicyBertPreTrainedModel"]
