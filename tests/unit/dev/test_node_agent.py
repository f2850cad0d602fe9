"""Pure parts of the development node agent: kubeconfig parsing, builders, timers, the work queue."""

from __future__ import annotations

import base64
import ssl
from pathlib import Path
from typing import Any

import pytest
import yaml

from slinky import wellknown
from slinky.dev import node_agent as na

NOW = 1_790_000_000.0


def make_pod(annotations: dict[str, str] | None = None, **status: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "p", "namespace": "ns", "uid": "u-1", "annotations": annotations or {}},
        "spec": {
            "nodeName": "slinky-node-1",
            "initContainers": [{"name": "init", "image": "busybox"}],
            "containers": [{"name": "a", "image": "busybox"}, {"name": "b", "image": "busybox"}],
        },
        "status": status,
    }


def write_kubeconfig(tmp_path: Path, cluster: dict[str, Any], user: dict[str, Any]) -> Path:
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": "dev",
        "contexts": [{"name": "dev", "context": {"cluster": "c", "user": "u"}}],
        "clusters": [{"name": "c", "cluster": cluster}],
        "users": [{"name": "u", "user": user}],
    }
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(doc))
    return path


class TestKubeconfig:
    def test_token_and_insecure_server(self, tmp_path: Path) -> None:
        path = write_kubeconfig(
            tmp_path,
            {"server": "https://127.0.0.1:6443/", "insecure-skip-tls-verify": True},
            {"token": "t0k"},
        )
        cfg = na.load_kubeconfig(path)
        assert (cfg.server, cfg.ssl_context, cfg.token) == ("https://127.0.0.1:6443", False, "t0k")

    def test_token_file_relative_to_the_kubeconfig(self, tmp_path: Path) -> None:
        (tmp_path / "token").write_text("from-file\n")
        path = write_kubeconfig(tmp_path, {"server": "http://127.0.0.1:8080"}, {"tokenFile": "token"})
        cfg = na.load_kubeconfig(path)
        assert (cfg.token, cfg.ssl_context) == ("from-file", True)

    def test_bad_certificate_authority_data_is_rejected(self, tmp_path: Path) -> None:
        bogus = base64.b64encode(b"-----BEGIN CERTIFICATE-----\nnope\n-----END CERTIFICATE-----\n").decode()
        path = write_kubeconfig(tmp_path, {"server": "https://127.0.0.1:6443", "certificate-authority-data": bogus}, {})
        with pytest.raises(ssl.SSLError):
            na.load_kubeconfig(path)

    def test_unknown_context(self, tmp_path: Path) -> None:
        path = write_kubeconfig(tmp_path, {"server": "http://x"}, {})
        with pytest.raises(ValueError, match="context"):
            na.load_kubeconfig(path, context="other")


class TestNodeBuilders:
    def test_names(self) -> None:
        assert na.node_names("n", 3) == ["n-1", "n-2", "n-3"]

    @pytest.mark.parametrize(
        ("gpus", "want_gpu"), [(0, None), (4, "4")], ids=["no gpu resource without gpus", "gpus advertised"]
    )
    def test_capacity(self, gpus: int, want_gpu: str | None) -> None:
        capacity = na.node_capacity(na.NodeShape(cpu="16", memory="32Gi", pods=50, gpus=gpus))
        assert capacity.get("nvidia.com/gpu") == want_gpu
        assert (capacity["cpu"], capacity["memory"], capacity["pods"]) == ("16", "32Gi", "50")

    def test_labels_mark_the_agent_and_user_labels_win(self) -> None:
        labels = na.node_labels("n-1", na.NodeShape(labels={"zone": "a", "kubernetes.io/arch": "arm64"}))
        assert labels[wellknown.LABEL_SIM_AGENT] == "true"
        assert labels["kubernetes.io/hostname"] == "n-1"
        assert (labels["zone"], labels["kubernetes.io/arch"]) == ("a", "arm64")

    def test_ready_with_fresh_heartbeat_and_stable_transition(self) -> None:
        status = na.node_status("n-1", na.NodeShape(), now=NOW + 30, since=NOW)
        conds = {c["type"]: c for c in status["conditions"]}
        assert conds["Ready"]["status"] == "True"
        assert {conds[t]["status"] for t in ("MemoryPressure", "DiskPressure", "PIDPressure")} == {"False"}
        assert conds["Ready"]["lastHeartbeatTime"] == na.rfc3339(NOW + 30)
        assert conds["Ready"]["lastTransitionTime"] == na.rfc3339(NOW)
        assert status["allocatable"] == status["capacity"]

    def test_lease_is_owned_by_its_node(self) -> None:
        lease = na.lease_object({"metadata": {"name": "n-1", "uid": "nu"}}, NOW)
        assert lease["metadata"]["ownerReferences"][0]["uid"] == "nu"
        assert lease["spec"]["renewTime"].endswith(".000000Z")


