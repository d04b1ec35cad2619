"""Stage contract of the policy library (see storage.contracts): the policy record of every document. The source
registry is a file input (its content enters the cache key: it names the sources' owners)."""
from __future__ import annotations

from storage.contracts import Stage, table

POLICY_RECORDS = Stage("policy-records", "policy.stage:policy_records_stage", reads=("documents_clean",),
                       writes=(table("policy_records"),), inputs=("columns",), files=("registry",),
                       args={"clean_dir": "documents_clean", "out_dir": "policy_records"})
STAGES = (POLICY_RECORDS,)
