#!/usr/bin/env bash
# A local Prefect server (SQLite) and a process worker for the deployments of prefect.yaml.
#
#   scripts/prefect-local.sh server            # start the server on 127.0.0.1:${PREFECT_PORT:-4200} (background)
#   scripts/prefect-local.sh deploy            # work pool, concurrency limits, all deployments
#   scripts/prefect-local.sh worker [--run-once]
#   scripts/prefect-local.sh run 'policy-pipeline/full-pipeline' --param input=... --param data_dir=...
#   scripts/prefect-local.sh ui-check --data-dir data   # headless Chromium: last pipeline run's graph -> data/ui/
#   scripts/prefect-local.sh stop
#
# State lives in ${POLICYBERT_PREFECT_HOME:-.prefect-server} (database, logs, pid files).
set -euo pipefail
cd "$(dirname "$0")/.."
export POLICYBERT_REPO="${POLICYBERT_REPO:-$PWD}"
export PREFECT_HOME="${POLICYBERT_PREFECT_HOME:-$PWD/.prefect-server}"
PORT="${PREFECT_PORT:-4200}"
export PREFECT_API_URL="http://127.0.0.1:${PORT}/api"
export PREFECT_SERVER_ANALYTICS_ENABLED=false
PREFECT="${PREFECT_BIN:-.venv/bin/prefect}"
PY="$(dirname "$PREFECT")/python"
GPUS="${POLICYBERT_GPUS:-$(command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L | wc -l || echo 1)}"
mkdir -p "$PREFECT_HOME"

wait_healthy() {
  for _ in $(seq 1 120); do
    if curl -fsS "http://127.0.0.1:${PORT}/api/health" >/dev/null 2>&1; then return 0; fi
    sleep 1
  done
  echo "prefect server did not become healthy on port ${PORT}; see ${PREFECT_HOME}/server.log" >&2
  return 1
}

case "${1:-}" in
  server)
    if [ -f "$PREFECT_HOME/server.pid" ] && kill -0 "$(cat "$PREFECT_HOME/server.pid")" 2>/dev/null; then
      echo "server already running (pid $(cat "$PREFECT_HOME/server.pid"))"
    else
      # the UI asks the API at PREFECT_UI_API_URL, which otherwise defaults to port 4200 whatever --port says
      PREFECT_API_URL= PREFECT_UI_API_URL="http://127.0.0.1:${PORT}/api" \
        nohup "$PREFECT" server start --host 127.0.0.1 --port "$PORT" >"$PREFECT_HOME/server.log" 2>&1 &
      echo $! >"$PREFECT_HOME/server.pid"
    fi
    wait_healthy && echo "Prefect server at http://127.0.0.1:${PORT} (UI and API)"
    ;;
  deploy)
    "$PREFECT" work-pool create policybert-process --type process --overwrite >/dev/null
    # `gpu` tag limit (= GPUs: training/embedding never share one) and a 1 request/s rate limit per crawl host
    "$PY" -m tasks.limits --gpus "$GPUS"
    # deploy without POLICYBERT_REPO set, so the pull step keeps its {{ $POLICYBERT_REPO }} placeholder and the
    # worker resolves it at run time (prefect deploy would otherwise freeze this machine's path)
    env -u POLICYBERT_REPO "$PREFECT" --no-prompt deploy --all
    ;;
  worker)
    shift
    exec "$PREFECT" worker start --pool policybert-process "$@"
    ;;
  run)
    shift
    exec "$PREFECT" deployment run "$@"
    ;;
  ui-check)
    shift
    exec "$PY" -m ops.ui_check --api-url "$PREFECT_API_URL" "$@"
    ;;
  stop)
    if [ -f "$PREFECT_HOME/server.pid" ]; then kill "$(cat "$PREFECT_HOME/server.pid")" 2>/dev/null || true; rm -f "$PREFECT_HOME/server.pid"; fi
    ;;
  *)
    sed -n 2,11p "$0"; exit 2 ;;
esac
