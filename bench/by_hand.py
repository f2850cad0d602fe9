"""bench/cluster.py's baseline: a managed cluster's slurmctld and one slurmd started by hand. No Kubernetes, no
operator, no container runtime.

The same daemons as the pods': the project's Slurm images are built from the stack's Slurm chroot
(``slinky.dev.stack.slurm_root()``, the same Slurm 26.05 packages, its SlurmUser ``slurm`` at uid 401 as in
the images), and each daemon starts the way its container does: the image's entry point script
(deploy/images/slurm/<daemon>-entrypoint.sh, without ``tini``, the container's init) with the container's
``args`` and literal ``env``, as its ``runAsUser``/``runAsGroup`` (``fsGroup`` as a supplementary group and
the group of its volumes' files), with its ``volumeMounts`` and its pod's hostname. Each runs in a network
namespace of its own (``slinky-bench-<run>-ctld`` and ``-node``, joined by one veth pair in RFC 2544's
198.18.0.0/24 and to nothing else), in a private mount and UTS namespace (``ip netns exec``, ``unshare
--mount --uts``) whose bind mounts put its own /etc/hosts (every name the pods resolve through the cluster
DNS), /etc/slurm, /run, /var/log/slurm, /var/spool/slurmd and state directory over the shared chroot.
Authentication is auth/slurm: the Controller's slurm.key in each /etc/slurm, as the pods mount it.

Every call blocks: run them in a thread.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import posixpath
import shlex
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final

from slinky.dev.procs import kill_namespace

Obj = dict[str, Any]
REPO: Final = Path(__file__).resolve().parents[1]
ENTRYPOINTS: Final = REPO / "deploy" / "images" / "slurm"
"""The images' entry point scripts, ``<container>-entrypoint.sh``."""
SSH_SERVICES_SOURCE = '. "${SLINKY_LIB:-/usr/local/lib/slinky}/ssh-services.sh"'
"""How the login and slurmd entry points load sshd's start (deploy/images/slurm/ssh-services.sh)."""
TINI: Final = "exec tini -g -- "
"""How an entry point hands over to its daemon: tini is the container's PID 1; by hand the daemon is ``exec``ed."""
HOST_ENV: Final = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}
IMAGE_PATH: Final = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
"""The images' ``ENV PATH`` (deploy/images/build-slurm.sh)."""
NETNS_PREFIX: Final = "slinky-bench-"
CTLD_ADDRESS: Final = "198.18.0.1"
NODE_ADDRESS: Final = "198.18.0.2"
PREFIX_LEN: Final = 24


def under(root: Path, path: str) -> str:
    """``path`` (absolute, inside the chroot) as a host path under ``root``."""
    return posixpath.join(str(root), posixpath.normpath(path).lstrip("/"))


@dataclasses.dataclass(frozen=True)
class Bind:
    source: Path
    target: str
    """Absolute, inside the chroot."""


def mount_script(root: Path, binds: Sequence[Bind], hostname: str) -> str:
    """The ``sh -c`` script run in the daemon's fresh mount and UTS namespaces before it becomes the daemon: each
    bind in order (its target made first: a directory, or an empty file for a file), the hostname, ``exec "$@"``."""
    lines = ["set -e"]
    for bind in binds:
        src, dst = shlex.quote(str(bind.source)), shlex.quote(under(root, bind.target))
        lines.append(
            f'if [ -d {src} ]; then mkdir -p {dst}; else mkdir -p "$(dirname {dst})"; [ -e {dst} ] || : > {dst}; fi'
        )
        lines.append(f"mount --bind {src} {dst}")
    lines += [f"hostname {shlex.quote(hostname)}", 'exec "$@"']
    return "\n".join(lines)


def entrypoint(container: str) -> str:
    """The image's entry point script for ``container``, its daemon ``exec``ed without tini, with the file it
    sources (``ssh-services.sh``, where the image keeps it) inlined: the chroot has no copy."""
    text = (ENTRYPOINTS / f"{container}-entrypoint.sh").read_text()
    if TINI not in text:
        raise RuntimeError(f"{container}-entrypoint.sh no longer hands over with {TINI!r}")
    if SSH_SERVICES_SOURCE in text:
        text = text.replace(SSH_SERVICES_SOURCE, (ENTRYPOINTS / "ssh-services.sh").read_text())
    return text.replace(TINI, "exec ")


