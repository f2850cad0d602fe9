"""The processes, by wing: ``workers/bridge/`` (``python -m workers``: the bridge worker;
``python -m workers.bridge.webhook``: its admission webhook) and ``workers/operator/`` (``python -m
workers.operator``). Below both: leader election and process start (``leading``) and the health endpoint
(``health``). The two wings never import each other (import-linter)."""
