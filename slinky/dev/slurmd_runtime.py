"""Real slurmd processes for NodeSet pods: one network namespace per pod, the process, and a state file.

Each pod gets a slot of the pool (``slinky.dev.slurmd_spec``): a namespace ``slinky-pod-<slot>``, a veth pair
whose host side is attached to the bridge ``slkpbr0`` (which holds the pool's first address, so slurmctld in
the host namespace reaches every pod and pods reach each other), and the slot's address on the pod's
``eth0``. slurmd runs from the Slurm chroot under ``unshare --mount --uts`` with the pod's hostname and
private bind mounts of ``/etc/hosts`` (the controller's name at the bridge), ``/var/spool/slurmd`` and
``/run/slurm`` (the configless cache), so pods never share a file.

The state file (``state.json``) records slot, PID and PID start time per pod uid before and after each
change, so a restarted agent re-adopts running daemons and ``slinky dev down`` stops exactly them. Every
call here blocks: the node agent runs them in threads.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import select
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

from slinky.dev import daemons, pod_volumes
from slinky.dev import slurmd_spec as spec
from slinky.dev.launch import Launch
from slinky.dev.procs import start_time

log = logging.getLogger("slinky.dev.slurmd_runtime")

CHROOT_PATH: Final = "PATH=/usr/sbin:/usr/bin:/sbin:/bin"
HOST_ENV: Final = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}
STATE_FILE: Final = "state.json"
STICKY_FILE: Final = "sticky.json"
"""The last address slot of each stable pod identity (``namespace/name`` of a pod with a subdomain)."""


def _run(argv: list[str], *, check: bool = True, timeout: float = 30.0) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, check=check, text=True, capture_output=True, env=HOST_ENV, timeout=timeout)


# --------------------------------------------------------------------------------------------- the network
def ensure_bridge() -> None:
    """Create the pool's bridge with its address, idempotently (the stack and the agent both call this)."""
    if not Path(f"/sys/class/net/{spec.BRIDGE}").exists():
        proc = _run(["ip", "link", "add", spec.BRIDGE, "type", "bridge"], check=False)
        if proc.returncode != 0 and not Path(f"/sys/class/net/{spec.BRIDGE}").exists():
            raise RuntimeError(f"ip link add {spec.BRIDGE} failed: {proc.stderr.strip()}")
    _run(["ip", "link", "set", spec.BRIDGE, "address", spec.BRIDGE_MAC])
    _run(["ip", "addr", "replace", f"{spec.BRIDGE_ADDRESS}/{spec.POOL.prefixlen}", "dev", spec.BRIDGE])
    _run(["ip", "link", "set", spec.BRIDGE, "up"])


def delete_bridge() -> None:
    if Path(f"/sys/class/net/{spec.BRIDGE}").exists():
        _run(["ip", "link", "delete", spec.BRIDGE], check=False)


def our_namespaces() -> list[str]:
    """Network namespaces named like ours (``slinky-pod-<slot>``)."""
    listed = _run(["ip", "netns", "list"], check=False).stdout.split()
    return [n for n in listed if n.startswith(spec.NETNS_PREFIX) and n[len(spec.NETNS_PREFIX) :].isdigit()]


def namespace_pids(name: str) -> list[int]:
    """Every process inside the named network namespace (a container's processes, slurmd's children too)."""
    try:
        inode = os.stat(f"/run/netns/{name}").st_ino
    except OSError:
        return []
    wanted = f"net:[{inode}]"
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if os.readlink(entry / "ns" / "net") == wanted:
                    pids.append(int(entry.name))
    return pids


def kill_namespace(name: str, *, timeout: float = 5.0) -> int:
    """SIGKILL whatever still runs in the namespace (as a runtime kills a container's cgroup): a process left
    there would keep the namespace, its veth and its address alive after ``ip netns delete``."""
    pids = namespace_pids(name)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + timeout
    while pids and time.monotonic() < deadline:
        pids = [p for p in pids if start_time(p) is not None]
        time.sleep(0.02)
    return len(namespace_pids(name))


