"""The dev stack's images in its registry: what the real nodes pull (docs/images.md).

* The Slurm images (``deploy/images/build-slurm.sh``): ``slinky/<name>:26.05`` and, for the registry host the
  stack's registry mirrors (``real_nodes.MIRRORED_REGISTRIES``), upstream's names
  ``slinkyproject/<name>:26.05-ubuntu26.04``, so a manifest written for upstream pulls ours unchanged.
* The small images of the real nodes (``slinky/busybox``, ``slinky/pause``), from the OCI archives the nodes
  import.
* The examples' nginx (``deploy/images/build-nginx.sh``): ``slinky/nginx:1.22`` and docker.io's
  ``library/nginx:{1.22,latest}``, so ``image: nginx`` in deploy/examples/podgroup-nginx*.yaml pulls it.
* The project's image (``deploy/images/build.sh``) by ``make images``.

Pushing is skopeo from podman's storage, idempotent: an image the registry already has is not pushed again.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Final

SLURM_IMAGES: Final = ("slurmctld", "slurmd", "slurmrestd", "slurmdbd", "sackd", "login")
SLURM_TAG: Final = "26.05"
LOCAL_PREFIX: Final = "localhost/slinky"
"""Where ``build-slurm.sh`` tags the images in podman's storage."""
UPSTREAM_REPOSITORY: Final = "slinkyproject"
UPSTREAM_TAG: Final = "26.05-ubuntu26.04"
"""Upstream's image tag for Slurm 26.05 (its chart's default), under which the mirror serves ours."""
PROJECT_IMAGE: Final = "slinky-temporal"
NGINX_TAG: Final = "1.22"
NGINX_IMAGE: Final = f"{LOCAL_PREFIX}/nginx:{NGINX_TAG}"
"""Debian bookworm's nginx (``deploy/images/build-nginx.sh``), for the bridge's examples."""


@dataclass(frozen=True)
class Push:
    """One image copied from podman's storage or an archive (``source``) to the registry (``target``, ``REPO:TAG``)."""

    source: str
    target: str
    transport: str = "containers-storage"
    """skopeo's transport of ``source``: podman's storage, or ``oci-archive`` (a file)."""


def slurm_pushes() -> list[Push]:
    """Each Slurm image under the stack's name and under upstream's mirrored name."""
    out: list[Push] = []
    for name in SLURM_IMAGES:
        source = f"{LOCAL_PREFIX}/{name}:{SLURM_TAG}"
        out.append(Push(source, f"slinky/{name}:{SLURM_TAG}"))
        out.append(Push(source, f"{UPSTREAM_REPOSITORY}/{name}:{UPSTREAM_TAG}"))
    return out


def project_push(tag: str) -> Push:
    return Push(f"localhost/{PROJECT_IMAGE}:{tag}", f"slinky/{PROJECT_IMAGE}:{tag}")


PROJECT_SOURCES: Final = ("pyproject.toml", "uv.lock", "slinky", "workflows", "activities", "workers")
"""What the project's image is built from, besides deploy/images/{build.sh,Containerfile}."""


def project_sources_id() -> str:
    """A hash of the files the project's image is made of (the packages' sources, the lock, the build)."""
    root = repo_root()
    digest = hashlib.sha256()
    files: list[Path] = [root / "deploy" / "images" / "build.sh", root / "deploy" / "images" / "Containerfile"]
    for name in PROJECT_SOURCES:
        path = root / name
        files.extend(
            sorted(f for f in path.rglob("*") if f.is_file() and "__pycache__" not in f.parts)
            if path.is_dir()
            else [path]
        )
    for path in files:
        digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:12]


def ensure_project_image(registry: str, log: Callable[[str], None]) -> str:
    """The project's image as the working tree makes it, in the registry: ``HOST:PORT/slinky/slinky-temporal:
    <version>-<sources id>``, built (deploy/images/build.sh, ~90 s cold) and pushed when the registry lacks it.
    Returns the image reference a pod names."""
    tag = f"{project_version()}-{project_sources_id()}"
    item = project_push(tag)
    if not registry_has(registry, item.target):
        if not local_image_exists(item.source):
            run_build("build.sh", item.source, f"the project's image {item.source}", log)
        push(registry, [item], log)
    return f"{registry}/{item.target}"


def project_version() -> str:
    """The version in pyproject.toml: the project image's tag (deploy/images/build.sh)."""
    for line in (repo_root() / "pyproject.toml").read_text().splitlines():
        if line.startswith("version = "):
            return line.split("=", 1)[1].strip().strip('"')
    raise RuntimeError("pyproject.toml has no version")


def registry_has(registry: str, reference: str) -> bool:
    """Whether the registry at ``HOST:PORT`` has ``REPO:TAG``."""
    repo, _, tag = reference.rpartition(":")
    request = urllib.request.Request(
        f"http://{registry}/v2/{repo}/manifests/{tag}",
        method="HEAD",
        headers={
            "Accept": ", ".join(
                (
                    "application/vnd.oci.image.manifest.v1+json",
                    "application/vnd.docker.distribution.manifest.v2+json",
                )
            )
        },
    )
    try:
        with urllib.request.urlopen(request, timeout=5) as resp:
            return bool(resp.status == 200)
    except (OSError, urllib.error.URLError):
        return False


def registry_ready(registry: str) -> bool:
    try:
        with urllib.request.urlopen(f"http://{registry}/v2/", timeout=2) as resp:
            return bool(resp.status == 200)
    except (OSError, urllib.error.URLError):
        return False


