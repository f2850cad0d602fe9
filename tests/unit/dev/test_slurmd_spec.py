"""Pure parts of the NodeSet pods' real slurmd: addresses, arguments, decisions and the pod status."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from slinky.dev import slurmd_runtime as rt
from slinky.dev import slurmd_spec as spec
from slinky.dev.procs import start_time

NOW = 1_790_000_000.0
PRESTOP = [
    "/usr/bin/sh",
    "-c",
    "scontrol update nodename=$(hostname) state=down reason='slurm-operator: Pod is terminating'; "
    "scontrol delete nodename=$(hostname)",
]


def container(args: list[str] | None = None, env: dict[str, str] | None = None, **extra: Any) -> dict[str, Any]:
    return {
        "name": "slurmd",
        "image": "ghcr.io/slinkyproject/slurmd:25.11",
        "args": args if args is not None else [],
        "env": [{"name": k, "value": v} for k, v in (env or {}).items()],
        **extra,
    }


def pod(*containers: dict[str, Any], status: dict[str, Any] | None = None, **spec_: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "nodeset-0", "namespace": "ns", "uid": "0123456789abcdef"},
        "spec": {"nodeName": "slinky-worker-1", "containers": list(containers), **spec_},
        "status": status or {},
    }


class TestAddresses:
    def test_slots_map_to_the_pool_after_the_bridge(self) -> None:
        assert spec.BRIDGE_ADDRESS == "10.226.28.1"
        assert spec.pod_address(0) == "10.226.28.2"
        assert spec.pod_address(spec.POOL_SIZE - 1) == "10.226.31.254"

    @pytest.mark.parametrize("slot", [-1, spec.POOL_SIZE])
    def test_outside_the_pool_is_refused(self, slot: int) -> None:
        with pytest.raises(ValueError, match="outside the pool"):
            spec.pod_address(slot)

    def test_the_pool_cannot_collide_with_the_slurmd_daemons_subnet(self) -> None:
        import ipaddress

        assert not spec.POOL.overlaps(ipaddress.IPv4Network("10.226.27.0/24"))

    def test_interface_names_fit_the_kernel_limit(self) -> None:
        last = spec.POOL_SIZE - 1
        assert max(len(spec.host_ifname(last)), len(spec.peer_ifname(last)), len(spec.BRIDGE)) <= 15

    def test_slot_of_inverts_pod_address(self) -> None:
        assert spec.slot_of(spec.pod_address(7)) == 7
        assert [spec.slot_of(a) for a in (None, "", "10.226.28.1", "10.226.27.2", "nope")] == [None] * 5

    def test_round_robin_skips_used_slots_and_wraps(self) -> None:
        assert spec.allocate_slot(set()) == 0
        assert spec.allocate_slot({0, 1}, after=0) == 2
        assert spec.allocate_slot({3}, after=2, size=4) == 0
        assert spec.allocate_slot({0, 1}, after=3, size=4) == 2

    def test_a_free_preferred_slot_wins(self) -> None:
        assert spec.allocate_slot({0}, after=0, preferred=9) == 9
        assert spec.allocate_slot({9}, after=0, preferred=9) == 1

    def test_a_full_pool_raises(self) -> None:
        with pytest.raises(spec.PoolExhausted):
            spec.allocate_slot({0, 1, 2}, size=3)


class TestPod:
    def test_the_slurmd_container_is_found_by_name(self) -> None:
        assert spec.slurmd_container(pod(container())) is not None
        assert spec.slurmd_container(pod({"name": "main", "image": "slurmd"})) is None

    def test_node_name_is_the_hostname_else_the_pod_name(self) -> None:
        assert spec.node_name(pod(container(), hostname="slinky-0")) == "slinky-0"
        assert spec.node_name(pod(container())) == "nodeset-0"

    @pytest.mark.parametrize(("value", "want"), [(None, 2), ("0", 2), ("-1", 2), ("x", 2), ("8", 8)], ids=str)
    def test_env_int_defaults(self, value: str | None, want: int) -> None:
        env = {} if value is None else {"POD_CPUS": value}
        assert spec.env_int(env, "POD_CPUS", 2) == want

    def test_literal_env_leaves_value_from_out(self) -> None:
        c = container(env={"A": "1"})
        c["env"].append({"name": "B", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}})
        assert spec.literal_env(c) == {"A": "1"}

    def test_prestop_command(self) -> None:
        assert spec.prestop_command(container(lifecycle={"preStop": {"exec": {"command": PRESTOP}}})) == PRESTOP
        assert spec.prestop_command(container(lifecycle={"preStop": {"httpGet": {"port": 80}}})) is None
        assert spec.prestop_command(container()) is None

    def test_grace_period_order(self) -> None:
        p = pod(container(), terminationGracePeriodSeconds=60)
        assert spec.grace_seconds(p) == 60
        p["metadata"]["deletionGracePeriodSeconds"] = 5
        assert spec.grace_seconds(p) == 5
        assert spec.grace_seconds(pod(container())) == 30


class TestArguments:
    def test_the_brief_example(self) -> None:
        c = container(
            ["-Z", "--conf-server", "slinkyctl:18817", "--conf", "Features=slinky Weight=10"],
            {"POD_CPUS": "4", "POD_MEMORY": "2048"},
        )
        assert spec.slurmd_args(c, "10.226.28.2") == [
            "-D",
            "-Z",
            "--conf-server",
            "slinkyctl:18817",
            "--conf",
            "Features=slinky,nodeset-pod Weight=10 NodeAddr=10.226.28.2 CPUs=4 RealMemory=2048",
        ]

    def test_missing_conf_is_added_with_defaults(self) -> None:
        assert spec.slurmd_args(container(["-Z"]), "10.226.28.9") == [
            "-D",
            "-Z",
            "--conf",
            "NodeAddr=10.226.28.9 CPUs=2 RealMemory=1000 Features=nodeset-pod",
        ]

    def test_equals_form_last_conf_wins_and_d_is_not_doubled(self) -> None:
        c = container(["-D", "-Z", "--conf=Weight=1", "--conf", "Weight=2"])
        assert spec.slurmd_args(c, "10.226.28.2") == [
            "-D",
            "-Z",
            "--conf",
            "Weight=2 NodeAddr=10.226.28.2 CPUs=2 RealMemory=1000 Features=nodeset-pod",
        ]

    def test_conf_values_win_over_env_but_node_addr_is_always_the_pods(self) -> None:
        c = container(["--conf", "cpus=16 nodeaddr=1.2.3.4 Feature=a,b"], {"POD_CPUS": "4"})
        assert (
            spec.slurmd_args(c, "10.226.28.2")[-1]
            == "cpus=16 NodeAddr=10.226.28.2 Feature=a,b,nodeset-pod RealMemory=1000"
        )

    def test_upstream_single_quotes_around_the_value_are_dropped(self) -> None:
        merged = spec.merge_conf("'Features=ns Weight=1'", overrides={}, defaults={})
        assert merged == "Features=ns Weight=1"

    def test_the_pod_feature_is_not_added_twice(self) -> None:
        assert spec.with_feature("Features=nodeset-pod,x", spec.POD_FEATURE) == "Features=nodeset-pod,x"

    def test_hosts_file_names_the_controller_at_the_bridge(self) -> None:
        hosts = spec.hosts_file("nodeset-0", "10.226.28.2", "slinkyctl")
        assert hosts.splitlines() == ["127.0.0.1 localhost", "10.226.28.1 slinkyctl", "10.226.28.2 nodeset-0"]


class TestDecisions:
    @staticmethod
    def node(state: list[str], address: str = "10.226.28.2", start: float = NOW) -> dict[str, Any]:
        return {"state": state, "address": address, "slurmd_start_time": {"set": True, "number": int(start)}}

    @pytest.mark.parametrize(
        ("node", "want"),
        [
            (None, False),
            ({}, False),
            (node(["IDLE", "DYNAMIC_NORM"]), True),
            (node(["ALLOCATED", "DRAIN"]), True),
            (node(["DOWN", "DYNAMIC_NORM"]), False),
            (node(["FUTURE"]), False),
            (node(["UNKNOWN"]), False),
            (node(["IDLE", "NOT_RESPONDING"]), False),
            (node(["IDLE"], address="10.226.28.3"), False),
            (node(["IDLE"], start=NOW - 5), False),
        ],
        ids=[
            "unknown",
            "empty",
            "idle",
            "drained",
            "down",
            "future",
            "unknown state",
            "not responding",
            "another address",
            "an earlier slurmd",
        ],
    )
    def test_node_registered(self, node: dict[str, Any] | None, want: bool) -> None:
        assert spec.node_registered(node, "10.226.28.2", NOW + 0.7) is want

    @pytest.mark.parametrize(
        ("policy", "code", "want"),
        [
            ("Always", 0, True),
            ("Always", 1, True),
            ("OnFailure", 0, False),
            ("OnFailure", 1, True),
            ("Never", 1, False),
        ],
    )
    def test_should_restart(self, policy: str, code: int, want: bool) -> None:
        assert spec.should_restart(policy, code) is want

    def test_restart_delay_backs_off_to_five_minutes(self) -> None:
        assert [spec.restart_delay(n) for n in (0, 1, 2, 3, 10)] == [0.0, 10.0, 20.0, 40.0, 300.0]

    def test_restart_policy_defaults_to_always(self) -> None:
        assert spec.restart_policy(pod(container())) == "Always"


class TestPodStatus:
    def view(self, **kw: Any) -> spec.SlurmdView:
        return spec.SlurmdView(**{"address": "10.226.28.2", "state": "running", "started_at": NOW, **kw})

    def test_running_not_ready(self) -> None:
        st = spec.pod_status(pod(container()), self.view(), NOW)["status"]
        assert st["phase"] == "Running"
        assert st["podIP"] == "10.226.28.2" and st["podIPs"] == [{"ip": "10.226.28.2"}]
        conds = {c["type"]: c["status"] for c in st["conditions"]}
        assert conds == {"Initialized": "True", "Ready": "False", "ContainersReady": "False", "PodScheduled": "True"}
        (cs,) = st["containerStatuses"]
        assert (cs["ready"], cs["started"], cs["restartCount"]) == (False, True, 0)
        assert "running" in cs["state"]

    def test_ready_keeps_the_transition_time_of_unchanged_conditions(self) -> None:
        before = spec.pod_status(pod(container()), self.view(), NOW)["status"]
        after = spec.pod_status(pod(container(), status=before), self.view(ready=True), NOW + 5)["status"]
        times = {c["type"]: c["lastTransitionTime"] for c in after["conditions"]}
        assert times["Initialized"] == "2026-09-21T14:13:20Z"  # NOW
        assert times["Ready"] != times["Initialized"]
        assert after["containerStatuses"][0]["ready"] is True

    def test_conditions_the_kubelet_does_not_own_are_kept(self) -> None:
        """The operator's SlurmNodeState* conditions survive the agent's whole-list status patch."""
        before = spec.pod_status(pod(container()), self.view(), NOW)["status"]
        drain = {"type": "SlurmNodeStateDrain", "status": "True", "message": "slurm-operator: x"}
        before["conditions"].append(drain)
        after = spec.pod_status(pod(container(), status=before), self.view(ready=True), NOW + 5)["status"]
        assert drain in after["conditions"] and len(after["conditions"]) == 5

    def test_waiting_for_a_restart_shows_the_last_state(self) -> None:
        term = spec.Termination(1, NOW + 1, NOW)
        st = spec.pod_status(pod(container()), self.view(state="waiting", last_state=term.as_state()), NOW)["status"]
        (cs,) = st["containerStatuses"]
        assert st["phase"] == "Running"
        assert cs["state"] == {"waiting": {"reason": "CrashLoopBackOff"}}
        assert cs["lastState"]["terminated"]["exitCode"] == 1

    @pytest.mark.parametrize(("code", "phase", "reason"), [(0, "Succeeded", "Completed"), (3, "Failed", "Error")])
    def test_terminated(self, code: int, phase: str, reason: str) -> None:
        v = self.view(state="terminated", termination=spec.Termination(code, NOW + 1, NOW))
        st = spec.pod_status(pod(container(), {"name": "side", "image": "x"}), v, NOW)["status"]
        assert st["phase"] == phase
        slurmd, side = st["containerStatuses"]
        assert (slurmd["state"]["terminated"]["exitCode"], slurmd["state"]["terminated"]["reason"]) == (code, reason)
        assert "terminated" in side["state"]

    def test_stopped_for_deletion_keeps_the_phase(self) -> None:
        v = self.view(state="terminated", termination=spec.Termination(143, NOW + 1, NOW))
        assert "phase" not in spec.pod_status(pod(container()), v, NOW, keep_phase=True)["status"]

    def test_an_unknown_exit_says_so(self) -> None:
        state = spec.Termination(137, NOW, NOW, "ContainerStatusUnknown").as_state()["terminated"]
        assert state["reason"] == "ContainerStatusUnknown" and "could not be located" in state["message"]

    def test_status_readers(self) -> None:
        st = spec.pod_status(pod(container()), self.view(ready=True, restart_count=2), NOW)["status"]
        p = pod(container(), status=st)
        assert spec.is_ready(p) and spec.restart_count(p) == 2 and not spec.is_terminated(p)
        assert spec.is_running(p, "10.226.28.2") and not spec.is_running(p, "10.226.28.3")
        assert spec.running_since(p) == NOW


class TestStateFile:
    def test_round_trip_and_a_torn_file_reads_empty(self, tmp_path: Path) -> None:
        rec = rt.PodProcess("u1", "ns", "p", "p", 3, pid=42, starttime="77", started_at=NOW)
        rt.write_state(tmp_path, {"u1": rec}, last_slot=3)
        assert rt.read_state(tmp_path) == ({"u1": rec}, 3)
        (tmp_path / rt.STATE_FILE).write_text("{not json")
        assert rt.read_state(tmp_path) == ({}, -1)

    def test_a_record_is_alive_only_with_its_start_time(self) -> None:
        import os

        me = rt.PodProcess("u", "ns", "p", "p", 0, pid=os.getpid(), starttime=start_time(os.getpid()) or "")
        assert me.alive()
        assert not rt.PodProcess("u", "ns", "p", "p", 0, pid=os.getpid(), starttime="1").alive()
        assert (me.address, me.netns) == ("10.226.28.2", "slinky-pod-0")
