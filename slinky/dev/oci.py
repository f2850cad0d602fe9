"""OCI image archives written without a builder (pure): a single-layer image as ``ctr images import`` takes it.

Used for the pause image (one static binary), which each real node's containerd imports at start instead of
pulling it: the sandbox image must be there before any pod, registry or not.
"""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from pathlib import Path
from typing import Any

MANIFEST_TYPE = "application/vnd.oci.image.manifest.v1+json"
CONFIG_TYPE = "application/vnd.oci.image.config.v1+json"
LAYER_TYPE = "application/vnd.oci.image.layer.v1.tar"


def _digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def layer_with_file(content: bytes, path: str, mode: int = 0o755) -> bytes:
    """An uncompressed layer tar holding one file (its parent directories implied), owned by root."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        info = tarfile.TarInfo(path.lstrip("/"))
        info.size, info.mode, info.mtime = len(content), mode, 0
        tar.addfile(info, io.BytesIO(content))
    return buf.getvalue()


def image_archive(layer: bytes, name: str, config: dict[str, Any]) -> bytes:
    """An OCI image-layout tar of one uncompressed layer; ``name`` (``registry/repo:tag``) is the image's name
    for containerd (annotation ``io.containerd.image.name``) and its ref name."""
    image_config = {
        "architecture": "amd64",
        "os": "linux",
        "config": config,
        "rootfs": {"type": "layers", "diff_ids": [_digest(layer)]},
    }
    config_blob = json.dumps(image_config, sort_keys=True).encode()
    manifest = {
        "schemaVersion": 2,
        "mediaType": MANIFEST_TYPE,
        "config": {"mediaType": CONFIG_TYPE, "digest": _digest(config_blob), "size": len(config_blob)},
        "layers": [{"mediaType": LAYER_TYPE, "digest": _digest(layer), "size": len(layer)}],
    }
    manifest_blob = json.dumps(manifest, sort_keys=True).encode()
    index = {
        "schemaVersion": 2,
        "manifests": [
            {
                "mediaType": MANIFEST_TYPE,
                "digest": _digest(manifest_blob),
                "size": len(manifest_blob),
                "annotations": {
                    "io.containerd.image.name": name,
                    "org.opencontainers.image.ref.name": name.rsplit(":", 1)[-1],
                },
            }
        ],
    }
    files = {
        "oci-layout": json.dumps({"imageLayoutVersion": "1.0.0"}).encode(),
        "index.json": json.dumps(index, sort_keys=True).encode(),
        **{f"blobs/sha256/{_digest(b)[7:]}": b for b in (layer, config_blob, manifest_blob)},
    }
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for path, data in files.items():
            info = tarfile.TarInfo(path)
            info.size, info.mtime = len(data), 0
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def single_binary_image(binary: Path, path: str, name: str, out: Path) -> None:
    """Write an image whose only file is ``binary`` at ``path``, its entrypoint, to ``out``."""
    layer = layer_with_file(binary.read_bytes(), path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(image_archive(layer, name, {"Entrypoint": [path]}))
