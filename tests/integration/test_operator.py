"""The operator on the real stack: NodeSet scale-out and scale-in of pods, status, bad input.

Pods here have no Slurm node yet when the stack runs no kube-scheduler; the scale-in workflow then confirms
the node is absent and jobless before it deletes the pod (tests/integration/test_nodeset_slurmd.py runs
real slurmd pods with real jobs).
"""

from __future__ import annotations

import subprocess
from typing import Any

import pytest

from tests.integration.cluster import Kube
from tests.integration.operator_fixtures import SLURMD_IMAGE, apply_nodeset, condition, nodeset, scale, wait_for

pytestmark = pytest.mark.integration


def pod_names(kube: Kube, ns: str) -> list[str]:
    return sorted(p["metadata"]["name"] for p in kube.pods(ns) if not p["metadata"].get("deletionTimestamp"))


def test_scale_out_then_in_keeps_the_lowest_ordinals(kube: Kube, cluster: str) -> None:
    ns = cluster
    apply_nodeset(kube, ns, "cpu", replicas=3, ordinalPadding=2, slurmd={"image": SLURMD_IMAGE})
    wait_for(lambda: pod_names(kube, ns) == ["cpu-00", "cpu-01", "cpu-02"], what="three pods")
    status = wait_for(
        lambda: (s := nodeset(kube, ns, "cpu").get("status", {})).get("replicas") == 3 and s, what="status"
    )
    assert status["selector"] == "app.kubernetes.io/instance=cpu,app.kubernetes.io/name=slurmd"
    assert status["nodeSetHash"] and status["updatedReplicas"] == 3
    pod = kube.pod(ns, "cpu-01")
    assert pod is not None and pod["spec"]["hostname"] == "cpu-01"
    assert pod["spec"]["containers"][0]["args"][:2] == ["-Z", "--conf-server"]
    # Upstream's order condemns not-ready pods first: wait until all three run slurmd and are Ready.
    wait_for(lambda: nodeset(kube, ns, "cpu").get("status", {}).get("readyReplicas") == 3, timeout=60, what="ready")
    scale(kube, ns, "cpu", 1)
    # Gone for good (not only terminating): a terminating pod still holds its ordinal, as in a StatefulSet.
    wait_for(lambda: [p["metadata"]["name"] for p in kube.pods(ns)] == ["cpu-00"], timeout=40, what="scale-in")
    wait_for(lambda: nodeset(kube, ns, "cpu").get("status", {}).get("replicas") == 1, what="status replicas 1")
    scale(kube, ns, "cpu", 2)
    wait_for(lambda: pod_names(kube, ns) == ["cpu-00", "cpu-01"], what="hole refilled")
    scale(kube, ns, "cpu", 0)
    wait_for(lambda: pod_names(kube, ns) == [], timeout=30, what="scale to zero")


@pytest.mark.parametrize(
    ("name", "spec", "type_", "reason"),
    [
        ("carriage", {"extraConf": "Weight=1\rNodeName=evil"}, "SpecValid", "InvalidExtraConf"),
        ("zero", {"updateStrategy": {"rollingUpdate": {"maxUnavailable": "0%"}}}, "SpecValid", "InvalidMaxUnavailable"),
        ("orphan", {"controllerRef": {"name": "nosuch"}}, "ControllerReady", "ControllerNotFound"),
        ("refused", {"template": {"spec": {"restartPolicy": "Sometimes"}}}, "SpecValid", "FailedCreate"),
    ],
)
def test_bad_input_is_a_condition_and_an_event_and_others_go_on(
    kube: Kube, cluster: str, name: str, spec: dict[str, object], type_: str, reason: str
) -> None:
    ns = cluster
    apply_nodeset(kube, ns, name, replicas=1, **spec)
    apply_nodeset(kube, ns, "good", replicas=1)
    cond = wait_for(lambda: condition(nodeset(kube, ns, name), type_), what=f"{type_} on {name}")
    assert cond["status"] == "False" and cond["reason"] == reason and cond["message"]
    events = wait_for(lambda: [e for e in kube.events(ns, name) if e["reason"] == reason], what="event")
    assert events[0]["type"] == "Warning" and events[0]["source"]["component"] == "slurm-operator"
    assert not [n for n in pod_names(kube, ns) if n.startswith(name)], "nothing is created for a bad NodeSet"
    wait_for(lambda: "good-0" in pod_names(kube, ns), what="the good NodeSet is reconciled")


def test_missing_jwt_key_secret_is_reported(kube: Kube, cluster: str) -> None:
    ns = cluster
    kube.core.delete_namespaced_secret("slurm-keys", ns)
    apply_nodeset(kube, ns, "nokey", replicas=1)
    cond = wait_for(lambda: condition(nodeset(kube, ns, "nokey"), "ControllerReady"), timeout=20, what="condition")
    assert cond["reason"] == "JwtKeySecretNotFound" and "slurm-keys" in cond["message"]


