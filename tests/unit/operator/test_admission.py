"""slinky.operator.admission: the validating rules of the six kinds, each denial naming its field."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from slinky.operator import admission

Obj = dict[str, Any]


def obj(kind: str, spec: Obj, namespace: str = "hpc") -> Obj:
    return {"kind": kind, "metadata": {"name": "x", "namespace": namespace}, "spec": spec}


NODESET = {"controllerRef": {"name": "slurm"}, "slurmd": {"image": "slurmd:26.05"}, "replicas": 2}
CONTROLLER = {
    "slurmKeyRef": {"name": "keys", "key": "slurm.key"},
    "jwtKeyRef": {"name": "keys", "key": "jwt.key"},
    "extraConf": "MaxJobCount=5000\nPartitionName=all Nodes=ALL Default=YES  # the default\n\nInclude /etc/x.conf",
}
ACCOUNTING = {
    "slurmKeyRef": {"name": "keys", "key": "slurm.key"},
    "jwtKeyRef": {"name": "keys", "key": "jwt.key"},
    "storageConfig": {"host": "mariadb", "username": "slurm", "passwordKeyRef": {"name": "db", "key": "password"}},
}
LOGINSET = {"controllerRef": {"name": "slurm"}, "sssdConfRef": {"name": "sssd", "key": "sssd.conf"}}
TOKEN = {"jwtKeyRef": {"name": "keys", "key": "jwt.key"}, "username": "slurm", "lifetime": "1h"}
GOOD = {
    "NodeSet": NODESET,
    "Controller": CONTROLLER,
    "Accounting": ACCOUNTING,
    "LoginSet": LOGINSET,
    "RestApi": {"controllerRef": {"name": "slurm"}},
    "Token": TOKEN,
}


@pytest.mark.parametrize("kind", sorted(GOOD))
def test_good_objects_are_allowed_on_create_and_update(kind: str) -> None:
    assert admission.review(kind, "CREATE", None, obj(kind, GOOD[kind])) == []
    assert admission.review(kind, "UPDATE", obj(kind, GOOD[kind]), obj(kind, GOOD[kind])) == []


def with_(base: Obj, path: str, value: Any) -> Obj:
    out = copy.deepcopy(base)
    *parents, last = path.split(".")
    node = out
    for part in parents:
        node = node.setdefault(part, {})
    if value is None:
        node.pop(last, None)
    else:
        node[last] = value
    return out


@pytest.mark.parametrize(
    ("kind", "path", "value", "words"),
    [
        ("NodeSet", "updateStrategy.rollingUpdate.maxUnavailable", 0, "maxUnavailable must not be 0"),
        ("NodeSet", "updateStrategy.rollingUpdate.maxUnavailable", "0%", "maxUnavailable must not be 0"),
        ("NodeSet", "extraConf", "Features=a\rWeight=1", "spec.extraConf must be a single line"),
        ("NodeSet", "partition.config", "MaxTime=1\nState=UP", "spec.partition.config must be a single line"),
        ("NodeSet", "slurmd.image", None, "spec.slurmd.image is required"),
        ("NodeSet", "controllerRef", None, "spec.controllerRef"),
        ("Controller", "extraConf", "MaxJobCount=5000\rEvil=1", "spec.extraConf holds a control character"),
        ("Controller", "extraConf", "MaxJobCount=5000\nthis is not slurm", "line 2 is not Slurm configuration"),
        ("Controller", "slurmKeyRef", None, "spec.slurmKeyRef needs a name and a key"),
        ("Controller", "jwtKeyRef", None, "spec.jwtKeyRef needs a name and a key"),
        ("Accounting", "storageConfig.host", None, "spec.storageConfig.host"),
        ("Accounting", "storageConfig.passwordKeyRef", {"name": "db"}, "spec.storageConfig.passwordKeyRef"),
        ("Accounting", "extraConf", "CommitDelay=1\x07", "control character"),
        ("LoginSet", "sssdConfRef", None, "spec.sssdConfRef needs a name and a key"),
        (
            "Token",
            "jwtKeyRef",
            {"name": "keys", "key": "jwt.key", "namespace": "other"},
            "must be in the Token's namespace",
        ),
        ("Token", "lifetime", "15 minutes", "spec.lifetime"),
    ],
)
def test_each_rule_denies_naming_the_field(kind: str, path: str, value: Any, words: str) -> None:
    denials = admission.review(kind, "CREATE", None, obj(kind, with_(GOOD[kind], path, value)))
    assert any(words in d for d in denials), denials


def test_high_availability_needs_an_existing_shared_claim() -> None:
    ha = with_(CONTROLLER, "ha", {"enabled": True, "backups": 1})
    for persistence in (None, {"enabled": True}, {"enabled": False, "existingClaim": "state"}):
        denials = admission.review(
            "Controller", "CREATE", None, obj("Controller", with_(ha, "persistence", persistence))
        )
        assert any("spec.ha.enabled" in d and "existingClaim" in d and "ReadWriteMany" in d for d in denials), denials
    good = with_(ha, "persistence", {"existingClaim": "state"})
    assert admission.review("Controller", "CREATE", None, obj("Controller", good)) == []
    external = with_(with_(ha, "external", True), "externalConfig", {"host": "ctld.example.org", "port": 6817})
    denials = admission.review("Controller", "CREATE", None, obj("Controller", external))
    assert len(denials) == 1 and "spec.ha.enabled" in denials[0], denials  # upstream's rule spares no Controller


def test_a_scheduled_update_window_is_at_least_a_minute() -> None:
    spec = with_(
        NODESET, "updateStrategy", {"type": "ScheduledUpdate", "scheduledUpdate": {"startTime": "2026-12-01T02:00:00Z"}}
    )
    short = with_(spec, "updateStrategy.scheduledUpdate.duration", "30s")
    assert admission.review("NodeSet", "CREATE", None, obj("NodeSet", spec)) == []  # the default 30m
    assert admission.review("NodeSet", "CREATE", None, obj("NodeSet", short)) == [
        "spec.updateStrategy.scheduledUpdate.duration must be at least 1m, not '30s'"
    ]


def test_a_scheduled_update_needs_a_time_and_slurm_flags() -> None:
    spec = with_(NODESET, "updateStrategy", {"type": "ScheduledUpdate", "scheduledUpdate": {"startTime": "soon"}})
    bad_flag = with_(
        spec, "updateStrategy.scheduledUpdate", {"startTime": "2026-12-01T02:00:00Z", "flags": ["DAILY", "NIGHTLY"]}
    )
    assert admission.review("NodeSet", "CREATE", None, obj("NodeSet", spec)) == [
        "spec.updateStrategy.scheduledUpdate.startTime must be an RFC 3339 time (2026-12-01T02:00:00Z), not 'soon'"
    ]
    assert admission.review("NodeSet", "CREATE", None, obj("NodeSet", bad_flag)) == [
        "spec.updateStrategy.scheduledUpdate.flags: 'NIGHTLY' is not a Slurm reservation flag"
    ]


@pytest.mark.parametrize(
    ("kind", "field"), [("NodeSet", "controllerRef"), ("LoginSet", "controllerRef"), ("RestApi", "controllerRef")]
)
def test_the_controller_ref_is_immutable(kind: str, field: str) -> None:
    old = obj(kind, GOOD[kind])
    new = obj(kind, with_(GOOD[kind], field, {"name": "other"}))
    assert admission.review(kind, "UPDATE", old, new) == [
        "spec.controllerRef is immutable: it was {'name': 'slurm'}; delete and create the object to change it"
    ]


def test_volume_claim_templates_are_immutable() -> None:
    old = obj("NodeSet", with_(NODESET, "volumeClaimTemplates", [{"metadata": {"name": "a"}}]))
    new = obj("NodeSet", with_(NODESET, "volumeClaimTemplates", [{"metadata": {"name": "b"}}]))
    assert any("spec.volumeClaimTemplates is immutable" in d for d in admission.review("NodeSet", "UPDATE", old, new))


def test_a_write_that_keeps_the_spec_and_a_delete_are_never_denied() -> None:
    """The operator's finalizer removal on an object written before the webhook existed must go through."""
    bad = obj("NodeSet", with_(NODESET, "updateStrategy.rollingUpdate.maxUnavailable", 0))
    relabelled = copy.deepcopy(bad)
    relabelled["metadata"]["finalizers"] = []
    assert admission.review("NodeSet", "UPDATE", bad, relabelled) == []
    assert admission.review("NodeSet", "DELETE", bad, None) == []
    assert admission.review("Pod", "CREATE", None, {"spec": {}}) == [], "other kinds are not ours"


