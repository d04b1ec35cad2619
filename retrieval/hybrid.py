"""Names kept for callers of the earlier layout: the fusion (:mod:`retrieval.fusion`), the query miner
(:mod:`retrieval.mining`) and the metrics (:mod:`retrieval.metrics`) live in their own modules now."""
from retrieval.fusion import FusionConfig, fit_fusion, fuse  # noqa: F401
from retrieval.metrics import doc_metrics  # noqa: F401
from retrieval.mining import lead_sentence, mask_leads, mine_queries  # noqa: F401
