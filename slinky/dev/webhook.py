"""The admission webhook in the development stack: certificates, the process, and its registration.

Called from ``slinky.dev.stack`` (``dev up``) and from the webhook's integration tests; every step is
idempotent. The server itself is ``python -m workers.bridge.webhook``, started by module path (the core
package never imports ``workers``).

Managed scope in the dev stack: the selector ``slinky.slurm.net/managed=true`` (a label selector,
because the API server evaluates it, so any test can make a fresh managed namespace by labelling
it). ``register`` labels the default managed namespace ``slurm-bridge`` with it.
"""

from __future__ import annotations

import os
import ssl
import subprocess
import sys
import time
import urllib.request
import warnings
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Final

import httpx

from slinky import wellknown
from slinky.bridge import admission
from slinky.clients.kube import load_kubeconfig
from slinky.dev.procs import ProcessTable

REPO: Final = Path(__file__).resolve().parents[2]
PORT: Final = 16444
PROCESS: Final = "webhook"
LABEL_MANAGED: Final = wellknown.PREFIX_SLINKY + "managed"
"""Dev-stack convention: namespaces labelled ``slinky.slurm.net/managed=true`` are managed."""
DEV_MANAGED_SELECTOR: Final = f"{LABEL_MANAGED}=true"
DEV_BRIDGE_USERNAMES: Final = ("admin",)
"""The dev stack's bridge runs with the admin token, so ``admin`` may change the jobid label."""
CERT_DAYS: Final = 3650


def dev_settings() -> admission.AdmissionSettings:
    """The settings ``start`` gives the dev webhook; ``register`` must agree with them."""
    return admission.AdmissionSettings(
        managed_namespace_selector=DEV_MANAGED_SELECTOR,
        bridge_usernames=frozenset({admission.BRIDGE_SERVICE_ACCOUNT, *DEV_BRIDGE_USERNAMES}),
    )


def openssl(*argv: str) -> None:
    proc = subprocess.run(["openssl", *argv], capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"openssl {argv[0]} failed: {proc.stderr.strip()[-500:]}")


def valid_for(cert: Path, seconds: int) -> bool:
    proc = subprocess.run(
        ["openssl", "x509", "-checkend", str(seconds), "-noout", "-in", str(cert)], capture_output=True
    )
    return proc.returncode == 0


def ensure_certs(state_dir: Path) -> tuple[Path, Path, Path]:
    """A CA and a serving certificate for ``IP:127.0.0.1`` under ``<state_dir>/webhook``; return (ca, cert, key).

    Kept while valid for 30 more days; otherwise both are made again (register again afterwards,
    the CA bundle changes).
    """
    d = state_dir / "webhook"
    ca, ca_key, cert, key = d / "ca.crt", d / "ca.key", d / "tls.crt", d / "tls.key"
    if all(p.is_file() for p in (ca, cert, key)) and valid_for(cert, 30 * 86400) and valid_for(ca, 30 * 86400):
        return ca, cert, key
    d.mkdir(parents=True, exist_ok=True)
    d.chmod(0o700)
    conf = d / "openssl.cnf"
    conf.write_text(
        "[req]\ndistinguished_name = dn\nprompt = no\n[dn]\nCN = placeholder\n"
        "[ca]\nbasicConstraints = critical,CA:TRUE\nkeyUsage = critical,keyCertSign,cRLSign\n"
        "subjectKeyIdentifier = hash\n"
        "[server]\nbasicConstraints = critical,CA:FALSE\nkeyUsage = critical,digitalSignature,keyEncipherment\n"
        "extendedKeyUsage = serverAuth\n"
        "subjectAltName = IP:127.0.0.1,DNS:localhost,DNS:slurm-bridge-webhook.slinky.svc\n"
    )
    openssl("genrsa", "-out", str(ca_key), "2048")
    openssl(
        "req", "-x509", "-new", "-config", str(conf), "-extensions", "ca", "-key", str(ca_key),
        "-subj", "/CN=slinky-webhook-ca", "-days", str(CERT_DAYS), "-out", str(ca),
    )  # fmt: skip
    openssl("genrsa", "-out", str(key), "2048")
    csr = d / "tls.csr"
    openssl(
        "req", "-new", "-config", str(conf), "-key", str(key), "-subj", "/CN=slurm-bridge-webhook", "-out", str(csr)
    )
    openssl(
        "x509", "-req", "-in", str(csr), "-CA", str(ca), "-CAkey", str(ca_key), "-CAcreateserial",
        "-days", str(CERT_DAYS), "-extfile", str(conf), "-extensions", "server", "-out", str(cert),
    )  # fmt: skip
    for f in (ca_key, key):
        f.chmod(0o600)
    return ca, cert, key


def healthy(ca: Path, port: int = PORT, timeout: float = 1.0) -> bool:
    """``GET /healthz`` over TLS, trusting only ``ca``."""
    ctx = ssl.create_default_context(cafile=str(ca))
    try:
        with urllib.request.urlopen(f"https://127.0.0.1:{port}/healthz", context=ctx, timeout=timeout) as resp:
            return bool(resp.status == 200)
    except OSError:
        return False