def container_of(pod: Obj, name: str) -> Obj:
    return next(dict(c) for c in pod["spec"]["containers"] if c.get("name") == name)


def identity(pod: Obj, container: Obj) -> tuple[int, int, int | None]:
    """uid, gid and fsGroup of the container: its securityContext over the pod's, root when neither says."""
    pod_ctx = pod["spec"].get("securityContext") or {}
    ctx = {**pod_ctx, **{k: v for k, v in (container.get("securityContext") or {}).items() if v is not None}}
    uid = int(ctx.get("runAsUser") or 0)
    gid = uid if ctx.get("runAsGroup") is None else int(ctx["runAsGroup"])
    fs_group = pod_ctx.get("fsGroup")
    return uid, gid, int(fs_group) if fs_group is not None else None


def volume_files_mode(pod: Obj, volume: str) -> tuple[int, int]:
    """Mode and group of a Secret/ConfigMap/projected volume's files: ``defaultMode`` (0644 when unset); with an
    ``fsGroup``, that group, and it may read them (as the kubelet makes them)."""
    mode = 0o644
    for v in pod["spec"].get("volumes") or []:
        if v.get("name") == volume:
            source = v.get("projected") or v.get("secret") or v.get("configMap") or {}
            mode = int(source.get("defaultMode", mode))
    group = (pod["spec"].get("securityContext") or {}).get("fsGroup")
    return (mode | 0o040, int(group)) if group is not None else (mode, 0)


@dataclasses.dataclass
class Daemon:
    """One daemon of ours: how to start it (again), and its process while it runs."""

    name: str
    """The container's: ``slurmctld`` or ``slurmd``."""
    netns: str
    hostname: str
    uid: int
    gid: int
    groups: tuple[int, ...]
    binds: list[Bind]
    args: list[str]
    env: dict[str, str]
    log: Path
    proc: subprocess.Popen[bytes] | None = None

    def argv(self, root: Path) -> list[str]:
        """``ip netns exec`` and ``unshare``, the mount script, ``chroot`` as its user with a clean environment,
        the entry point: each ``exec``s the next, so the PID becomes the daemon's."""
        groups = [f"--groups={','.join(map(str, self.groups))}"] if self.groups else []
        return [
            *("ip", "netns", "exec", self.netns, "unshare", "--mount", "--uts", "--"),
            *("sh", "-c", mount_script(root, self.binds, self.hostname), "sh"),
            *("chroot", f"--userspec={self.uid}:{self.gid}", *groups, str(root)),
            *("/usr/bin/env", "-i", f"PATH={IMAGE_PATH}", *(f"{k}={v}" for k, v in self.env.items() if k != "PATH")),
            *("bash", "-c", entrypoint(self.name), "entrypoint.sh", *self.args),
        ]


def ip(*argv: str) -> None:
    proc = subprocess.run(["ip", *argv], capture_output=True, text=True, env=HOST_ENV, timeout=30)
    if proc.returncode != 0:
        raise RuntimeError(f"ip {' '.join(argv)}: {proc.stderr.strip()}")


def bench_namespaces() -> list[str]:
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, env=HOST_ENV)
    return [n for n in listed.stdout.split() if n.startswith(NETNS_PREFIX)]


def dns_forms(name: str, namespace: str) -> list[str]:
    return [f"{name}.{namespace}.svc.cluster.local", f"{name}.{namespace}.svc", f"{name}.{namespace}", name]