class TestPodStatus:
    def test_running(self) -> None:
        status = na.running_status(make_pod(phase="Pending"), NOW)["status"]
        assert status["phase"] == "Running"
        assert status["startTime"] == na.rfc3339(NOW)
        assert {c["type"] for c in status["conditions"] if c["status"] == "True"} == {
            "Initialized",
            "Ready",
            "ContainersReady",
            "PodScheduled",
        }
        assert [c["state"]["running"]["startedAt"] for c in status["containerStatuses"]] == [na.rfc3339(NOW)] * 2
        assert status["initContainerStatuses"][0]["state"]["terminated"]["reason"] == "Completed"
        assert status["podIP"] == na.pod_ip("u-1") and status["hostIP"] == "127.0.0.1"

    def test_running_keeps_an_existing_start_time(self) -> None:
        status = na.running_status(make_pod(phase="Pending", startTime="2026-01-01T00:00:00Z"), NOW)
        assert status["status"]["startTime"] == "2026-01-01T00:00:00Z"

    @pytest.mark.parametrize(
        ("code", "phase", "reason"),
        [(0, "Succeeded", "Completed"), (3, "Failed", "Error")],
        ids=["exit 0 succeeds", "non-zero exit fails"],
    )
    def test_terminated(self, code: int, phase: str, reason: str) -> None:
        pod = make_pod(phase="Running", startTime=na.rfc3339(NOW))
        status = na.terminated_status(pod, NOW + 5, code, phase)["status"]
        assert status["phase"] == phase
        for cs in status["containerStatuses"]:
            term = cs["state"]["terminated"]
            assert (term["exitCode"], term["reason"], term["startedAt"]) == (code, reason, na.rfc3339(NOW))
        assert {c["status"] for c in status["conditions"]} == {"False"}

    def test_stopped_for_deletion_keeps_the_phase(self) -> None:
        status = na.terminated_status(make_pod(phase="Running"), NOW, 143, phase=None)["status"]
        assert "phase" not in status

    def test_pod_ip_is_deterministic_and_in_range(self) -> None:
        ips = {na.pod_ip(f"uid-{i}") for i in range(2000)}
        assert na.pod_ip("uid-1") == na.pod_ip("uid-1")
        assert len(ips) > 1900
        for ip in ips:
            a, b, c, d = (int(x) for x in ip.split("."))
            assert (a, b) == (10, 244) and 0 <= c <= 255 and 1 <= d <= 254


class TestSimSpec:
    @pytest.mark.parametrize(
        ("annotations", "want"),
        [
            ({}, na.SimSpec(None, 0)),
            ({wellknown.ANNOTATION_SIM_RUN_SECONDS: "2.5"}, na.SimSpec(2.5, 0)),
            (
                {wellknown.ANNOTATION_SIM_RUN_SECONDS: "1", wellknown.ANNOTATION_SIM_EXIT_CODE: "3"},
                na.SimSpec(1, 3),
            ),
            ({wellknown.ANNOTATION_SIM_RUN_SECONDS: "soon"}, na.SimSpec(None, 0)),
            ({wellknown.ANNOTATION_SIM_RUN_SECONDS: "-4"}, na.SimSpec(0.0, 0)),
        ],
        ids=[
            "runs until deleted",
            "fractional seconds",
            "exit code",
            "malformed is ignored",
            "negative is now",
        ],
    )
    def test_annotations(self, annotations: dict[str, str], want: na.SimSpec) -> None:
        assert na.sim_spec(make_pod(annotations)) == want