def local_image_exists(image: str) -> bool:
    return subprocess.run(["podman", "image", "exists", image], check=False, env=_podman_env()).returncode == 0


def _podman_env() -> dict[str, str]:
    return {**os.environ, "CONTAINERS_CONF": str(repo_root() / "deploy" / "images" / "containers.conf")}


def repo_root() -> Path:
    return Path(__file__).resolve().parents[2]


def run_build(script: str, argument: str, what: str, log: Callable[[str], None]) -> None:
    """``bash deploy/images/<script> <argument>``; RuntimeError with the end of its stderr when it fails."""
    log(f"building {what} (deploy/images/{script})")
    path = repo_root() / "deploy" / "images" / script
    done = subprocess.run(["bash", str(path), argument], check=False, text=True, capture_output=True)
    if done.returncode != 0:
        raise RuntimeError(f"deploy/images/{script} failed:\n{done.stderr[-3000:]}")


def build_slurm_images(log: Callable[[str], None]) -> None:
    """``deploy/images/build-slurm.sh`` (about 15 s with the stack's Slurm rootfs cached)."""
    run_build("build-slurm.sh", LOCAL_PREFIX, "the Slurm images", log)


def push(registry: str, pushes: Iterable[Push], log: Callable[[str], None], *, force: bool = False) -> list[str]:
    """Copy each image the registry lacks (all of them with ``force``); the targets pushed."""
    pushed: list[str] = []
    for item in pushes:
        if not force and registry_has(registry, item.target):
            continue
        source = f"{item.transport}:{item.source}"
        done = subprocess.run(
            ["skopeo", "copy", "--quiet", "--dest-tls-verify=false", source, f"docker://{registry}/{item.target}"],
            check=False,
            text=True,
            capture_output=True,
            env=_podman_env(),
        )
        if done.returncode != 0:
            raise RuntimeError(f"skopeo copy {source} -> {registry}/{item.target}: {done.stderr.strip()}")
        log(f"pushed {registry}/{item.target}")
        pushed.append(item.target)
    return pushed


def push_archives(registry: str, archives: Iterable[tuple[Path, str]], log: Callable[[str], None]) -> None:
    """OCI archives (path, ``REPO:TAG``) the registry lacks; an archive not made yet is skipped."""
    push(registry, [Push(str(path), target, "oci-archive") for path, target in archives if path.is_file()], log)


def sources_id(files: Iterable[Path], salt: str = "") -> str:
    """A hash of the files an image is made of (and ``salt``: the Slurm rootfs's build id)."""
    digest = hashlib.sha256(salt.encode())
    for path in files:
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


def slurm_sources_id(rootfs_id: str) -> str:
    """What the Slurm images are made of: the build script, the Containerfile and entry points, and the Slurm
    rootfs's build id. The registry outlives the stack; a change means build and push again."""
    folder = repo_root() / "deploy" / "images"
    return sources_id([folder / "build-slurm.sh", *sorted((folder / "slurm").iterdir())], rootfs_id)


def nginx_sources_id() -> str:
    folder = repo_root() / "deploy" / "images"
    return sources_id([folder / "build-nginx.sh", folder / "nginx" / "Containerfile"])


def nginx_pushes() -> list[Push]:
    """The examples' nginx under the stack's name and as docker.io's ``library/nginx`` (``image: nginx``)."""
    return [Push(NGINX_IMAGE, f"slinky/nginx:{NGINX_TAG}")] + [
        Push(NGINX_IMAGE, f"library/nginx:{tag}") for tag in (NGINX_TAG, "latest")
    ]


def build_nginx_image(log: Callable[[str], None]) -> None:
    """``deploy/images/build-nginx.sh`` (a few seconds: Debian's nginx-light over the project's base)."""
    run_build("build-nginx.sh", NGINX_IMAGE, "the examples' nginx image", log)


def ensure_images(
    registry: str,
    stamp: Path,
    pushes: list[Push],
    wanted: str,
    build: Callable[[Callable[[str], None]], None],
    log: Callable[[str], None],
) -> bool:
    """Images in the registry as their sources now make them: built and pushed again when ``stamp`` (beside the
    registry's storage) records other sources (``wanted``), pushed when the registry lacks one. True when they
    were made again (a node that pulled the old image under the same tag must forget it)."""
    current = stamp.is_file() and stamp.read_text().strip() == wanted
    if current and all(registry_has(registry, p.target) for p in pushes):
        return False
    if not current or not all(local_image_exists(p.source) for p in pushes):
        build(log)
    push(registry, pushes, log, force=not current)
    stamp.write_text(wanted + "\n")
    return not current


def ensure_slurm_images(registry: str, stamp: Path, rootfs_id: str, log: Callable[[str], None]) -> bool:
    return ensure_images(registry, stamp, slurm_pushes(), slurm_sources_id(rootfs_id), build_slurm_images, log)


def pulled_names(registry: str, pushes: Iterable[Push]) -> list[str]:
    """The names a node may hold each pushed image under: the registry's, and for upstream's names the mirrored
    registries' (``ghcr.io/slinkyproject/slurmd:...``)."""
    from slinky.dev import real_nodes

    out = []
    for item in pushes:
        out.append(f"{registry}/{item.target}")
        if item.target.startswith(f"{UPSTREAM_REPOSITORY}/"):
            out += [f"{host}/{item.target}" for host in real_nodes.MIRRORED_REGISTRIES]
    return out


def ensure_nginx_image(registry: str, stamp: Path, log: Callable[[str], None]) -> None:
    ensure_images(registry, stamp, nginx_pushes(), nginx_sources_id(), build_nginx_image, log)
