"""Text stages (SPEC §3-§5): cleaning, dedup, sentences/clauses, segmentation, vocabulary,
PolicySM pair building, shortcut probe, pretraining data. Plain library: never imports prefect."""