class ByHand:
    """slurmctld and one ``slurmd -Z``, started by hand from the operator's ConfigMap, keys and pods."""

    def __init__(self, run: str, root: Path, work: Path, log_dir: Path) -> None:
        self.run, self.root, self.work, self.log_dir = run, root, work, log_dir
        self.ctld_netns = f"{NETNS_PREFIX}{run}-ctld"
        self.node_netns = f"{NETNS_PREFIX}{run}-node"
        self.made_netns: list[str] = []
        self.made_targets: list[Path] = []
        """Mount points the mount scripts make in the shared chroot (they did not exist): removed at the end."""
        self.ctld: Daemon | None = None
        self.node: Daemon | None = None
        self.conf_dir: Path | None = None
        self.base_conf = ""
        """slurm.conf as the operator rendered it (the by-hand config changes append to this)."""

    # ------------------------------------------------------------------------------- set-up
    def _dir(self, path: Path, owner: tuple[int, int]) -> Path:
        path.mkdir(parents=True, exist_ok=True)
        os.chown(path, *owner)
        return path

    def _files(self, directory: Path, files: Mapping[str, str], pod: Obj, volume: str) -> Path:
        """A Secret/ConfigMap volume's files, owned and readable as the pod's kubelet makes them."""
        mode, group = volume_files_mode(pod, volume)
        self._dir(directory, (0, 0))
        for name, text in files.items():
            path = directory / name
            path.write_text(text)
            os.chown(path, 0, group)
            os.chmod(path, mode)
        return directory

    def _daemon(self, netns: str, pod: Obj, name: str, files: Mapping[str, Path]) -> Daemon:
        """The daemon of ``pod``'s container ``name``: its user, args, env; a private /etc/hosts, /run,
        /var/log/slurm and /var/spool/slurmd (what a container's own filesystem gives it), then its
        volumeMounts: ``files`` by volume name, a fresh directory for any other (emptyDir, the state PVC)."""
        container = container_of(pod, name)
        uid, gid, fs_group = identity(pod, container)
        owner = (uid, gid if fs_group is None else fs_group)
        base = self.work / name
        sources: dict[str, Path] = {
            "/etc/hosts": self.work / "hosts",
            "/run": self._dir(base / "run", owner),
            "/var/log/slurm": self._dir(base / "log", owner),
            "/var/spool/slurmd": self._dir(base / "spool", owner),
        }
        for mount in container.get("volumeMounts") or []:
            volume = str(mount["name"])
            sources[str(mount["mountPath"])] = files.get(volume) or self._dir(base / "volumes" / volume, owner)
        binds: list[Bind] = []
        for target in sorted(sources, key=lambda t: (t.count("/"), t)):  # a mount inside another after it
            inside_earlier = any(target.startswith(b.target.rstrip("/") + "/") for b in binds)
            if not inside_earlier and not os.path.lexists(under(self.root, target)):
                self.made_targets.append(Path(under(self.root, target)))
            binds.append(Bind(sources[target], target))
        env = {e["name"]: str(e["value"]) for e in container.get("env") or [] if "name" in e and "value" in e}
        args = [str(a) for a in container.get("args") or []]
        hostname = str(pod["spec"].get("hostname") or pod["metadata"]["name"])
        groups = (fs_group,) if fs_group is not None else ()
        log = self.log_dir / f"{self.run}-{name}.log"
        return Daemon(name, netns, hostname, uid, gid, groups, binds, args, env, log)

    def prepare(self, namespace: str, files: Mapping[str, str], keys: Mapping[str, str], ctld: Obj, node: Obj) -> None:
        """Network namespaces, /etc/hosts, config files and keys; the two daemons' launches. ``files``: the
        ConfigMap's (slurm.conf, cgroup.conf); ``keys``: slurm.key and jwt.key; ``ctld``, ``node``: the operator's
        pods, whose containers give each daemon's arguments, user and mounts."""
        self.work.mkdir(parents=True, exist_ok=True)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self._network()
        ctld_name = f"{ctld['spec']['hostname']}.{ctld['spec']['subdomain']}"
        node_name = f"{node['spec']['hostname']}.{node['spec']['subdomain']}"
        controller = str(ctld["metadata"]["name"]).rsplit("-", 1)[0]  # slurm-controller-0 -> its Service's name
        controller_names = [
            *dns_forms(ctld_name, namespace),
            str(ctld["spec"]["hostname"]),
            *dns_forms(controller, namespace),
            *dns_forms(str(ctld["spec"]["subdomain"]), namespace),
        ]
        node_names = [*dns_forms(node_name, namespace), str(node["spec"]["hostname"])]
        (self.work / "hosts").write_text(
            f"127.0.0.1 localhost\n{CTLD_ADDRESS} {' '.join(controller_names)}\n{NODE_ADDRESS} {' '.join(node_names)}\n"
        )
        self.base_conf = files["slurm.conf"]
        self.conf_dir = self._files(self.work / "ctld-etc", {**files, **keys}, ctld, "slurm-etc")
        node_etc = self._files(self.work / "node-etc", {"slurm.key": keys["slurm.key"]}, node, "slurm-etc")
        self.ctld = self._daemon(self.ctld_netns, ctld, "slurmctld", {"slurm-etc": self.conf_dir})
        self.node = self._daemon(self.node_netns, node, "slurmd", {"slurm-etc": node_etc})

    def _network(self) -> None:
        """Two namespaces joined by one veth pair, made inside them (no interface is ever in the host's)."""
        for name in (self.ctld_netns, self.node_netns):
            ip("netns", "add", name)
            self.made_netns.append(name)
        ctld_if, node_if = f"slkb{self.run}c", f"slkb{self.run}n"
        peer = ("peer", "name", node_if, "netns", self.node_netns)
        ip("link", "add", ctld_if, "netns", self.ctld_netns, "type", "veth", *peer)
        sides = ((self.ctld_netns, ctld_if, CTLD_ADDRESS), (self.node_netns, node_if, NODE_ADDRESS))
        for netns, ifname, address in sides:
            ip("-n", netns, "link", "set", ifname, "name", "eth0")
            ip("-n", netns, "addr", "add", f"{address}/{PREFIX_LEN}", "dev", "eth0")
            ip("-n", netns, "link", "set", "eth0", "up")
            ip("-n", netns, "link", "set", "lo", "up")

    # ------------------------------------------------------------------------------- processes
    def start(self, daemon: Daemon) -> int:
        with daemon.log.open("ab") as out:
            daemon.proc = subprocess.Popen(
                daemon.argv(self.root),
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=HOST_ENV,
                start_new_session=True,
            )
        return daemon.proc.pid

    @staticmethod
    def stop(daemon: Daemon | None, timeout: float = 10.0) -> None:
        """SIGTERM (SIGKILL after ``timeout``) and reap: the PID is the daemon's, and ours until reaped."""
        if daemon is None or daemon.proc is None:
            return
        proc, daemon.proc = daemon.proc, None
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)

    def start_ctld(self) -> int:
        assert self.ctld is not None
        return self.start(self.ctld)

    def start_node(self) -> int:
        assert self.node is not None
        return self.start(self.node)

    def ctld_pid(self) -> int | None:
        proc = self.ctld.proc if self.ctld else None
        return proc.pid if proc is not None and proc.poll() is None else None

    def write_slurm_conf(self, text: str) -> None:
        """In place: the bind mount keeps the inode, and the file its owner and mode."""
        assert self.conf_dir is not None
        (self.conf_dir / "slurm.conf").write_text(text)

    # ------------------------------------------------------------------------------- cleanup
    def cleanup(self) -> Obj:
        """Stop both daemons, kill what is left in the namespaces (job steps), delete the namespaces (their veth
        pair goes with them), the files and the mount points the mount scripts made in the chroot."""
        for daemon in (self.node, self.ctld):
            with contextlib.suppress(Exception):
                self.stop(daemon, 5.0)
        left = 0
        for name in self.made_netns:
            left += kill_namespace(name)
            subprocess.run(["ip", "netns", "delete", name], capture_output=True, env=HOST_ENV)
        self.made_netns = []
        for target in reversed(self.made_targets):  # deepest first; a file or an empty directory only
            with contextlib.suppress(OSError):
                target.rmdir() if target.is_dir() else target.unlink()
        self.made_targets = []
        shutil.rmtree(self.work, ignore_errors=True)
        return {"processes_left": left}
