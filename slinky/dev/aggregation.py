"""The apiserver's aggregation layer in the development stack, and the operator's external metrics API on it
(docs/autoscaling.md): certificates, the apiserver's flags, and the APIService registration.

* The front proxy: a CA of its own (``front-proxy-ca``) and the client certificate the apiserver presents to
  extension servers (``CN=front-proxy-client``), as kubeadm makes them. The apiserver publishes the CA and the
  allowed name in ConfigMap ``kube-system/extension-apiserver-authentication``, which the operator reads.
* The operator's serving certificate for ``slinky-external-metrics.kube-system.svc`` (and the bridge address
  it listens on), signed by the cluster CA: the APIService's ``caBundle``.
* The APIService ``v1beta1.external.metrics.k8s.io`` -> Service ``kube-system/slinky-external-metrics``
  without a selector, whose Endpoints are the stack's operator on the bridge address (an Endpoints address
  may not be loopback). With ``--enable-aggregator-routing`` the apiserver dials that address itself: no
  kube-proxy runs here.
"""

from __future__ import annotations

import base64
import subprocess
from pathlib import Path
from typing import Any, Final

from slinky.dev import real_nodes
from slinky.dev.webhook import CERT_DAYS, KubeSync, openssl, valid_for

PORT: Final = 16445
"""The stack's operator serves the external metrics API here, on the bridge address."""
SERVICE: Final = "slinky-external-metrics"
SERVICE_NAMESPACE: Final = "kube-system"
APISERVICE: Final = "v1beta1.external.metrics.k8s.io"
FRONT_PROXY_CLIENT: Final = "front-proxy-client"


def address() -> str:
    """The host's address on the real nodes' bridge (the apiserver reaches the operator there)."""
    return real_nodes.HOST_ADDRESS


def _covers(cert: Path, ip: str) -> bool:
    text = subprocess.run(["openssl", "x509", "-noout", "-text", "-in", str(cert)], capture_output=True, text=True)
    return f"IP Address:{ip}," in text.stdout or f"IP Address:{ip}\n" in text.stdout


def sign(d: Path, name: str, cn: str, ca: str, extensions: str, *, org: str = "", new_key: bool = True) -> None:
    """``<name>.key`` and ``<name>.crt`` signed by ``<ca>.crt``/``<ca>.key`` in ``d``, with ``extensions`` (the
    subject's O= is ``org``, a client certificate's group; ``new_key=False`` keeps an existing key)."""
    ext = d / f"{name}.ext"
    ext.write_text(extensions)
    if new_key or not (d / f"{name}.key").is_file():
        openssl("genrsa", "-out", str(d / f"{name}.key"), "2048")
    subject = f"/CN={cn}" + (f"/O={org}" if org else "")
    openssl("req", "-new", "-key", str(d / f"{name}.key"), "-subj", subject, "-out", str(d / f"{name}.csr"))
    openssl(
        "x509", "-req", "-in", str(d / f"{name}.csr"), "-CA", str(d / f"{ca}.crt"), "-CAkey", str(d / f"{ca}.key"),
        "-CAcreateserial", "-days", str(CERT_DAYS), "-extfile", str(ext), "-out", str(d / f"{name}.crt"),
    )  # fmt: skip
    (d / f"{name}.key").chmod(0o600)


def ensure_certs(kube_dir: Path) -> None:
    """The front proxy's CA and client certificate, and the operator's serving certificate (kept while valid
    for 30 more days). The cluster CA (``ca.crt``, ``ca.key``) must exist."""
    d = kube_dir
    wanted = [d / n for n in ("front-proxy-ca.crt", "front-proxy-client.crt", "external-metrics.crt")]
    if all(p.is_file() and valid_for(p, 30 * 86400) for p in wanted):
        if not _covers(d / "external-metrics.crt", address()):  # made when the operator listened elsewhere
            sign(d, "external-metrics", SERVICE, "ca", _serving_extensions())
        return
    openssl("genrsa", "-out", str(d / "front-proxy-ca.key"), "2048")
    openssl(
        "req", "-x509", "-new", "-key", str(d / "front-proxy-ca.key"), "-subj", "/CN=front-proxy-ca",
        "-days", str(CERT_DAYS), "-out", str(d / "front-proxy-ca.crt"),
    )  # fmt: skip
    (d / "front-proxy-ca.key").chmod(0o600)
    sign(d, "front-proxy-client", FRONT_PROXY_CLIENT, "front-proxy-ca", "extendedKeyUsage=clientAuth\n")
    sign(d, "external-metrics", SERVICE, "ca", _serving_extensions())


