"""The thesis's six public benchmarks (SPEC §10, thesis Tables 3-4): loaders with the documented fallback
splits, model inputs, metrics, non-neural baselines and a fine-tune + evaluate runner. Plain library: never
imports prefect.

Tasks: ``cws`` (SIGHAN 2005 MSR, BMES per char), ``pos`` (UD Chinese v1.4, UPOS per word), ``ner`` (MSRA, BIO
per char), ``dc`` (THUCNews titles, 10 classes), ``sa`` (ChnSentiCorp, 2 classes), ``spm`` (LCQMC pairs).
"""
from model.benchmark.data import TASKS, Splits, TaskSpec, load_task

__all__ = ["TASKS", "Splits", "TaskSpec", "load_task"]