def start(
    procs: ProcessTable,
    state_dir: Path,
    *,
    port: int = PORT,
    settings: admission.AdmissionSettings | None = None,
    timeout: float = 20.0,
) -> int:
    """Start ``python -m workers.bridge.webhook`` as the process ``webhook`` (unless it runs) and wait until healthy."""
    ca, cert, key = ensure_certs(state_dir)
    pid = procs.running(PROCESS)
    if pid is None:
        settings = settings or dev_settings()
        argv = [sys.executable, "-m", "workers.bridge.webhook", "--cert", str(cert), "--key", str(key)]
        argv += ["--port", str(port), "--bind", "127.0.0.1", "--scheduler-name", settings.scheduler_name]
        argv += ["--managed-namespace-selector", settings.managed_namespace_selector or ""]
        for ns in settings.managed_namespaces:
            argv += ["--managed-namespace", ns]
        for user in sorted(settings.bridge_usernames - {admission.BRIDGE_SERVICE_ACCOUNT}):
            argv += ["--bridge-username", user]
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        with warnings.catch_warnings():
            # The Popen object is dropped while its daemon runs on, by design (the PID file tracks it).
            warnings.simplefilter("ignore", ResourceWarning)
            pid = procs.start(PROCESS, argv, log=state_dir / "logs" / f"{PROCESS}.log", env=env, cwd=REPO)
    deadline = time.monotonic() + timeout
    while not healthy(ca, port):
        if procs.running(PROCESS) is None:
            raise RuntimeError(f"webhook exited at start; see {state_dir / 'logs' / (PROCESS + '.log')}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"webhook not healthy on 127.0.0.1:{port} after {timeout:.0f}s")
        time.sleep(0.1)
    return pid


class KubeSync:
    """The few synchronous calls registration needs."""

    def __init__(self, kubeconfig: str | Path | None) -> None:
        cfg = load_kubeconfig(kubeconfig)
        headers = {"Authorization": f"Bearer {cfg.token}"} if cfg.token else {}
        self.http = httpx.Client(base_url=cfg.server, verify=cfg.ssl_context, headers=headers, timeout=10.0)

    def __enter__(self) -> KubeSync:
        return self

    def __exit__(self, *exc: object) -> None:
        self.http.close()

    def request(self, method: str, path: str, **kw: Any) -> httpx.Response:
        resp = self.http.request(method, path, **kw)
        if resp.status_code >= 400 and resp.status_code != 404:
            raise RuntimeError(f"{method} {path}: HTTP {resp.status_code}: {resp.text[:300]}")
        return resp

    def apply(self, collection: str, obj: dict[str, Any]) -> None:
        """Create, or replace keeping the resourceVersion."""
        path = f"{collection}/{obj['metadata']['name']}"
        current = self.request("GET", path)
        if current.status_code == 404:
            self.request("POST", collection, json=obj)
            return
        live = current.json()
        body = {**obj, "metadata": {**obj["metadata"], "resourceVersion": live["metadata"]["resourceVersion"]}}
        if obj.get("kind") == "Service":  # the addresses the apiserver gave it cannot be unset by a replace
            kept = {k: v for k, v in (live.get("spec") or {}).items() if k in ("clusterIP", "clusterIPs")}
            body["spec"] = {**kept, **(obj.get("spec") or {})}
        self.request("PUT", path, json=body)

    def label_namespace(self, name: str, labels: dict[str, str], *, create: bool = False) -> None:
        patch = {"metadata": {"labels": labels}}
        headers = {"Content-Type": "application/merge-patch+json"}
        resp = self.request("PATCH", f"/api/v1/namespaces/{name}", json=patch, headers=headers)
        if resp.status_code == 404 and create:
            self.request("POST", "/api/v1/namespaces", json={"metadata": {"name": name, "labels": labels}})


ADMISSION_API: Final = "/apis/admissionregistration.k8s.io/v1"


def register(
    kubeconfig: str | Path | None,
    ca_bundle: Path | bytes,
    port: int = PORT,
    *,
    settings: admission.AdmissionSettings | None = None,
    only_namespaces_labelled: str | None = None,
    ignored_namespaces: Iterable[str] = admission.EXCLUDED_NAMESPACES,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Create or replace both ``pods.slinky.slurm.net`` configurations, pointing at ``https://127.0.0.1:<port>``.

    Kubernetes 1.20 does not label namespaces with ``kubernetes.io/metadata.name`` (1.21 does), so the
    existing ``ignored_namespaces`` get ``slinky.slurm.net/webhook=ignore``. With the dev settings the
    namespace ``slurm-bridge`` is created if missing and labelled managed. Returns what was applied.
    """
    settings = settings or dev_settings()
    bundle = ca_bundle.read_bytes() if isinstance(ca_bundle, Path) else ca_bundle
    mutating, validating = admission.webhook_configurations(
        settings,
        base_url=f"https://127.0.0.1:{port}",
        ca_bundle=bundle,
        only_namespaces_labelled=only_namespaces_labelled,
    )
    with KubeSync(kubeconfig) as kube:
        for ns in ignored_namespaces:
            kube.label_namespace(ns, {wellknown.LABEL_WEBHOOK: wellknown.WEBHOOK_IGNORE})
        if settings.managed_namespace_selector == DEV_MANAGED_SELECTOR:
            for ns in settings.managed_namespaces:
                kube.label_namespace(ns, {LABEL_MANAGED: "true"}, create=True)
        kube.apply(f"{ADMISSION_API}/mutatingwebhookconfigurations", mutating)
        kube.apply(f"{ADMISSION_API}/validatingwebhookconfigurations", validating)
    return mutating, validating


def unregister(kubeconfig: str | Path | None) -> None:
    """Delete both configurations (missing ones are fine)."""
    with KubeSync(kubeconfig) as kube:
        for kind in ("mutatingwebhookconfigurations", "validatingwebhookconfigurations"):
            kube.request("DELETE", f"{ADMISSION_API}/{kind}/{admission.CONFIGURATION_NAME}")


def up(procs: ProcessTable, state_dir: Path, kubeconfig: str | Path) -> int:
    """``dev up``'s one call: certificates, process, registration. Returns the PID."""
    pid = start(procs, state_dir)
    ca, _, _ = ensure_certs(state_dir)
    register(kubeconfig, ca)
    return pid