def _serving_extensions() -> str:
    san = f"IP:{address()},IP:127.0.0.1,DNS:{SERVICE}.{SERVICE_NAMESPACE}.svc,DNS:{SERVICE}.{SERVICE_NAMESPACE}"
    return f"extendedKeyUsage=serverAuth\nsubjectAltName={san}\n"


def apiserver_flags(kube_dir: Path) -> list[str]:
    """The aggregation layer's flags (as kubeadm sets them), plus routing to endpoint addresses."""
    d = kube_dir
    return [
        f"--requestheader-client-ca-file={d / 'front-proxy-ca.crt'}",
        f"--requestheader-allowed-names={FRONT_PROXY_CLIENT}",
        "--requestheader-username-headers=X-Remote-User",
        "--requestheader-group-headers=X-Remote-Group",
        "--requestheader-extra-headers-prefix=X-Remote-Extra-",
        f"--proxy-client-cert-file={d / 'front-proxy-client.crt'}",
        f"--proxy-client-key-file={d / 'front-proxy-client.key'}",
        "--enable-aggregator-routing=true",
    ]


def operator_settings(kube_dir: Path) -> dict[str, str]:
    """The stack's operator serves the API (only it: tests' operators run without these)."""
    return {
        "SLINKY_OPERATOR__EXTERNAL_METRICS_PORT": str(PORT),
        "SLINKY_OPERATOR__EXTERNAL_METRICS_ADDRESS": address(),
        "SLINKY_OPERATOR__EXTERNAL_METRICS_CERT_FILE": str(kube_dir / "external-metrics.crt"),
        "SLINKY_OPERATOR__EXTERNAL_METRICS_KEY_FILE": str(kube_dir / "external-metrics.key"),
    }


def objects(ca_bundle: bytes) -> list[tuple[str, dict[str, Any]]]:
    """(collection, object) of the Service, its Endpoints and the APIService."""
    meta = {"name": SERVICE, "namespace": SERVICE_NAMESPACE, "labels": {"app.kubernetes.io/part-of": "slinky-temporal"}}
    port = {"name": "https", "port": 443, "targetPort": PORT, "protocol": "TCP"}
    return [
        (
            f"/api/v1/namespaces/{SERVICE_NAMESPACE}/services",
            {"apiVersion": "v1", "kind": "Service", "metadata": meta, "spec": {"ports": [port]}},
        ),
        (
            f"/api/v1/namespaces/{SERVICE_NAMESPACE}/endpoints",
            {
                "apiVersion": "v1",
                "kind": "Endpoints",
                "metadata": meta,
                "subsets": [
                    {"addresses": [{"ip": address()}], "ports": [{"name": "https", "port": PORT, "protocol": "TCP"}]}
                ],
            },
        ),
        (
            "/apis/apiregistration.k8s.io/v1/apiservices",
            {
                "apiVersion": "apiregistration.k8s.io/v1",
                "kind": "APIService",
                "metadata": {"name": APISERVICE, "labels": meta["labels"]},
                "spec": {
                    "group": "external.metrics.k8s.io",
                    "version": "v1beta1",
                    "service": {"namespace": SERVICE_NAMESPACE, "name": SERVICE, "port": 443},
                    "caBundle": base64.b64encode(ca_bundle).decode(),
                    "groupPriorityMinimum": 100,
                    "versionPriority": 100,
                },
            },
        ),
    ]


def register(kubeconfig: str | Path, kube_dir: Path) -> None:
    """Create or replace the Service, Endpoints and APIService (idempotent)."""
    with KubeSync(kubeconfig) as kube:
        for collection, obj in objects((kube_dir / "ca.crt").read_bytes()):
            kube.apply(collection, obj)


def available(kubeconfig: str | Path) -> bool:
    """Whether the apiserver marks the APIService Available (it checks the server itself, every few seconds)."""
    with KubeSync(kubeconfig) as kube:
        answer = kube.request("GET", f"/apis/apiregistration.k8s.io/v1/apiservices/{APISERVICE}")
        if answer.status_code != 200:
            return False
        conditions = (answer.json().get("status") or {}).get("conditions") or []
        return any(c.get("type") == "Available" and c.get("status") == "True" for c in conditions)
