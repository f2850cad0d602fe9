"""The bridge's admission webhook server: HTTPS, ``POST /mutate``, ``POST /validate``, ``GET /healthz``.

``python -m workers.bridge.webhook --cert C --key K [--port 16444] [--bind 127.0.0.1]``. The managed scope
comes from ``Settings().bridge`` (``SLINKY_BRIDGE__*``) unless a flag overrides it. The rules live in
``slinky.bridge.admission`` (pure); the HTTPS server is ``workers.admission_server``, shared with the
operator's webhook. Logs are JSON lines, one per review.
"""

from __future__ import annotations

import argparse
import logging
import time
from collections.abc import Sequence
from typing import Any, Final

from slinky.bridge import admission
from slinky.config import Settings
from slinky.telemetry import configure_logging
from workers.admission_server import AdmissionServer, ServingCert, serve_until_signalled

log = logging.getLogger("slinky.webhook")

DEFAULT_PORT: Final = 16444
ROUTES: Final[dict[str, tuple[admission.Kind, bool]]] = {
    "/mutate": ("mutate", False),
    "/mutate/managed": ("mutate", True),
    "/validate": ("validate", False),
    "/validate/managed": ("validate", True),
}


class WebhookServer(AdmissionServer):
    """The bridge's routes on the shared server; ``settings`` is the managed scope."""

    def __init__(self, address: tuple[str, int], settings: admission.AdmissionSettings, cert: ServingCert) -> None:
        super().__init__(address, cert, ROUTES, self._review)
        self.settings = settings

    def _review(self, route: str, body: dict[str, Any]) -> dict[str, Any]:
        # /mutate and /validate; .../managed when the API server matched the managed namespace selector.
        started = time.perf_counter()
        kind, managed = ROUTES[route]
        answer = admission.review(body, self.settings, kind=kind, namespace_managed=managed)
        _log_review(kind, body, answer, managed, time.perf_counter() - started)
        return answer


def _log_review(kind: str, body: dict[str, Any], answer: dict[str, Any], managed: bool, seconds: float) -> None:
    request = body.get("request") or {}
    response = answer["response"]
    obj = request.get("object") or {}
    extra: dict[str, Any] = {
        "webhook": kind,
        "uid": request.get("uid"),
        "operation": request.get("operation"),
        "sub_resource": request.get("subResource") or None,
        "namespace": request.get("namespace"),
        "pod": request.get("name")
        or (obj.get("metadata") or {}).get("name")
        or (obj.get("metadata") or {}).get("generateName"),
        "user": (request.get("userInfo") or {}).get("username"),
        "scope_managed": managed,
        "allowed": response["allowed"],
        "patched": "patch" in response,
        "ms": round(seconds * 1000, 2),
    }
    if not response["allowed"]:
        extra["reason"] = response["status"]["message"]
        log.info("denied", extra=extra)
    else:
        log.info("allowed", extra=extra)


def settings_from(args: argparse.Namespace) -> admission.AdmissionSettings:
    bridge = Settings().bridge
    namespaces = args.managed_namespace or bridge.managed_namespaces
    selector = args.managed_namespace_selector
    if selector is None:  # an explicit "" means: no selector, use the list
        selector = bridge.managed_namespace_selector
    if selector:
        admission.parse_selector(selector)  # fail at start, not on the first request
    users = frozenset({admission.BRIDGE_SERVICE_ACCOUNT, *(args.bridge_username or [])})
    return admission.AdmissionSettings(
        scheduler_name=args.scheduler_name or bridge.scheduler_name,
        managed_namespaces=tuple(namespaces),
        managed_namespace_selector=selector or None,
        bridge_usernames=users,
    )


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m workers.bridge.webhook", description=__doc__.splitlines()[0])
    parser.add_argument("--cert", required=True, help="PEM serving certificate (chain) file")
    parser.add_argument("--key", required=True, help="PEM private key file")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT)
    parser.add_argument("--bind", default="127.0.0.1", help="address to listen on (0.0.0.0 in a pod)")
    parser.add_argument("--scheduler-name", help="default: SLINKY_BRIDGE__SCHEDULER_NAME")
    parser.add_argument(
        "--managed-namespace", action="append", help="repeatable; default: SLINKY_BRIDGE__MANAGED_NAMESPACES"
    )
    parser.add_argument(
        "--managed-namespace-selector", help="label selector; overrides the namespace list (must match registration)"
    )
    parser.add_argument(
        "--bridge-username",
        action="append",
        help=f"repeatable: users besides {admission.BRIDGE_SERVICE_ACCOUNT} allowed to change the jobid label",
    )
    return parser.parse_args(argv)


def serve(args: argparse.Namespace) -> None:
    settings = settings_from(args)
    server = WebhookServer((args.bind, args.port), settings, ServingCert(args.cert, args.key))
    log.info(
        "webhook listening",
        extra={
            "address": f"https://{args.bind}:{args.port}",
            "scheduler_name": settings.scheduler_name,
            "managed_namespaces": list(settings.managed_namespaces),
            "managed_namespace_selector": settings.managed_namespace_selector,
            "bridge_usernames": sorted(settings.bridge_usernames),
        },
    )
    serve_until_signalled(server)


def main(argv: Sequence[str] | None = None) -> None:
    telemetry = Settings().telemetry.model_copy(update={"log_json": True})
    configure_logging(telemetry)
    serve(parse_args(argv))


if __name__ == "__main__":
    main()
