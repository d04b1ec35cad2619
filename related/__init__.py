"""Related policies (SPEC §12): which documents implement, refine or belong with a given one.

Pairs from title structure (:mod:`related.pairs`), document matrices of segment vectors (:mod:`related.segments`),
the LTM-B model (:mod:`related.ltm`, :mod:`related.train`), baselines and evaluation (:mod:`related.baselines`,
:mod:`related.evaluate`), the index version's ``related`` part (:mod:`related.stage`, :mod:`related.serve`).
A library: never imports prefect.
"""
from __future__ import annotations


def load(version_dir):
    """The related model of an index version (:func:`related.serve.load`)."""
    from related.serve import load as _load

    return _load(version_dir)
