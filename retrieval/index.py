"""Names kept for callers of the earlier layout (the index config is a pipeline setting): the FAISS side is
:mod:`retrieval.dense`, the version store :mod:`retrieval.versions`, the build of a version
:mod:`retrieval.build`."""
from retrieval.build import embed_staged, publish_staged, refresh_index, stage_refresh, staging_dir  # noqa: F401
from retrieval.dense import (ANN_KINDS, KINDS, IndexConfig, ann_recall_report, build_flat_index,  # noqa: F401
                             build_index, build_index_with_report, ivf_nlist, resolve_kind, search_params,
                             search_rows)
from retrieval.retrievers import search  # noqa: F401
from retrieval.versions import CURRENT, IndexLoadError, check_version, current_version  # noqa: F401
from retrieval.versions import load_version as load_index  # noqa: F401
from retrieval.versions import publish_version as publish_index  # noqa: F401