def test_an_unreachable_slurmrestd_is_reported_and_other_controllers_go_on(kube: Kube, cluster: str) -> None:
    """A second external Controller whose slurmrestd does not answer (the `slinky.slurm.net/slurmrestd-url`
    annotation names a closed port): its NodeSet says SlurmUnreachable, the stack's Controller's NodeSet runs."""
    from slinky import wellknown
    from tests.integration.operator_fixtures import GROUP, VERSION, objects

    ns = cluster
    far = objects(kube).get_namespaced_custom_object(GROUP, VERSION, ns, "controllers", "slurm")
    far["metadata"] = {"name": "far", "annotations": {wellknown.ANNOTATION_CONTROLLER_REST_URL: "http://127.0.0.1:9"}}
    objects(kube).create_namespaced_custom_object(GROUP, VERSION, ns, "controllers", far)
    apply_nodeset(kube, ns, "remote", replicas=1, controllerRef={"name": "far"})
    apply_nodeset(kube, ns, "near", replicas=1)
    cond = wait_for(lambda: condition(nodeset(kube, ns, "remote"), "ControllerReady"), 30, "condition")
    assert cond["status"] == "False" and cond["reason"] == "SlurmUnreachable" and "slurmrestd" in cond["message"]
    wait_for(lambda: [e for e in kube.events(ns, "remote") if e["reason"] == "SlurmUnreachable"], what="event")
    assert "remote-0" not in pod_names(kube, ns), "nothing is made while Slurm cannot be asked"
    wait_for(lambda: "near-0" in pod_names(kube, ns), what="the other Controller's NodeSet is reconciled")


def test_ssh_enabled_runs_sshd_in_the_worker_pods_and_every_field_is_supported(kube: Kube, cluster: str) -> None:
    """`ssh.enabled` (upstream's field, once refused here): sshd answers on port 22 of the slurmd pod with a host
    key of its own, beside a slurmd that registers; `FieldsSupported` is True with every field set."""
    ns = cluster
    kube.core.create_namespaced_secret(
        ns, {"metadata": {"name": "sssd"}, "stringData": {"sssd.conf": "[sssd]\nservices = nss\n"}}
    )
    ssh = {"enabled": True, "extraSshdConfig": "MaxSessions 4", "sssdConfRef": {"name": "sssd", "key": "sssd.conf"}}
    claims = [
        {
            "metadata": {"name": "scratch"},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "16Mi"}}},
        }
    ]
    apply_nodeset(kube, ns, "sshd", replicas=1, ssh=ssh, volumeClaimTemplates=claims)
    pod = wait_for(
        lambda: (p := kube.pod(ns, "sshd-0")) and condition(p, "Ready").get("status") == "True" and p,
        120,
        "sshd-0 Ready",
    )
    config = kube.core.read_namespaced_config_map("sshd-ssh-config", ns).data["sshd_config"]
    assert config.splitlines()[-1] == "MaxSessions 4"

    def keyscan() -> str:
        done = subprocess.run(
            ["ssh-keyscan", "-T", "5", "-t", "ed25519", pod["status"]["podIP"]], capture_output=True, text=True
        )
        return done.stdout

    assert "ssh-ed25519 " in wait_for(keyscan, 30, "sshd answers on port 22")
    cond = wait_for(lambda: condition(nodeset(kube, ns, "sshd"), "FieldsSupported"), 20, "FieldsSupported")
    assert cond["status"] == "True", cond


def test_min_ready_seconds_holds_availability_back(kube: Kube, cluster: str) -> None:
    """A Ready pod counts as available only after `minReadySeconds` (as a StatefulSet's); no condition names it."""
    ns = cluster
    apply_nodeset(kube, ns, "steady", replicas=1, minReadySeconds=6)
    status = wait_for(
        lambda: (s := nodeset(kube, ns, "steady").get("status") or {}).get("readyReplicas") == 1 and s, 90
    )
    assert status.get("availableReplicas") == 0, status
    wait_for(lambda: nodeset(kube, ns, "steady").get("status", {}).get("availableReplicas") == 1, 20, "available")
    assert condition(nodeset(kube, ns, "steady"), "FieldsSupported")["status"] == "True"


def test_a_slurmd_that_never_joins_slurm_is_named_quoting_slurmd(kube: Kube, cluster: str) -> None:
    """A NodeSet of a Controller whose slurmctld address is wrong (a closed port): the pod runs, its slurmd cannot
    fetch its configuration, and after the grace period `SlurmdRegistered` is False naming the pod, with slurmd's
    own last error line. The other conditions read healthy: only this one can tell."""
    from tests.integration.conftest import REGISTRATION_GRACE_SECONDS
    from tests.integration.operator_fixtures import GROUP, VERSION, objects

    ns = cluster
    lost = objects(kube).get_namespaced_custom_object(GROUP, VERSION, ns, "controllers", "slurm")
    lost["metadata"] = {"name": "lost"}
    lost["spec"]["externalConfig"]["port"] = 9  # nothing listens: slurmd's configless fetch fails
    objects(kube).create_namespaced_custom_object(GROUP, VERSION, ns, "controllers", lost)
    apply_nodeset(kube, ns, "astray", replicas=1, controllerRef={"name": "lost"})

    def said() -> dict[str, Any]:  # slurmd's words join the message once its log has them (next reconcile)
        c = condition(nodeset(kube, ns, "astray"), "SlurmdRegistered")
        return c if c.get("status") == "False" and "slurmd says:" in c.get("message", "") else {}

    cond = wait_for(said, 150, "SlurmdRegistered=False quoting slurmd")
    assert cond["reason"] == "NotRegistered", cond
    grace = REGISTRATION_GRACE_SECONDS  # the module operator's setting (the default is 30 s)
    assert (
        f"pod astray-0: slurmd runs but Slurm node astray-0 has not registered for more than {grace}s"
        in cond["message"]
    )
    assert "slurmd says: [" in cond["message"], cond["message"]  # a line of its log, with its time
    assert condition(nodeset(kube, ns, "astray"), "ControllerReady")["status"] == "True"
    events = wait_for(lambda: [e for e in kube.events(ns, "astray") if e["reason"] == "NotRegistered"], what="event")
    assert events[0]["type"] == "Warning"
