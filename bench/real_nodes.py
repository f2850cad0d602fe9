"""Real nodes benchmark: slurmd as a NodeSet pod on the real nodes vs slurmd started by hand there, one run.

Needs the local stack (``slinky dev up``, at least ``--pods`` real nodes). It makes a namespace annotated for
the real nodes with a Controller, a RestApi and a NodeSet ``cpu`` at 0 replicas (the example's, without
accounting and login), runs an operator for it as its own process, and measures, per round:

* **NodeSet scale-out 0 -> N**: the NodeSet patched to ``--pods`` replicas (one pod per real node, its
  anti-affinity) -> every ``cpu-*`` node IDLE; then back to 0, the pods and their Slurm nodes gone;
* **by hand** (the baseline): the very pod spec the operator wrote, created with ``kubectl create`` as pods
  ``hand-<i>`` bound to the real nodes (no operator, no scheduler): create -> every ``hand-*`` node IDLE in
  Slurm; then deleted and their Slurm nodes removed. The ratio is what the operator's path adds to a slurmd
  container's start by the kubelet. (``ctr run`` of the image in a node's containerd was tried as the
  baseline: slurmd there needs the cluster's DNS and its own name as a pod gets them, and never registered.)

Both sides are seen by one poll of slurmrestd (``GET /slurm/v0.0.44/nodes`` every 100 ms at the RestApi pod's
address, a JWT minted from the cluster's key). Also printed: the memory (RSS) of each real node's kubelet,
containerd and kube-proxy; with ``--dev-up``, a warm ``slinky dev up`` (the stack running); with
``--images``, the time to build the Slurm images from the cached rootfs and their sizes. Everything it made is
removed at the end (pods, Slurm nodes, namespace, operator), on an error or Ctrl-C too. Usage::

    .venv/bin/python -m bench.real_nodes --pods 2 --rounds 3
    .venv/bin/python -m bench.real_nodes --quick          # 1 pod, 1 round
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from slinky.clients.slurm import jwt  # noqa: E402
from slinky.dev import demo, images, real_nodes  # noqa: E402
from slinky.dev import stack as dev_stack  # noqa: E402
from slinky.dev.procs import ProcessTable  # noqa: E402

HAND_PREFIX = "hand-"


class Bench:
    def __init__(self, env: dict[str, str], pods: int) -> None:
        self.env, self.pods = env, pods
        self.ns = f"bench-rn-{uuid.uuid4().hex[:6]}"
        self.queue = f"bench-{self.ns}"
        self.operator: subprocess.Popen[bytes] | None = None
        self.rest = ""
        self.token = ""
        self.template: dict[str, Any] = {}

    # ---------------------------------------------------------------------------------------------- plumbing
    def kubectl(self, *args: str, stdin: str | None = None, check: bool = True) -> str:
        done = subprocess.run(
            ["kubectl", "--kubeconfig", self.env["KUBECONFIG"], *args],
            input=stdin,
            text=True,
            capture_output=True,
            timeout=120,
        )
        if check and done.returncode != 0:
            raise RuntimeError(f"kubectl {' '.join(args)}: {done.stderr.strip()}")
        return done.stdout

    def get(self, *what: str) -> dict[str, Any]:
        out = self.kubectl("-n", self.ns, "get", *what, "-o", "json", check=False)
        return json.loads(out) if out.strip() else {}

    def ctr(self, node: real_nodes.RealNode, *args: str, check: bool = True) -> str:
        argv = real_nodes.ctr(dev_stack._real_stack(), node, *args)
        done = subprocess.run(argv, text=True, capture_output=True, timeout=120)
        if check and done.returncode != 0:
            raise RuntimeError(f"ctr {' '.join(args)} on {node.name}: {done.stderr.strip()}")
        return done.stdout

    def slurm_nodes(self) -> dict[str, list[str]]:
        """Slurm node name -> states, from the cluster's slurmrestd."""
        try:
            resp = httpx.get(
                f"{self.rest}/slurm/v0.0.44/nodes",
                headers={"X-SLURM-USER-NAME": "slurm", "X-SLURM-USER-TOKEN": self.token},
                timeout=5,
            )
            return {n["name"]: list(n.get("state") or []) for n in resp.json().get("nodes") or []}
        except (httpx.HTTPError, ValueError):
            return {}

    def wait(self, what: str, check: Callable[[], bool], timeout: float, period: float = 0.1) -> float:
        start = time.monotonic()
        while not check():
            if time.monotonic() - start > timeout:
                raise RuntimeError(f"timed out after {timeout:.0f} s waiting for {what}")
            time.sleep(period)
        return time.monotonic() - start

    def idle(self, prefix: str, count: int) -> bool:
        nodes = self.slurm_nodes()
        found = [s for n, s in nodes.items() if n.startswith(prefix)]
        bad = {"DOWN", "DRAIN", "NOT_RESPONDING", "FUTURE", "UNKNOWN"}
        return len(found) == count and all("IDLE" in states and not bad & set(states) for states in found)

    # ---------------------------------------------------------------------------------------------- setup
    def setup(self) -> None:
        annotations = real_nodes.namespace_annotations(dev_stack.REAL_NODE_TAINT)
        namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": self.ns, "annotations": annotations}}
        self.kubectl("apply", "-f", "-", stdin=json.dumps(namespace))
        docs = []
        for doc in demo.cluster_manifest(self.env):
            if doc["kind"] in {"Namespace", "Accounting", "LoginSet"} or doc["metadata"]["name"] in {
                "mariadb-password",
                "slurm-sssd-conf",
            }:
                continue
            doc["metadata"]["namespace"] = self.ns
            if doc["kind"] == "Controller":
                doc["spec"].pop("accountingRef", None)
            if doc["kind"] == "NodeSet":
                doc["spec"]["replicas"] = 0
            docs.append(doc)
        self.kubectl("apply", "-f", "-", stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": docs}))
        env = {
            **os.environ,
            **self.env,
            "PATH": os.environ["PATH"],
            "SLINKY_OPERATOR__NAMESPACES": json.dumps([self.ns]),
            "SLINKY_OPERATOR__TASK_QUEUE": self.queue,
            "SLINKY_TELEMETRY__METRICS_PORT": "0",
        }
        log = dev_stack.STATE / "logs" / f"{self.ns}-operator.log"
        with log.open("ab") as out:
            self.operator = subprocess.Popen(
                [sys.executable, "-m", "workers.operator"], cwd=REPO, env=env, stdout=out, stderr=out
            )

        def ready(name: str) -> bool:
            pods = self.get("pods", "-l", f"app.kubernetes.io/name={name}").get("items") or []
            return any(
                c["type"] == "Ready" and c["status"] == "True"
                for p in pods
                for c in (p.get("status") or {}).get("conditions") or []
            )

        self.wait("slurmctld and slurmrestd pods ready", lambda: ready("slurmctld") and ready("slurmrestd"), 240, 1)
        secrets = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Secret"}
        jwt_key = secrets["slurm-auth-jwt"]["stringData"]["jwt.key"].encode()
        self.token = jwt.mint(jwt_key, "slurm", 3600)
        rest_pod = self.get("pods", "-l", "app.kubernetes.io/name=slurmrestd")["items"][0]
        self.rest = f"http://{rest_pod['status']['podIP']}:6820"
        self.wait("slurmrestd answering", lambda: bool(self.slurm_nodes()) or self._answers(), 60, 0.5)

    def _answers(self) -> bool:
        with contextlib.suppress(httpx.HTTPError):
            headers = {"X-SLURM-USER-NAME": "slurm", "X-SLURM-USER-TOKEN": self.token}
            return httpx.get(f"{self.rest}/slurm/v0.0.44/ping", headers=headers, timeout=5).status_code == 200
        return False

    def controller_ip(self) -> str:
        return str(self.get("pod", "slurm-controller-0")["status"]["podIP"])

    # ---------------------------------------------------------------------------------------------- rounds
    def by_hand(self) -> float:
        """The NodeSet's own pod spec (as the operator wrote it in the last scale-out), created by hand with
        ``kubectl create``: one pod per real node, bound by ``nodeName`` (no operator, no scheduler)."""
        assert self.template, "a scale-out round first: it gives the pod spec"
        pods = []
        for i in range(1, self.pods + 1):
            name = f"{HAND_PREFIX}{i}"
            spec = json.loads(json.dumps(self.template["spec"]))
            spec.update(hostname=name, nodeName=real_nodes.RealNode(i).name)
            spec.pop("affinity", None)
            labels = {"app.kubernetes.io/part-of": "bench-real-nodes"}
            pods.append({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels}, "spec": spec})
        start = time.monotonic()
        self.kubectl(
            "-n", self.ns, "create", "-f", "-", stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": pods})
        )
        self.wait(f"{self.pods} hand-* nodes IDLE", lambda: self.idle(HAND_PREFIX, self.pods), 180)
        elapsed = time.monotonic() - start
        self.remove_hand()
        return elapsed

    def remove_hand(self) -> None:
        self.kubectl(
            "-n",
            self.ns,
            "delete",
            "pods",
            "-l",
            "app.kubernetes.io/part-of=bench-real-nodes",
            "--wait=true",
            check=False,
        )
        for name in [n for n in self.slurm_nodes() if n.startswith(HAND_PREFIX)]:
            self.kubectl(
                "-n", self.ns, "exec", "slurm-controller-0", "--", "scontrol", "delete", f"nodename={name}", check=False
            )

    def scale_out(self) -> float:
        start = time.monotonic()
        self.kubectl("-n", self.ns, "scale", "nodeset/cpu", f"--replicas={self.pods}")
        self.wait(f"{self.pods} cpu-* nodes IDLE", lambda: self.idle("cpu-", self.pods), 180)
        elapsed = time.monotonic() - start
        self.template = self.get("pod", "cpu-0")
        self.kubectl("-n", self.ns, "scale", "nodeset/cpu", "--replicas=0")
        self.wait(
            "the NodeSet's pods and Slurm nodes gone",
            lambda: (
                not self.get("pods", "-l", "app.kubernetes.io/name=slurmd").get("items")
                and not any(n.startswith("cpu-") for n in self.slurm_nodes())
            ),
            180,
            0.5,
        )
        return elapsed

    # ---------------------------------------------------------------------------------------------- teardown
    def teardown(self) -> None:
        with contextlib.suppress(Exception):
            self.remove_hand()
        for kind in ("controllers", "nodesets", "restapis"):
            self.kubectl("-n", self.ns, "delete", kind, "--all", "--wait=false", check=False)
        with contextlib.suppress(RuntimeError):
            self.wait("the bench's pods gone", lambda: not self.get("pods").get("items"), 120, 1)
        self.kubectl("-n", self.ns, "delete", "pvc", "--all", check=False)
        if self.operator is not None:
            self.operator.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.operator.wait(15)
            if self.operator.poll() is None:
                self.operator.kill()
        subprocess.run(
            [
                "temporal", "workflow", "terminate", "--address", self.env["TEMPORAL_ADDRESS"], "--yes",
                "--query", f"TaskQueue = '{self.queue}' AND ExecutionStatus = 'Running'", "--reason", "bench ended",
            ],
            capture_output=True, check=False, timeout=60,
            env={**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"},
        )  # fmt: skip
        self.kubectl("delete", "namespace", self.ns, "--wait=false", check=False)


def node_memory() -> list[tuple[str, dict[str, int]]]:
    """RSS in MiB of each real node's daemons, from /proc."""
    procs = ProcessTable(dev_stack.STATE / "pids")
    out = []
    for name in sorted({m.group(1) for n in procs.names() if (m := re.match(r"(real-\d+)-", n))}):
        sizes = {}
        for component in real_nodes.COMPONENTS:
            pid = procs.running(f"{name}-{component}")
            sizes[component] = _rss_mib(pid) if pid else 0
        out.append((name, sizes))
    return out


def _rss_mib(pid: int) -> int:
    """RSS of ``pid`` and its children (``nsenter`` execs the daemon, so usually just one)."""
    total = 0
    for p in [pid, *_children(pid)]:
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
    return total // 1024


def _children(pid: int) -> list[int]:
    with contextlib.suppress(OSError):
        return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    return []


@contextlib.contextmanager
def _terminated_as_interrupt() -> Iterator[None]:
    previous = signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--pods", type=int, default=2, help="slurmd per side, one per real node")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="1 pod, 1 round")
    parser.add_argument("--dev-up", action="store_true", help="also time a warm `slinky dev up`")
    parser.add_argument("--images", action="store_true", help="also time the Slurm image build and list sizes")
    args = parser.parse_args()
    pods, rounds = (1, 1) if args.quick else (args.pods, args.rounds)
    env = dev_stack.load_env_file()
    bench = Bench(env, pods)
    rows: list[tuple[float, float]] = []
    code = 0
    with _terminated_as_interrupt():
        try:
            print(f"bench.real_nodes: namespace {bench.ns}, {pods} slurmd per side, {rounds} round(s)", flush=True)
            bench.setup()
            for r in range(rounds):
                pod = bench.scale_out()
                hand = bench.by_hand()
                rows.append((hand, pod))
                print(f"  round {r + 1}: by hand {hand:.2f} s, NodeSet 0->{pods} {pod:.2f} s", flush=True)
        except KeyboardInterrupt:
            print("bench.real_nodes: interrupted; cleaning up", file=sys.stderr)
            code = 130
        except RuntimeError as err:
            print(f"bench.real_nodes: {err}", file=sys.stderr)
            code = 1
        finally:
            bench.teardown()
    if rows:
        hand = statistics.median(r[0] for r in rows)
        pod = statistics.median(r[1] for r in rows)
        print(f"\nslurmd start -> every Slurm node IDLE ({pods} real node(s), median of {len(rows)})")
        print(f"  by hand (the same pods, kubectl create, bound)  {hand:6.2f} s   1.00x")
        print(f"  NodeSet scale-out 0->{pods} (operator, scheduler)  {pod:6.2f} s   {pod / hand:.2f}x")
    print("\nmemory of each real node (RSS, MiB)")
    for name, sizes in node_memory():
        parts = ", ".join(f"{k} {v}" for k, v in sizes.items())
        print(f"  {name}: {parts}; total {sum(sizes.values())}")
    if args.dev_up:
        start = time.monotonic()
        subprocess.run([sys.executable, "-m", "slinky.cli", "dev", "up"], cwd=REPO, capture_output=True, check=True)
        print(f"\nwarm `slinky dev up` (stack running): {time.monotonic() - start:.1f} s")
    if args.images:
        start = time.monotonic()
        images.build_slurm_images(lambda msg: None)
        print(f"\nSlurm images built in {time.monotonic() - start:.1f} s (rootfs cached)")
        for name in images.SLURM_IMAGES:
            size = subprocess.run(
                ["podman", "image", "ls", "--format", "{{.Size}}", f"{images.LOCAL_PREFIX}/{name}:{images.SLURM_TAG}"],
                capture_output=True, text=True, check=False,
            ).stdout.strip()  # fmt: skip
            print(f"  {name}: {size}")
    return code


if __name__ == "__main__":
    sys.exit(main())
