"""The related-policies serving part, declared once (SPEC §12; :mod:`retrieval.serving_parts`): LTM-B fitted on
the staged version (:func:`docmatch.stage.related_fit`), loaded by :func:`docmatch.serve.load_part`.
"""
from __future__ import annotations

from retrieval.serving_parts import ServingPart

RELATED_PART = ServingPart("related", "related", "related.json", build="fitted", fit="docmatch.stage:related_fit",
                           fit_settings=("related_pairs", "related_corpus"), load="docmatch.serve:load_part")
PARTS = (RELATED_PART,)
