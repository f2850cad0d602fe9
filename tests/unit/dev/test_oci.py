"""The OCI archive of a single-binary image (the pause image): what ``ctr images import`` reads."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from pathlib import Path

from slinky.dev.oci import single_binary_image


def test_the_archive_is_an_image_layout_whose_digests_and_layer_match(tmp_path: Path) -> None:
    binary = tmp_path / "pause"
    binary.write_bytes(b"\x7fELF fake pause")
    out = tmp_path / "pause.oci.tar"
    single_binary_image(binary, "/pause", "localhost/pause:3.4", out)
    with tarfile.open(out) as tar:
        files = {m.name: tar.extractfile(m).read() for m in tar.getmembers()}  # type: ignore[union-attr]
    assert json.loads(files["oci-layout"]) == {"imageLayoutVersion": "1.0.0"}
    for name, data in files.items():
        if name.startswith("blobs/sha256/"):
            assert hashlib.sha256(data).hexdigest() == name.rsplit("/", 1)[1]
    [entry] = json.loads(files["index.json"])["manifests"]
    assert entry["annotations"]["io.containerd.image.name"] == "localhost/pause:3.4"
    manifest = json.loads(files[f"blobs/sha256/{entry['digest'][7:]}"])
    config = json.loads(files[f"blobs/sha256/{manifest['config']['digest'][7:]}"])
    assert config["config"]["Entrypoint"] == ["/pause"] and config["os"] == "linux"
    [layer] = manifest["layers"]
    assert config["rootfs"]["diff_ids"] == [layer["digest"]]
    with tarfile.open(fileobj=io.BytesIO(files[f"blobs/sha256/{layer['digest'][7:]}"])) as tar:
        [member] = tar.getmembers()
        assert (member.name, member.mode & 0o777) == ("pause", 0o755)
        assert tar.extractfile(member).read() == b"\x7fELF fake pause"  # type: ignore[union-attr]