def delete_namespace(slot: int) -> None:
    """Kill what runs in the slot's namespace and delete it (its veth pair goes with it), and a host-side veth
    left by a torn setup."""
    kill_namespace(spec.netns_name(slot))
    _run(["ip", "netns", "delete", spec.netns_name(slot)], check=False)
    if Path(f"/sys/class/net/{spec.host_ifname(slot)}").exists():
        _run(["ip", "link", "delete", spec.host_ifname(slot)], check=False)


def create_namespace(slot: int) -> None:
    """A fresh namespace for the slot: veth pair, host side on the bridge, ``eth0`` with the slot's address."""
    ns, host, peer = spec.netns_name(slot), spec.host_ifname(slot), spec.peer_ifname(slot)
    address = f"{spec.pod_address(slot)}/{spec.POOL.prefixlen}"
    delete_namespace(slot)
    for argv in (
        ["ip", "netns", "add", ns],
        ["ip", "link", "add", host, "type", "veth", "peer", "name", peer, "address", spec.pod_mac(slot)],
        ["ip", "link", "set", peer, "netns", ns],
        ["ip", "link", "set", host, "master", spec.BRIDGE],
        ["ip", "link", "set", host, "up"],
        ["ip", "-n", ns, "link", "set", peer, "name", "eth0"],
        ["ip", "-n", ns, "addr", "add", address, "dev", "eth0"],
        ["ip", "-n", ns, "link", "set", "eth0", "up"],
        ["ip", "-n", ns, "link", "set", "lo", "up"],
    ):
        _run(argv)


LOG_DIR: Final = "/var/log/slurm"


def _identity(pod: Mapping[str, Any]) -> str:
    """A pod's stable identity when it has one (a headless Service member: StatefulSet, NodeSet), else ""."""
    meta, spec_ = pod.get("metadata") or {}, pod.get("spec") or {}
    return f"{meta.get('namespace')}/{meta.get('name')}" if spec_.get("subdomain") else ""


def _write_text(path: Path, text: str) -> bool:
    """Write ``text`` in place when it differs (a bind-mounted file keeps its inode); True when it changed."""
    try:
        if path.read_text() == text:
            return False
    except OSError:
        pass
    with path.open("w") as f:
        f.write(text)
    return True


def _write_files(directory: Path, files: Mapping[str, tuple[bytes, int]], uid: int, gid: int) -> bool:
    """Make ``directory`` hold exactly ``files`` (relative path -> content, mode), owned by uid:gid. Each
    changed file is written beside and renamed over the old one, so a reader never sees half a file; files no
    longer listed go. True when anything changed."""
    changed = False
    directory.mkdir(parents=True, exist_ok=True)
    wanted = set()
    for rel, (content, mode) in files.items():
        path = directory / rel
        wanted.add(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            st = path.stat()
            same = path.read_bytes() == content and (st.st_mode & 0o7777, st.st_uid, st.st_gid) == (mode, uid, gid)
        except OSError:
            same = False
        if same:
            continue
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_bytes(content)
        os.chown(tmp, uid, gid)
        os.chmod(tmp, mode)
        tmp.replace(path)
        changed = True
    for path in list(directory.rglob("*")):
        if path.is_file() and path not in wanted:
            path.unlink()
            changed = True
    return changed


# --------------------------------------------------------------------------------------------- records
@dataclasses.dataclass
class PodProcess:
    """One pod's slurmd as the state file records it."""

    uid: str
    namespace: str
    name: str
    hostname: str
    slot: int
    pid: int = 0
    starttime: str = ""
    started_at: float = 0.0
    """Wall-clock time of the current process's start."""

    @property
    def address(self) -> str:
        return spec.pod_address(self.slot)

    @property
    def netns(self) -> str:
        return spec.netns_name(self.slot)

    def alive(self) -> bool:
        return self.pid > 0 and start_time(self.pid) == self.starttime

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> PodProcess:
        fields = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in fields})


def read_state(state_dir: Path) -> tuple[dict[str, PodProcess], int]:
    """The records and the last slot handed out; a missing or torn file reads as empty."""
    try:
        data = json.loads((state_dir / STATE_FILE).read_text())
    except (OSError, ValueError):
        return {}, -1
    pods = {uid: PodProcess.from_json(rec) for uid, rec in (data.get("pods") or {}).items()}
    return pods, int(data.get("last_slot", -1))


