"""The webhook's serving certificate is reloaded when its files change: new connections get the new one."""

from __future__ import annotations

import hashlib
import shutil
import socket
import ssl
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from slinky.bridge import admission
from workers.admission_server import ServingCert
from workers.bridge.webhook import WebhookServer


def _self_signed(directory: Path, name: str) -> tuple[Path, Path]:
    cert, key = directory / f"{name}.crt", directory / f"{name}.key"
    args = ["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", f"/CN={name}"]
    subprocess.run(
        ["openssl", *args, "-keyout", str(key), "-out", str(cert)],
        check=True,
        capture_output=True,
    )
    return cert, key


def _install(src: tuple[Path, Path], dst: tuple[Path, Path]) -> None:
    """Swap the files in by rename, as the kubelet swaps a Secret's files."""
    for s, d in zip(src, dst, strict=True):
        tmp = d.with_suffix(".tmp")
        shutil.copyfile(s, tmp)
        tmp.replace(d)


def _served_fingerprint(port: int) -> str:
    client = ssl.create_default_context()
    client.check_hostname = False
    client.verify_mode = ssl.CERT_NONE
    with socket.create_connection(("127.0.0.1", port), timeout=5) as raw:
        with client.wrap_socket(raw) as tls:
            der = tls.getpeercert(binary_form=True)
    assert der is not None
    return hashlib.sha256(der).hexdigest()


def _fingerprint(cert: Path) -> str:
    return hashlib.sha256(ssl.PEM_cert_to_DER_cert(cert.read_text())).hexdigest()


Pair = tuple[Path, Path]
Pairs = tuple[Pair, Pair, Pair]
"""(first certificate and key, second, the live files the server reads)"""


@pytest.fixture
def pairs(tmp_path: Path) -> Iterator[Pairs]:
    first, second = _self_signed(tmp_path, "first"), _self_signed(tmp_path, "second")
    live = (tmp_path / "tls.crt", tmp_path / "tls.key")
    _install(first, live)
    yield first, second, live


def test_rotated_files_are_served_to_new_connections(
    pairs: Pairs,
) -> None:
    first, second, live = pairs
    cert = ServingCert(str(live[0]), str(live[1]), check_seconds=0)
    settings = admission.AdmissionSettings(scheduler_name="s", managed_namespaces=("ns",))
    server = WebhookServer(("127.0.0.1", 0), settings, cert)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        port = server.server_address[1]
        assert _served_fingerprint(port) == _fingerprint(first[0])
        _install(second, live)
        assert _served_fingerprint(port) == _fingerprint(second[0])
        assert cert.reloads == 1
    finally:
        server.shutdown()
        server.server_close()


def test_a_broken_rotation_keeps_the_previous_certificate(
    pairs: Pairs,
) -> None:
    first, second, live = pairs
    cert = ServingCert(str(live[0]), str(live[1]), check_seconds=0)
    before = cert.context()
    assert cert.context() is before, "unchanged files: the same context"
    _install((second[0], first[1]), live)  # a certificate with the wrong key: half a rotation
    assert cert.context() is before and cert.reloads == 0
    _install(second, live)  # the rotation completes
    assert cert.context() is not before and cert.reloads == 1


def test_check_seconds_bounds_how_often_the_files_are_looked_at(
    pairs: Pairs,
) -> None:
    _, second, live = pairs
    cert = ServingCert(str(live[0]), str(live[1]), check_seconds=3600)
    before = cert.context()
    _install(second, live)
    assert cert.context() is before, "not looked at again within check_seconds"
