"""Related policies by long-document matching (SPEC §12): which documents implement, refine or belong with a
given one. (Named ``docmatch``, not ``related``: Prefect loads a deployment's entrypoint with ``flows/`` on
``sys.path``, where the CLI ``flows/related.py`` would shadow a top-level ``related`` package.)

Pairs from title structure (:mod:`docmatch.pairs`), document matrices of segment vectors (:mod:`docmatch.segments`),
the LTM-B model (:mod:`docmatch.ltm`, :mod:`docmatch.train`), baselines and evaluation (:mod:`docmatch.baselines`,
:mod:`docmatch.evaluate`), the index version's ``related`` part (:mod:`docmatch.stage`, :mod:`docmatch.serve`).
A library: never imports prefect.
"""
from __future__ import annotations


def load(version_dir):
    """The related model of an index version (:func:`docmatch.serve.load`)."""
    from docmatch.serve import load as _load

    return _load(version_dir)
