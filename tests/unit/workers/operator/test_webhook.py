"""workers.operator.webhook over real TLS: a denial and an allow, as the API server would POST them."""

from __future__ import annotations

import json
import ssl
import subprocess
import threading
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from workers.admission_server import AdmissionServer, ServingCert
from workers.operator import webhook


@pytest.fixture
def server(tmp_path: Path) -> Iterator[tuple[int, Path]]:
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1",
         "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True,
    )  # fmt: skip
    srv = AdmissionServer(("127.0.0.1", 0), ServingCert(str(cert), str(key)), {webhook.ROUTE}, webhook.handle)
    thread = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield srv.server_address[1], cert
    srv.shutdown()
    srv.server_close()


def post(port: int, cert: Path, path: str, body: dict[str, object]) -> tuple[int, dict[str, object] | str]:
    context = ssl.create_default_context(cafile=str(cert))
    request = urllib.request.Request(
        f"https://127.0.0.1:{port}{path}", data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, context=context, timeout=5) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


def review(spec: dict[str, object]) -> dict[str, object]:
    obj = {"kind": "NodeSet", "metadata": {"name": "cpu", "namespace": "hpc"}, "spec": spec}
    request = {"uid": "r1", "kind": {"kind": "NodeSet"}, "operation": "CREATE", "namespace": "hpc", "object": obj}
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}


def test_denies_a_bad_nodeset_and_allows_a_good_one(server: tuple[int, Path]) -> None:
    port, cert = server
    good = {"controllerRef": {"name": "slurm"}, "slurmd": {"image": "slurmd:26.05"}}
    code, answer = post(port, cert, "/validate", review(good))
    assert code == 200 and isinstance(answer, dict) and answer["response"] == {"uid": "r1", "allowed": True}
    bad = {**good, "updateStrategy": {"rollingUpdate": {"maxUnavailable": "0%"}}}
    code, answer = post(port, cert, "/validate", review(bad))
    assert code == 200 and isinstance(answer, dict)
    response = answer["response"]
    assert isinstance(response, dict) and response["allowed"] is False
    assert "maxUnavailable must not be 0" in response["status"]["message"]  # type: ignore[index]


def test_other_paths_and_bodies_are_refused(server: tuple[int, Path]) -> None:
    port, cert = server
    assert post(port, cert, "/mutate", review({}))[0] == 404
    assert post(port, cert, "/validate", {"apiVersion": "v1"})[0] == 400