class TestTimerHeap:
    def test_pops_due_keys_in_deadline_order(self) -> None:
        timers = na.TimerHeap()
        timers.push(("ns", "b"), 20.0)
        timers.push(("ns", "a"), 10.0)
        timers.push(("ns", "c"), 30.0)
        assert timers.next_deadline() == 10.0
        assert timers.pop_due(25.0) == [("ns", "a"), ("ns", "b")]
        assert len(timers) == 1

    def test_a_new_deadline_supersedes_and_cancel_forgets(self) -> None:
        timers = na.TimerHeap()
        timers.push(("ns", "a"), 10.0)
        timers.push(("ns", "a"), 50.0)
        timers.push(("ns", "b"), 5.0)
        timers.cancel(("ns", "b"))
        assert timers.next_deadline() == 50.0
        assert timers.pop_due(40.0) == []
        assert timers.pop_due(50.0) == [("ns", "a")]
        assert timers.next_deadline() is None


class TestWorkQueue:
    async def test_deduplicates_and_serializes_a_key(self) -> None:
        q = na.WorkQueue()
        q.add(("ns", "a"))
        q.add(("ns", "a"))
        q.add(("ns", "b"))
        assert len(q) == 2
        key = await q.get()
        assert key == ("ns", "a")
        q.add(("ns", "a"))  # arrives while being processed: not handed to a second worker
        assert await q.get() == ("ns", "b")
        assert len(q) == 0
        q.done(key)  # ... but requeued once the first worker is done
        assert await q.get() == ("ns", "a")


def test_cli_parses_labels_and_defaults() -> None:
    args = na.parse_args(["--kubeconfig", "k", "--nodes", "2", "--label", "a=b", "--label", "c="])
    assert (args.nodes, args.prefix, args.label, args.heartbeat_seconds) == (
        2,
        "slinky-node",
        [("a", "b"), ("c", "")],
        10.0,
    )


class TestWorkerNodes:
    def test_cli_defaults_to_no_worker_nodes(self) -> None:
        args = na.parse_args(["--kubeconfig", "k", "--nodes", "2"])
        assert (args.worker_nodes, args.worker_prefix, args.worker_cpu, args.worker_memory) == (
            0,
            "slinky-worker",
            "4",
            "8Gi",
        )

    def test_no_pod_runs_a_process_here_any_more(self) -> None:
        """Daemon pods run as containers on the real nodes: the agent has no option to run them."""
        with pytest.raises(SystemExit):
            na.parse_args(["--kubeconfig", "k", "--nodes", "1", "--slurm-root", "/r"])

    def test_worker_nodes_follow_the_bridged_ones_with_their_own_shape(self) -> None:
        shape = na.NodeShape(cpu="4", memory="8Gi", labels={na.LABEL_SIM_POOL: "workers"})
        options = na.AgentOptions(nodes=2, worker_nodes=2, worker_shape=shape)
        agent = na.NodeAgent(None, options)  # type: ignore[arg-type]  # no request is made here
        assert agent.names == ["slinky-node-1", "slinky-node-2", "slinky-worker-1", "slinky-worker-2"]
        worker = na.node_object("slinky-worker-1", agent._shapes["slinky-worker-1"], NOW)
        assert worker["status"]["allocatable"] == {"cpu": "4", "memory": "8Gi", "pods": "110"}
        assert worker["metadata"]["labels"][na.LABEL_SIM_POOL] == "workers"
        assert "taints" not in worker["spec"]
        assert agent._shapes["slinky-node-1"] == na.NodeShape()
