"""The CLI entry points' process environment (flows.env): Prefect's home under the data dir, the server's
startup timeout and oneDNN's primitive cache bound, each overridable from the caller's environment."""
from flows.env import DEFAULT_ONEDNN_CACHE, ONEDNN_CACHE, STARTUP_TIMEOUT, prefect_env


def test_defaults_and_overrides(tmp_path, monkeypatch):
    monkeypatch.delenv(ONEDNN_CACHE, raising=False)
    monkeypatch.delenv(STARTUP_TIMEOUT, raising=False)
    env = prefect_env(tmp_path)
    assert env["PREFECT_HOME"] == str(tmp_path.resolve() / ".prefect")
    assert env[ONEDNN_CACHE] == str(DEFAULT_ONEDNN_CACHE) == "32" and env[STARTUP_TIMEOUT] == "120"
    monkeypatch.setenv(ONEDNN_CACHE, "1024")  # a user's own bound wins
    assert prefect_env(tmp_path)[ONEDNN_CACHE] == "1024"
