"""The operator's validating webhook for the six ``slinky.slurm.net`` kinds: HTTPS, ``POST /validate``,
``GET /healthz``.

``python -m workers.operator.webhook --cert C --key K [--port 9443] [--bind 127.0.0.1]``. The rules are
``slinky.operator.admission`` (pure); the server is ``workers.admission_server``, shared with the bridge's
webhook. Register it for CREATE and UPDATE of the six resources (not their ``/status``, and never DELETE):
then neither the operator's status writes nor a namespace deletion ever wait for it (upstream #189), and a
write that keeps the spec (a finalizer removed) is always allowed. One JSON log line per review.
"""

from __future__ import annotations

import argparse
import logging
import time
from collections.abc import Sequence
from typing import Any, Final

from slinky.config import Settings
from slinky.operator import admission
from slinky.telemetry import configure_logging
from workers.admission_server import AdmissionServer, ServingCert, serve_until_signalled

log = logging.getLogger("slinky.operator.webhook")

DEFAULT_PORT: Final = 9443
"""Upstream's webhook port."""
ROUTE: Final = "/validate"


def handle(route: str, body: dict[str, Any]) -> dict[str, Any]:
    started = time.perf_counter()
    answer = admission.answer(body)
    request = body.get("request") or {}
    response = answer["response"]
    extra = {
        "uid": request.get("uid"),
        "kind": (request.get("kind") or {}).get("kind"),
        "operation": request.get("operation"),
        "namespace": request.get("namespace"),
        "object": request.get("name"),
        "user": (request.get("userInfo") or {}).get("username"),
        "allowed": response["allowed"],
        "ms": round((time.perf_counter() - started) * 1000, 2),
    }
    if response["allowed"]:
        log.info("allowed", extra=extra)
    else:
        log.info("denied", extra={**extra, "reason": response["status"]["message"]})
    return answer


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m workers.operator.webhook", description=__doc__.splitlines()[0])
    parser.add_argument("--cert", required=True, help="PEM serving certificate (chain) file")
    parser.add_argument("--key", required=True, help="PEM private key file")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT)
    parser.add_argument("--bind", default="127.0.0.1", help="address to listen on (0.0.0.0 in a pod)")
    return parser.parse_args(argv)


def serve(args: argparse.Namespace) -> None:
    server = AdmissionServer((args.bind, args.port), ServingCert(args.cert, args.key), {ROUTE}, handle)
    log.info("operator webhook listening", extra={"address": f"https://{args.bind}:{args.port}{ROUTE}"})
    serve_until_signalled(server)


def main(argv: Sequence[str] | None = None) -> None:
    configure_logging(Settings().telemetry.model_copy(update={"log_json": True}))
    serve(parse_args(argv))


if __name__ == "__main__":
    main()
