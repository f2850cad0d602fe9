"""Which containers the node agent runs as real Slurm daemons, and how, as pure functions.

A kubelet runs a container's image; the dev stack has no images, so the agent picks the program by the
container's *name* from the Slurm rootfs (docs/dev-stack.md, "Daemon pods"): the pod's first container named
one of :data:`DAEMONS` runs as that daemon in the foreground with the container's ``args`` appended (the
image, ``command`` and entrypoint are recorded, not run). Every other container of such a pod is simulated.

What a daemon needs beside its arguments is here too: the user it starts as (a pod's ``runAsUser`` wins),
the environment it must have (``SLURM_JWT=daemon`` for slurmrestd, bookworm's libmariadb for slurmdbd), who
owns the files of its volumes (as ``fsGroup`` would make them readable), and the shell script that builds
its mount namespace. ``slinky.dev.slurmd_runtime`` does the I/O.
"""

from __future__ import annotations

import dataclasses
import posixpath
import shlex
from collections.abc import Mapping, Sequence
from typing import Any, Final

Obj = dict[str, Any]


@dataclasses.dataclass(frozen=True)
class Daemon:
    """How one kind of daemon container runs."""

    container: str
    executable: str
    foreground: tuple[str, ...]
    """Arguments that keep it in the foreground, before the container's own."""
    user: str = "root"
    """The user it starts as unless the pod's securityContext names one (slurmctld and slurmdbd start as root
    and switch to SlurmUser themselves; slurmrestd refuses root)."""
    env: Mapping[str, str] = dataclasses.field(default_factory=dict)
    file_owner: str = "root"
    """Owner of its volumes' files and directories (what ``fsGroup`` would make readable to it)."""


DAEMONS: Final[Mapping[str, Daemon]] = {
    d.container: d
    for d in (
        Daemon("slurmd", "/usr/sbin/slurmd", ("-D",)),
        Daemon("slurmctld", "/usr/sbin/slurmctld", ("-D",), file_owner="slurm"),
        Daemon("slurmrestd", "/usr/sbin/slurmrestd", (), user="slurmrest", env={"SLURM_JWT": "daemon"}),
        Daemon(
            "slurmdbd",
            "/usr/sbin/slurmdbd",
            ("-D",),
            env={"LD_LIBRARY_PATH": "/opt/slinky/libmariadb"},
            file_owner="slurm",
        ),
        Daemon("login", "/usr/sbin/sackd", ("-D",)),
        Daemon("sackd", "/usr/sbin/sackd", ("-D",)),
    )
}
"""By container name. ``login`` is upstream's LoginSet container: here it runs sackd only (no sshd)."""


def daemon_container(pod: Mapping[str, Any]) -> tuple[Daemon, Obj] | None:
    """The daemon and its container: the pod's first container named after a daemon, else None."""
    for container in (pod.get("spec") or {}).get("containers") or []:
        daemon = DAEMONS.get(str(container.get("name")))
        if daemon is not None:
            return daemon, dict(container)
    return None


IMAGE_USERS: Final[Mapping[int, str]] = {401: "slurm"}
"""Users of upstream's container images by uid: their `slurm` user is 401; the rootfs's has Debian's uid."""


def run_user(daemon: Daemon, pod: Mapping[str, Any], container: Mapping[str, Any]) -> str:
    """``uid:gid`` or a user name for ``chroot --userspec``: the container's or pod's ``runAsUser`` (and
    ``runAsGroup``, else the same number) if set, else the daemon's own user. Upstream's images' uid 401 is
    the rootfs's ``slurm`` user."""
    pod_ctx = (pod.get("spec") or {}).get("securityContext") or {}
    ctx = {**pod_ctx, **{k: v for k, v in (container.get("securityContext") or {}).items() if v is not None}}
    uid = ctx.get("runAsUser")
    if uid is None:
        return daemon.user
    if int(uid) in IMAGE_USERS:
        return IMAGE_USERS[int(uid)]
    if int(uid) == 0:
        return "root"
    gid = ctx.get("runAsGroup", uid)
    return f"{int(uid)}:{int(gid)}"


def file_owner(daemon: Daemon, user: str) -> str:
    """Who owns the volumes' files: the user the daemon runs as, unless that is root (then the daemon's
    file owner: slurmctld and slurmdbd read their keys after switching to SlurmUser)."""
    return daemon.file_owner if user == "root" else user


def argv(daemon: Daemon, container: Mapping[str, Any], extra: Sequence[str] = ()) -> list[str]:
    """The daemon's command line: executable, foreground flags, then the container's ``args`` (``extra``
    replaces them when given: slurmd's are merged with the pod's address first)."""
    args = list(extra) if extra else [str(a) for a in container.get("args") or []]
    return [daemon.executable, *(f for f in daemon.foreground if f not in args), *args]


@dataclasses.dataclass(frozen=True)
class Bind:
    """One bind mount made in the pod's mount namespace: host path -> absolute target path."""

    source: str
    target: str
    recursive: bool = False


def mount_script(binds: Sequence[Bind], hostname: str) -> str:
    """The ``sh -c`` script run in the pod's fresh mount and UTS namespaces before it becomes the daemon: for
    each bind in order, make its target (a directory, or an empty file for a file source) and mount it; set the
    hostname; ``exec "$@"``. The caller orders the binds (a mount inside another comes after it)."""
    lines = ["set -e"]
    for bind in binds:
        src, dst = shlex.quote(bind.source), shlex.quote(bind.target)
        lines.append(
            f'if [ -d {src} ]; then mkdir -p {dst}; else mkdir -p "$(dirname {dst})"; [ -e {dst} ] || : > {dst}; fi'
        )
        lines.append(f"mount {'--rbind' if bind.recursive else '--bind'} {src} {dst}")
    lines.append(f"hostname {shlex.quote(hostname)}")
    lines.append('exec "$@"')
    return "\n".join(lines)


def under(root: str, path: str) -> str:
    """``path`` (absolute, inside the chroot) as a host path under ``root``."""
    return posixpath.join(root, posixpath.normpath(path).lstrip("/"))


def probe(container: Mapping[str, Any], kind: str = "readinessProbe") -> tuple[str, int, str] | None:
    """A ``tcpSocket`` or ``httpGet`` probe as (``tcp``/``http``, port, path); a named port is looked up in the
    container's ports; None when there is none (or an ``exec`` probe, which the agent does not run)."""
    spec = container.get(kind) or {}
    for handler in ("tcpSocket", "httpGet"):
        action = spec.get(handler)
        if not action:
            continue
        port = action.get("port")
        if isinstance(port, str) and not port.isdigit():
            named = [p for p in container.get("ports") or [] if p.get("name") == port]
            if not named:
                return None
            port = named[0].get("containerPort")
        return ("tcp" if handler == "tcpSocket" else "http", int(port), str(action.get("path") or "/"))
    return None
