"""The main job's stage registry, assembled at the top from each library's declarations (``STAGES``) and
passed down to the tasks, the lineage and the tests; ``storage`` never imports the libraries above it.

A new stage is declared once, in its library's ``STAGES``; listed here, it gets a task, a place in the DAG
(after the stages that produce what it reads), assets and lineage.
"""
from __future__ import annotations

from corpus.stages import STAGES as CORPUS
from crawler.stages import STAGES as CRAWLER
from model.stages import STAGES as MODEL
from policy.stages import STAGES as POLICY
from retrieval.contracts import STAGES as RETRIEVAL
from storage.contracts import Registry

PIPELINE = Registry((*CRAWLER, *CORPUS, *POLICY, *MODEL, *RETRIEVAL))