def write_state(state_dir: Path, pods: Mapping[str, PodProcess], last_slot: int) -> None:
    """Atomically (write, then rename): a crash never leaves a torn file."""
    state_dir.mkdir(parents=True, exist_ok=True)
    tmp = state_dir / (STATE_FILE + ".tmp")
    body = {"last_slot": last_slot, "pods": {uid: p.to_json() for uid, p in pods.items()}}
    tmp.write_text(json.dumps(body, indent=1, sort_keys=True))
    tmp.replace(state_dir / STATE_FILE)


def _wait_exit(fd: int, timeout: float) -> bool:
    """Wait on a pidfd; True once the process has exited."""
    readable, _, _ = select.select([fd], [], [], max(0.0, timeout))
    return bool(readable)


def signal_and_wait(pid: int, starttime: str, timeout: float) -> bool:
    """SIGTERM the very process (PID and start time), wait up to ``timeout``, then SIGKILL.

    Returns True when it had to be killed. A pidfd is taken first, so a PID reused meanwhile is never hit.
    """
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return False
    try:
        if start_time(pid) != starttime:
            return False
        with contextlib.suppress(ProcessLookupError):
            signal.pidfd_send_signal(fd, signal.SIGTERM)
        if _wait_exit(fd, timeout):
            return False
        with contextlib.suppress(ProcessLookupError):
            signal.pidfd_send_signal(fd, signal.SIGKILL)
        _wait_exit(fd, 10.0)
        return True
    finally:
        os.close(fd)


def stop_all(state_dir: Path, *, timeout: float = 10.0) -> int:
    """``slinky dev down``: stop every slurmd pod process we started, delete their namespaces and the bridge.

    Returns how many processes were running. Only records of the state file are signalled (PID and start
    time must match); only namespaces named like ours are deleted.
    """
    pods, last_slot = read_state(state_dir)
    running = [p for p in pods.values() if p.alive()]
    threads = [threading.Thread(target=signal_and_wait, args=(p.pid, p.starttime, timeout)) for p in running]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for name in our_namespaces():
        kill_namespace(name)
        _run(["ip", "netns", "delete", name], check=False)
    for p in pods.values():
        delete_namespace(p.slot)
    delete_bridge()
    write_state(state_dir, {}, last_slot)
    return len(running)


# --------------------------------------------------------------------------------------------- the runtime
def chroot_ids(root: Path, user: str) -> tuple[int, int]:
    """uid and gid of ``user`` in the Slurm chroot at ``root`` (a name in its passwd, or ``uid[:gid]``)."""
    if user.replace(":", "").isdigit():
        uid, _, gid = user.partition(":")
        return int(uid), int(gid or uid)
    for line in (root / "etc" / "passwd").read_text().splitlines():
        fields = line.split(":")
        if fields[0] == user and len(fields) > 3:
            return int(fields[2]), int(fields[3])
    raise OSError(f"user {user!r} is not in the Slurm chroot's /etc/passwd")


