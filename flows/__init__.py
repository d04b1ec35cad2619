"""Prefect flows: orchestration only (stage logic lives in crawler/, corpus/, model/, retrieval/)."""
