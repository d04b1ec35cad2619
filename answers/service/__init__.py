"""What makes the answer service safe to expose (SPEC §9): the connection guard in front of uvicorn's HTTP
parser (:mod:`.conn_guard`), API keys (:mod:`.keys`), rate limits (:mod:`.ratelimit`), request ids and JSON
access logs (:mod:`.requestid`), Prometheus metrics (:mod:`.metrics`), and the app that wires them around
:func:`answers.web.create_app` (:mod:`.app`)."""