class SlurmdRuntime:
    """Starts, watches, stops and forgets pods' slurmd processes; thread-safe (the agent calls from threads)."""

    def __init__(self, root: Path, state_dir: Path, log_dir: Path, controller_host: str) -> None:
        self.root = root
        self.state_dir = state_dir
        self.log_dir = log_dir
        self.controller_host = controller_host
        self._lock = threading.Lock()
        self._pods: dict[str, PodProcess] = {}
        self._children: dict[str, subprocess.Popen[bytes]] = {}
        """Processes this agent started: their exit code is known. Re-adopted ones have none."""
        self._last_slot = -1

    # -- state ---------------------------------------------------------------------------------------------
    def load(self) -> list[PodProcess]:
        """Read the state file (after a restart): every record, alive or not."""
        with self._lock:
            self._pods, self._last_slot = read_state(self.state_dir)
            return list(self._pods.values())

    def _save(self) -> None:
        write_state(self.state_dir, self._pods, self._last_slot)

    def get(self, uid: str) -> PodProcess | None:
        with self._lock:
            return self._pods.get(uid)

    def records(self) -> list[PodProcess]:
        with self._lock:
            return list(self._pods.values())

    def alive(self, uid: str) -> bool:
        """Whether the pod's recorded process still runs (a finished child is reaped here)."""
        with self._lock:
            pod, child = self._pods.get(uid), self._children.get(uid)
        if child is not None and child.poll() is not None:
            return False
        return pod is not None and pod.alive()

    def exit_code(self, uid: str) -> int | None:
        """The exit code of a process this agent started and that has ended; None when unknown."""
        with self._lock:
            child = self._children.get(uid)
        if child is None:
            return None
        code = child.poll()
        if code is None:
            return None
        return 128 - code if code < 0 else code  # killed by signal N: 128 + N, as a container runtime says

    # -- paths ---------------------------------------------------------------------------------------------
    def _pod_dir(self, uid: str) -> Path:
        return self.state_dir / "pods" / uid

    def log_file(self, pod: PodProcess) -> Path:
        return self.log_dir / f"{pod.namespace}_{pod.name}_{pod.uid[:8]}.log"

    def log_tail(self, pod: PodProcess, size: int = 16384) -> str:
        """The end of the pod's log (what its daemon wrote last)."""
        try:
            with self.log_file(pod).open("rb") as f:
                f.seek(max(f.seek(0, os.SEEK_END) - size, 0))
                return f.read().decode(errors="replace")
        except OSError:
            return ""

    # -- start -------------------------------------------------------------------------------------------
    def start(self, pod: Mapping[str, Any], launch: Launch) -> PodProcess:
        """Reserve a slot (recorded first), build the namespace, start the daemon: the pod's first run."""
        meta = pod["metadata"]
        with self._lock:
            used = {p.slot for p in self._pods.values()}
            preferred = spec.slot_of((pod.get("status") or {}).get("podIP"))
            identity = _identity(pod)
            sticky = self._sticky().get(identity) if identity else None
            if preferred is None and sticky is not None and sticky not in used:
                # A StatefulSet or NodeSet pod made again under its name keeps its address, as its Service's
                # ClusterIP would stay: daemons that resolved the name once (slurmd, slurmrestd) still reach it.
                preferred = sticky
            slot = spec.allocate_slot(used, self._last_slot, preferred=preferred)
            record = PodProcess(meta["uid"], meta["namespace"], meta["name"], spec.node_name(pod), slot)
            self._pods[record.uid] = record
            if slot != preferred:
                self._last_slot = slot
            if identity:
                self._remember_sticky(identity, slot)
            self._save()
        try:
            create_namespace(slot)
            return self.spawn(record.uid, launch)
        except BaseException:
            self.release(record.uid)
            raise

    def _sticky(self) -> dict[str, int]:
        try:
            return {str(k): int(v) for k, v in json.loads((self.state_dir / STICKY_FILE).read_text()).items()}
        except (OSError, ValueError):
            return {}

    def _remember_sticky(self, identity: str, slot: int) -> None:
        table = {k: v for k, v in self._sticky().items() if v != slot}
        table[identity] = slot
        self.state_dir.mkdir(parents=True, exist_ok=True)
        tmp = self.state_dir / (STICKY_FILE + ".tmp")
        tmp.write_text(json.dumps(table, sort_keys=True))
        tmp.replace(self.state_dir / STICKY_FILE)

    def _ids(self, user: str) -> tuple[int, int]:
        return chroot_ids(self.root, user)

    def _layout(self, record: PodProcess, launch: Launch) -> list[daemons.Bind]:
        """Write the pod's volumes (files changed since the last time only) and return their bind mounts."""
        uid, gid = self._ids(launch.owner)
        pod_dir = self._pod_dir(record.uid)
        where: dict[str, Path] = {}
        for volume in launch.volumes:
            if isinstance(volume, pod_volumes.FileVolume):
                target = pod_dir / "volumes" / volume.name
                _write_files(target, volume.files, uid, gid)
            elif volume.where == "pod":
                target = pod_dir / "empty" / volume.name
            elif volume.where == "claim":
                target = self.state_dir / volume.path
            else:
                target = Path(volume.path)
            if not isinstance(volume, pod_volumes.FileVolume) and not target.exists():
                target.mkdir(parents=True)
                os.chown(target, uid, gid)
            where[volume.name] = target
        binds = []
        for mount in sorted(launch.mounts, key=lambda m: (m.path.count("/"), m.path)):
            source = where[mount.volume] / mount.sub_path if mount.sub_path else where[mount.volume]
            binds.append(daemons.Bind(str(source), daemons.under(str(self.root), mount.path)))
        return binds

    def spawn(self, uid: str, launch: Launch) -> PodProcess:
        """Start the daemon in the pod's existing namespace (first run or restart) and record it."""
        record = self.get(uid)
        if record is None:
            raise KeyError(uid)
        self._check_root()
        kill_namespace(record.netns)  # what the previous run left (a restart): a runtime starts clean
        pod_dir = self._pod_dir(uid)
        for sub in ("spool/" + record.hostname, "run/munge", "log"):
            (pod_dir / sub).mkdir(parents=True, exist_ok=True)
        _write_text(pod_dir / "hosts", launch.hosts(record.address))
        log_file = self.log_file(record)
        log_file.parent.mkdir(parents=True, exist_ok=True)
        log_file.touch()
        owner = self._ids(launch.owner)
        os.chown(log_file, *owner)  # a daemon that switched to SlurmUser reopens its stderr by name
        (self.root / "var" / "spool" / "slurmd").mkdir(parents=True, exist_ok=True)
        root = str(self.root)
        binds = [
            daemons.Bind(str(pod_dir / "hosts"), daemons.under(root, "/etc/hosts")),
            daemons.Bind(str(pod_dir / "spool"), daemons.under(root, "/var/spool/slurmd")),
            daemons.Bind(daemons.under(root, "/run/munge"), str(pod_dir / "run" / "munge")),
            daemons.Bind(str(pod_dir / "run"), daemons.under(root, "/run"), recursive=True),
            daemons.Bind(str(pod_dir / "log"), daemons.under(root, LOG_DIR)),
            *self._layout(record, launch),
        ]
        user = launch.user
        argv = [
            *("ip", "netns", "exec", record.netns, "unshare", "--mount", "--uts", "--"),
            *("sh", "-c", daemons.mount_script(binds, record.hostname), "sh"),
            *("chroot", *([f"--userspec={user}"] if user != "root" else []), root, "/usr/bin/env", "-i", CHROOT_PATH),
            *(f"{k}={v}" for k, v in launch.environment().items() if k != "PATH"),
            *launch.argv(record.address),
        ]
        with log_file.open("ab") as out:
            child = subprocess.Popen(
                argv,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=HOST_ENV,
                start_new_session=True,
            )
        with self._lock:
            record.pid, record.started_at = child.pid, time.time()
            record.starttime = start_time(child.pid) or ""
            self._children[uid] = child
            self._save()
        log.info(
            "pod %s/%s: %s pid %d as %s at %s",
            record.namespace,
            record.name,
            launch.daemon.container,
            child.pid,
            record.hostname,
            record.address,
        )
        return record

    def refresh(self, uid: str, launch: Launch) -> bool:
        """Bring a running pod's volume files and /etc/hosts up to date (ConfigMaps, Secrets, Services and pod
        addresses change; a kubelet refreshes projected volumes too). True when a file changed."""
        record = self.get(uid)
        if record is None:
            return False
        pod_dir = self._pod_dir(uid)
        changed = _write_text(pod_dir / "hosts", launch.hosts(record.address))
        uid_, gid = self._ids(launch.owner)
        for volume in launch.volumes:
            if isinstance(volume, pod_volumes.FileVolume):
                changed |= _write_files(pod_dir / "volumes" / volume.name, volume.files, uid_, gid)
        return changed

    def _check_root(self) -> None:
        """The pod's mount namespace copies the chroot's mounts when it starts and never sees later ones: start
        only once ``dev up`` has mounted /proc and munged's socket exists (else retried later)."""
        if not (self.root / "proc" / "self").exists() or not (self.root / "run" / "munge" / "munge.socket.2").exists():
            raise OSError(f"the Slurm chroot {self.root} is not mounted or munged is not running yet")

    # -- stop ----------------------------------------------------------------------------------------------
    def run_prestop(self, uid: str, command: list[str], env: Mapping[str, str], timeout: float) -> int | None:
        """Run the preStop command in the pod's namespaces and chroot (so ``hostname`` is the node name and
        ``scontrol`` reaches the controller by its name). Returns its exit code, None on timeout or when
        slurmd no longer runs."""
        record = self.get(uid)
        if record is None or not record.alive():
            return None
        argv = [
            *("nsenter", "--target", str(record.pid), "--net", "--mount", "--uts", "--"),
            *("chroot", str(self.root), "/usr/bin/env", "-i", CHROOT_PATH),
            *(f"{k}={v}" for k, v in env.items() if k != "PATH"),
            *command,
        ]
        try:
            proc = subprocess.run(argv, capture_output=True, text=True, env=HOST_ENV, timeout=max(timeout, 0.1))
        except subprocess.TimeoutExpired:
            log.warning("pod %s/%s: preStop still running after %.0fs", record.namespace, record.name, timeout)
            return None
        with self.log_file(record).open("a") as out:
            out.write(f"[slinky node agent] preStop exit {proc.returncode}: {proc.stdout}{proc.stderr}\n")
        return proc.returncode

    def terminate(self, uid: str, timeout: float) -> int | None:
        """SIGTERM slurmd, SIGKILL after ``timeout``; returns its exit code (None when not known)."""
        record = self.get(uid)
        if record is None:
            return None
        killed = False
        if record.alive():
            killed = signal_and_wait(record.pid, record.starttime, timeout)
        code = self.exit_code(uid)
        if code is None and record.pid:
            code = 137 if killed else 143
        return code

    def release(self, uid: str) -> None:
        """Forget the pod: delete its namespace and files, drop its record (its process must be gone)."""
        with self._lock:
            record = self._pods.pop(uid, None)
            child = self._children.pop(uid, None)
            self._save()
        if child is not None:
            child.poll()
        if record is not None:
            delete_namespace(record.slot)
        # Its bind mounts lived in the pod's private mount namespace: on the host these are plain files.
        shutil.rmtree(self._pod_dir(uid), ignore_errors=True)

    def delete_strays(self) -> list[str]:
        """Namespaces named like ours that no record holds (a crash between creating one and recording it)."""
        held = {spec.netns_name(p.slot) for p in self.records()}
        strays = [n for n in our_namespaces() if n not in held]
        for name in strays:
            kill_namespace(name)
            _run(["ip", "netns", "delete", name], check=False)
        return strays

    # -- Slurm ---------------------------------------------------------------------------------------------
    def slurm_node(self, uid: str, hostname: str) -> dict[str, Any] | None:
        """Slurm's record of the node (``scontrol --json show node``) asked from inside the pod, so with the pod's
        own configuration (its /etc/slurm, or slurmd's configless cache): its cluster's controller answers.
        None when Slurm does not know the node, or the pod's daemon no longer runs."""
        record = self.get(uid)
        if record is None or not record.alive():
            return None
        argv = [*("nsenter", "--target", str(record.pid), "--net", "--mount", "--uts", "--")]
        argv += ["chroot", str(self.root), "/usr/bin/env", "-i", CHROOT_PATH]
        argv += ["/usr/bin/scontrol", "--json", "show", "node", hostname]
        proc = _run(argv, check=False, timeout=10.0)
        try:
            nodes = json.loads(proc.stdout).get("nodes") or []
        except ValueError:
            return None
        return next((dict(n) for n in nodes if n.get("name") == hostname), None)


def exec_argv(state_dir: Path, root: Path, namespace: str | None, name: str, command: list[str]) -> list[str] | None:
    """``slinky dev exec``: the argv that runs ``command`` in a running daemon pod's network, mount and UTS
    namespaces, chrooted into the Slurm rootfs with a clean environment; None when no such pod runs here.

    Without a namespace, the pod is found by name in any namespace.

    Raises:
        ValueError: No namespace given and pods of that name run in more than one.
    """
    pods, _ = read_state(state_dir)
    running = [p for p in pods.values() if p.name == name and p.alive() and namespace in (None, p.namespace)]
    if len(running) > 1:
        where = ", ".join(sorted(p.namespace for p in running))
        raise ValueError(f"pods named {name} run in namespaces {where}: give one with -n")
    if not running:
        return None
    record = running[0]
    return [
        *("nsenter", "--target", str(record.pid), "--net", "--mount", "--uts", "--"),
        *("chroot", str(root), "/usr/bin/env", "-i", CHROOT_PATH, "HOME=/root", "TERM=dumb"),
        *command,
    ]