def test_external_components_need_only_their_address() -> None:
    assert admission.review("Controller", "CREATE", None, obj("Controller", {"external": True})) == [
        "spec.externalConfig.host is required when spec.external is true"
    ]
    ok = {"external": True, "externalConfig": {"host": "ctl.example.org", "port": 6817}}
    assert admission.review("Controller", "CREATE", None, obj("Controller", ok)) == []
    assert admission.review("Accounting", "CREATE", None, obj("Accounting", ok)) == []


def review_body(operation: str, new: Obj | None, old: Obj | None = None, api: str = "admission.k8s.io/v1") -> Obj:
    meta = (new or old or {}).get("metadata") or {}
    request = {
        "uid": "u-1",
        "kind": {"group": "slinky.slurm.net", "version": "v1beta1", "kind": (new or old or {}).get("kind")},
        "operation": operation,
        "namespace": meta.get("namespace"),
        "name": meta.get("name"),
        "object": new,
        "oldObject": old,
    }
    return {"apiVersion": api, "kind": "AdmissionReview", "request": request}


def test_the_answer_is_an_admission_review_that_kubectl_prints() -> None:
    bad = obj("NodeSet", with_(NODESET, "updateStrategy.rollingUpdate.maxUnavailable", 0))
    answer = admission.answer(review_body("CREATE", bad, api="admission.k8s.io/v1beta1"))
    assert answer["apiVersion"] == "admission.k8s.io/v1beta1" and answer["kind"] == "AdmissionReview"
    response = answer["response"]
    assert response["uid"] == "u-1" and response["allowed"] is False
    assert response["status"]["code"] == 422 and response["status"]["reason"] == "Invalid"
    assert response["status"]["message"].startswith("NodeSet hpc/x: spec.updateStrategy.rollingUpdate.maxUnavailable")
    good = admission.answer(review_body("CREATE", obj("NodeSet", NODESET)))
    assert good["response"] == {"uid": "u-1", "allowed": True}


@pytest.mark.parametrize(
    "body", [{}, {"apiVersion": "v1", "kind": "Pod"}, {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}]
)
def test_a_body_that_is_no_review_is_refused(body: Obj) -> None:
    with pytest.raises(ValueError):
        admission.answer(body)
