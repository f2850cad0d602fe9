"""Daemon pods of the node agent: which container runs as which daemon, volumes, env, /etc/hosts, probes."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import pytest

from slinky.dev import daemons, launch, pod_dns, pod_volumes


def pod(*containers: dict[str, Any], ns: str = "hpc", **spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "slurm-controller-0", "namespace": ns, "uid": "u1", "labels": {"app": "ctl"}},
        "spec": {"containers": list(containers), **spec},
    }


def running(name: str, ip: str, ns: str = "hpc", ready: bool = True, **spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": ns, "labels": spec.pop("labels", {})},
        "spec": spec,
        "status": {
            "phase": "Running",
            "podIP": ip,
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }


# ------------------------------------------------------------------------------------------------ daemons
def test_the_first_container_named_after_a_daemon_runs_it() -> None:
    found = daemons.daemon_container(pod({"name": "logfile"}, {"name": "slurmctld", "args": ["-v"]}))
    assert found is not None
    daemon, container = found
    assert daemon.executable == "/usr/sbin/slurmctld" and container["args"] == ["-v"]
    assert daemons.argv(daemon, container) == ["/usr/sbin/slurmctld", "-D", "-v"]
    assert daemons.daemon_container(pod({"name": "nginx"})) is None
    login = daemons.DAEMONS["login"]
    assert daemons.argv(login, {"args": ["--conf-server", "c:6817"]}) == [
        "/usr/sbin/sackd",
        "-D",
        "--conf-server",
        "c:6817",
    ]


def test_users_follow_the_security_context_and_upstreams_uid_401_is_slurm() -> None:
    ctl, rest = daemons.DAEMONS["slurmctld"], daemons.DAEMONS["slurmrestd"]
    assert daemons.run_user(ctl, pod(), {}) == "root"
    assert daemons.run_user(ctl, pod(securityContext={"runAsUser": 401}), {}) == "slurm"
    assert daemons.run_user(rest, pod(), {}) == "slurmrest"
    assert daemons.run_user(rest, pod(securityContext={"runAsUser": 65534, "runAsGroup": 65534}), {}) == "65534:65534"
    assert daemons.run_user(rest, pod(securityContext={"runAsUser": 7}), {"securityContext": {"runAsUser": 0}}) == (
        "root"
    )
    assert daemons.file_owner(ctl, "root") == "slurm" and daemons.file_owner(rest, "65534:65534") == "65534:65534"


def test_the_mount_script_mounts_in_order_then_execs() -> None:
    script = daemons.mount_script([daemons.Bind("/s/a b", "/r/etc/x"), daemons.Bind("/s/run", "/r/run", True)], "h-0")
    lines = script.splitlines()
    assert lines[0] == "set -e" and lines[-2:] == ["hostname h-0", 'exec "$@"']
    assert "mount --bind '/s/a b' /r/etc/x" in lines and "mount --rbind /s/run /r/run" in lines
    assert lines.index("mount --bind '/s/a b' /r/etc/x") < lines.index("mount --rbind /s/run /r/run")
    assert daemons.under("/root", "/etc/slurm/../slurm/x") == "/root/etc/slurm/x"


def test_probes_resolve_named_ports() -> None:
    container = {
        "ports": [{"name": "slurmctld", "containerPort": 6817}],
        "readinessProbe": {"httpGet": {"path": "/readyz", "port": "slurmctld"}},
        "livenessProbe": {"tcpSocket": {"port": 6820}},
    }
    assert daemons.probe(container) == ("http", 6817, "/readyz")
    assert daemons.probe(container, "livenessProbe") == ("tcp", 6820, "/")
    assert daemons.probe({"readinessProbe": {"exec": {"command": ["true"]}}}) is None
    assert daemons.probe({"readinessProbe": {"tcpSocket": {"port": "nope"}}}) is None


# ------------------------------------------------------------------------------------------------ volumes
CONFIGMAPS = {("hpc", "slurm-config"): {"data": {"slurm.conf": "ClusterName=x\n", "cgroup.conf": "C=1\n"}}}
SECRETS = {
    ("hpc", "slurm-key"): {"data": {"slurm.key": base64.b64encode(b"\x00key").decode()}},
    ("hpc", "jwt"): {"data": {"jwt.key": base64.b64encode(b"jwt").decode()}},
}


def test_a_projected_volume_gathers_configmaps_and_secret_items_with_modes() -> None:
    volume = {
        "name": "slurm-etc",
        "projected": {
            "defaultMode": 0o610,
            "sources": [
                {"configMap": {"name": "slurm-config"}},
                {"secret": {"name": "slurm-key", "items": [{"key": "slurm.key", "path": "slurm.key"}]}},
                {"secret": {"name": "jwt", "items": [{"key": "jwt.key", "path": "jwt.key", "mode": 0o600}]}},
            ],
        },
    }
    planned = pod_volumes.plan_volume(volume, "hpc", CONFIGMAPS, SECRETS)
    assert isinstance(planned, pod_volumes.FileVolume)
    assert planned.files == {
        "slurm.conf": (b"ClusterName=x\n", 0o610),
        "cgroup.conf": (b"C=1\n", 0o610),
        "slurm.key": (b"\x00key", 0o610),
        "jwt.key": (b"jwt", 0o600),
    }
    assert planned.sources == {("configmaps", "slurm-config"), ("secrets", "slurm-key"), ("secrets", "jwt")}


def test_missing_sources_wait_unless_optional_and_unsupported_volumes_are_named() -> None:
    with pytest.raises(pod_volumes.MissingSource, match="'gone' not found"):
        pod_volumes.plan_volume({"name": "v", "secret": {"secretName": "gone"}}, "hpc", {}, {})
    with pytest.raises(pod_volumes.MissingSource, match="no key 'other'"):
        pod_volumes.plan_volume(
            {"name": "v", "configMap": {"name": "slurm-config", "items": [{"key": "other", "path": "o"}]}},
            "hpc",
            CONFIGMAPS,
            {},
        )
    optional = pod_volumes.plan_volume({"name": "v", "secret": {"secretName": "gone", "optional": True}}, "hpc", {}, {})
    assert isinstance(optional, pod_volumes.FileVolume) and optional.files == {}
    with pytest.raises(pod_volumes.VolumeError, match="downwardAPI is not emulated"):
        pod_volumes.plan_volume({"name": "v", "downwardAPI": {}}, "hpc", {}, {})
    with pytest.raises(pod_volumes.VolumeError, match="inside the volume"):
        pod_volumes.plan_volume(
            {"name": "v", "configMap": {"name": "slurm-config", "items": [{"key": "slurm.conf", "path": "../x"}]}},
            "hpc",
            CONFIGMAPS,
            {},
        )


def test_directories_and_mounts() -> None:
    claim = pod_volumes.plan_volume({"name": "statesave", "persistentVolumeClaim": {"claimName": "s-0"}}, "hpc", {}, {})
    assert claim == pod_volumes.DirVolume("statesave", "claim", "volumes/hpc/s-0")
    assert pod_volumes.plan_volume({"name": "run", "emptyDir": {}}, "hpc", {}, {}) == pod_volumes.DirVolume(
        "run", "pod", "run"
    )
    container = {
        "name": "slurmctld",
        "volumeMounts": [
            {"name": "slurm-etc", "mountPath": "/etc/slurm", "readOnly": True},
            {"name": "statesave", "mountPath": "/var/spool/slurmctld/x"},
        ],
    }
    spec_pod = pod(
        container,
        volumes=[
            {"name": "slurm-etc", "configMap": {"name": "slurm-config"}},
            {"name": "statesave", "persistentVolumeClaim": {"claimName": "statesave-slurm-controller-0"}},
        ],
    )
    volumes, mounts = pod_volumes.plan(spec_pod, container, CONFIGMAPS, SECRETS)
    assert [v.name for v in volumes] == ["slurm-etc", "statesave"]
    assert mounts[0] == pod_volumes.Mount("slurm-etc", "/etc/slurm", "", True)
    with pytest.raises(pod_volumes.VolumeError, match="names no volume"):
        pod_volumes.plan(pod(container), container, CONFIGMAPS, SECRETS)
    assert pod_volumes.sources(spec_pod) == {("configmaps", "hpc", "slurm-config")}


def test_env_reads_configmaps_and_secrets() -> None:
    container = {
        "env": [
            {"name": "A", "value": "1"},
            {"name": "B", "valueFrom": {"secretKeyRef": {"name": "jwt", "key": "jwt.key"}}},
            {"name": "C", "valueFrom": {"configMapKeyRef": {"name": "slurm-config", "key": "nope", "optional": True}}},
        ]
    }
    assert pod_volumes.env(container, "hpc", CONFIGMAPS, SECRETS) == {"A": "1", "B": "jwt"}
    with pytest.raises(pod_volumes.VolumeError, match="fieldRef"):
        pod_volumes.env({"env": [{"name": "X", "valueFrom": {"fieldRef": {}}}]}, "hpc", {}, {})


# ------------------------------------------------------------------------------------------------ dns
def test_hosts_resolve_services_to_a_ready_pod_and_headless_members_by_search_domain() -> None:
    login = pod(
        {"name": "login"},
        dnsConfig={"searches": ["slurm-workers.hpc.svc.cluster.local"]},
        hostname="login-0",
    )
    peers = [
        running(
            "slurm-controller-0",
            "10.0.0.5",
            labels={"app": "ctl"},
            hostname="slurm-controller-0",
            subdomain="slurm-controller-internal",
        ),
        running("slurm-restapi-x", "10.0.0.6", ready=False, labels={"app": "rest"}),
        running("cpu-0", "10.0.0.7", hostname="cpu-0", subdomain="slurm-workers"),
        running("cpu-1", "10.0.1.7", ns="other", hostname="cpu-1", subdomain="slurm-workers"),
    ]
    services = [
        {"metadata": {"name": "slurm-controller", "namespace": "hpc"}, "spec": {"selector": {"app": "ctl"}}},
        {"metadata": {"name": "slurm-restapi", "namespace": "hpc"}, "spec": {"selector": {"app": "rest"}}},
        {
            "metadata": {"name": "slurm-restapi-all", "namespace": "hpc"},
            "spec": {"selector": {"app": "rest"}, "publishNotReadyAddresses": True},
        },
    ]
    text = pod_dns.hosts_file(login, "10.0.0.9", peers, services, [("10.0.0.1", "slinkyctl")])
    lines = {line.split()[0]: line.split()[1:] for line in text.splitlines()}
    assert lines["127.0.0.1"] == ["localhost"] and lines["10.0.0.9"] == ["login-0"]
    assert lines["10.0.0.1"] == ["slinkyctl"]
    assert "slurm-controller-0.slurm-controller-internal.hpc.svc.cluster.local" in lines["10.0.0.5"]
    assert "slurm-controller" in lines["10.0.0.5"] and "slurm-controller.hpc.svc" in lines["10.0.0.5"]
    assert "cpu-0" in lines["10.0.0.7"], "the workers' domain is in the login pod's search list"
    assert "cpu-1" not in lines["10.0.1.7"] and "cpu-1.slurm-workers.other" in lines["10.0.1.7"]
    assert "slurm-restapi" not in text.split(), "no ready endpoint: the name does not resolve"
    assert "slurm-restapi-all" in lines["10.0.0.6"]


def test_a_launch_merges_the_daemons_env_and_merges_slurmd_args_with_the_address() -> None:
    slurmd = pod(
        {"name": "slurmd", "args": ["-Z", "--conf", "Features=cpu"], "env": [{"name": "SLURM_JWT", "value": "x"}]}
    )
    planned = launch.plan(slurmd, {}, {}, [], [])
    argv = planned.argv("10.0.0.3")
    assert argv[:2] == ["/usr/sbin/slurmd", "-D"] and "-Z" in argv
    assert "NodeAddr=10.0.0.3" in argv[-1] and "Features=cpu,nodeset-pod" in argv[-1]
    rest = launch.plan(pod({"name": "slurmrestd", "env": [{"name": "SLURM_JWT", "value": "x"}]}), {}, {}, [], [])
    assert rest.environment()["SLURM_JWT"] == "daemon" and rest.user == "slurmrest"
    with pytest.raises(ValueError, match="no daemon container"):
        launch.plan(pod({"name": "nginx"}), {}, {}, [], [])


def test_an_unbound_claim_of_no_class_gets_a_pre_bound_host_path_volume() -> None:
    claim = {
        "metadata": {"name": "statesave-slurm-controller-0", "namespace": "hpc", "uid": "c1"},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "4Gi"}}},
        "status": {"phase": "Pending"},
    }
    pv = pod_volumes.provision(claim, "/state/")
    assert pv is not None and pv["metadata"]["name"] == "local-c1"
    assert pv["spec"]["hostPath"]["path"] == "/state/volumes/hpc/statesave-slurm-controller-0"
    assert pv["spec"]["claimRef"]["uid"] == "c1" and pv["spec"]["capacity"] == {"storage": "4Gi"}
    assert pv["spec"]["persistentVolumeReclaimPolicy"] == "Retain" and pv["spec"]["storageClassName"] == ""
    assert pod_volumes.provision({**claim, "spec": {**claim["spec"], "volumeName": "x"}}, "/s") is None
    assert pod_volumes.provision({**claim, "spec": {**claim["spec"], "storageClassName": "fast"}}, "/s") is None
    assert pod_volumes.provision({**claim, "status": {"phase": "Bound"}}, "/s") is None


def test_dev_exec_finds_a_pod_by_name_in_any_namespace(tmp_path: Path) -> None:
    """`slinky dev exec POD -- CMD` (no -n) finds the pod in whichever namespace runs it; two of one name ask
    for -n; a namespace given picks that one."""
    import os

    from slinky.dev import slurmd_runtime as rt

    me = rt.start_time(os.getpid())
    pods = {
        "u1": rt.PodProcess("u1", "slinky", "login-1", "login-1", 1, os.getpid(), me),
        "u2": rt.PodProcess("u2", "a", "slurm-controller-0", "c", 2, os.getpid(), me),
        "u3": rt.PodProcess("u3", "b", "slurm-controller-0", "c", 3, os.getpid(), me),
        "u4": rt.PodProcess("u4", "b", "gone", "g", 4, 0, ""),
    }
    rt.write_state(tmp_path, pods, 4)
    argv = rt.exec_argv(tmp_path, Path("/root"), None, "login-1", ["sinfo"])
    assert argv is not None and argv[argv.index("--target") + 1] == str(os.getpid()) and argv[-1] == "sinfo"
    with pytest.raises(ValueError, match="namespaces a, b"):
        rt.exec_argv(tmp_path, Path("/root"), None, "slurm-controller-0", ["sinfo"])
    assert rt.exec_argv(tmp_path, Path("/root"), "b", "slurm-controller-0", ["sinfo"]) is not None
    assert rt.exec_argv(tmp_path, Path("/root"), None, "gone", ["sinfo"]) is None
    assert rt.exec_argv(tmp_path, Path("/root"), "other", "login-1", ["sinfo"]) is None
