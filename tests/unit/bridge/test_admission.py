"""The admission rules (``slinky.bridge.admission``): every mutation and denial, allowed and denied, v1 and v1beta1."""

from __future__ import annotations

import base64
import copy
import json
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import pytest

from slinky import wellknown
from slinky.bridge import admission
from slinky.bridge.admission import AdmissionSettings
from tests.builders import make_pod

Obj = dict[str, Any]
VERSIONS = ("admission.k8s.io/v1", "admission.k8s.io/v1beta1")
SCHED = wellknown.SCHEDULER_NAME
MANAGED_NS = wellknown.DEFAULT_MANAGED_NAMESPACE
OTHER_NS = "elsewhere"
BRIDGE = admission.BRIDGE_SERVICE_ACCOUNT
SETTINGS = AdmissionSettings()
TOLERATION = admission.managed_node_toleration(SCHED)


def review_of(
    pod: Obj,
    *,
    version: str = VERSIONS[0],
    operation: str = "CREATE",
    old: Obj | None = None,
    user: str = "alice",
    sub_resource: str | None = None,
    resource: str = "pods",
) -> Obj:
    request: Obj = {
        "uid": "0b7c9f0e-uid",
        "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "resource": {"group": "", "version": "v1", "resource": resource},
        "namespace": pod["metadata"].get("namespace"),
        "name": pod["metadata"].get("name"),
        "operation": operation,
        "userInfo": {"username": user, "groups": ["system:authenticated"]},
        "object": pod,
    }
    if sub_resource:
        request["subResource"] = sub_resource
    if old is not None:
        request["oldObject"] = old
    return {"apiVersion": version, "kind": "AdmissionReview", "request": request}


def patch_of(response: Obj) -> list[Obj]:
    if "patch" not in response:
        return []
    assert response["patchType"] == "JSONPatch"
    ops: list[Obj] = json.loads(base64.b64decode(response["patch"]))
    return ops


def apply_patch(doc: Obj, ops: list[Obj]) -> Obj:
    """Enough RFC 6902 for our patches (add/remove on object members, append to arrays)."""
    out = copy.deepcopy(doc)
    for op in ops:
        *parents, last = op["path"].lstrip("/").split("/")
        target = out
        for part in parents:
            target = target[part]
        if op["op"] == "remove":
            del target[last]
        elif last == "-":
            target.append(op["value"])
        else:
            target[last] = op["value"]
    return out


# ------------------------------------------------------------------------------------------ envelope
@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("kind", ["mutate", "validate"])
def test_response_echoes_version_and_uid(version: str, kind: admission.Kind) -> None:
    out = admission.review(
        review_of(make_pod(namespace=OTHER_NS, scheduler_name="x"), version=version), SETTINGS, kind=kind
    )
    assert out == {
        "apiVersion": version,
        "kind": "AdmissionReview",
        "response": {"uid": "0b7c9f0e-uid", "allowed": True},
    }


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"apiVersion": "admission.k8s.io/v2", "kind": "AdmissionReview", "request": {"uid": "u"}},
        {"apiVersion": "admission.k8s.io/v1", "kind": "Pod", "request": {"uid": "u"}},
        {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"},
        {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {"uid": ""}},
    ],
)
def test_not_an_admission_review(body: Obj) -> None:
    with pytest.raises(ValueError):
        admission.review(body, SETTINGS, kind="validate")


# ------------------------------------------------------------------------------------------ mutate
@dataclass(frozen=True)
class MutateCase:
    id: str
    pod: Obj
    expect: list[Obj]
    operation: str = "CREATE"
    namespace_managed: bool = False
    settings: AdmissionSettings = SETTINGS


def _with(pod: Obj, **spec: Any) -> Obj:
    pod["spec"].update(spec)
    return pod


MUTATE_CASES = [
    MutateCase(
        "managed-ns-default-scheduler",
        make_pod(namespace=MANAGED_NS, scheduler_name="default-scheduler"),
        [
            {"op": "add", "path": "/spec/schedulerName", "value": SCHED},
            {"op": "add", "path": "/spec/tolerations", "value": [TOLERATION]},
        ],
    ),
    MutateCase(
        "managed-ns-empty-scheduler-and-node-name",
        make_pod(namespace=MANAGED_NS, scheduler_name="", node_name="n1"),
        [
            {"op": "add", "path": "/spec/schedulerName", "value": SCHED},
            {"op": "remove", "path": "/spec/nodeName"},
            {"op": "add", "path": "/spec/tolerations", "value": [TOLERATION]},
        ],
    ),
    MutateCase(
        "selector-scope-from-the-api-server",
        make_pod(namespace="labelled", scheduler_name="default-scheduler"),
        [
            {"op": "add", "path": "/spec/schedulerName", "value": SCHED},
            {"op": "add", "path": "/spec/tolerations", "value": [TOLERATION]},
        ],
        namespace_managed=True,
        settings=AdmissionSettings(managed_namespace_selector="team=hpc"),
    ),
    MutateCase(
        "selector-overrides-the-list",
        make_pod(namespace=MANAGED_NS, scheduler_name="default-scheduler"),
        [],
        settings=AdmissionSettings(managed_namespace_selector="team=hpc"),
    ),
    MutateCase(
        "appends-to-existing-tolerations",
        make_pod(namespace=MANAGED_NS, tolerations=[{"key": "a", "operator": "Exists"}]),
        [{"op": "add", "path": "/spec/tolerations/-", "value": TOLERATION}],
    ),
    MutateCase("toleration-already-there", make_pod(namespace=MANAGED_NS, tolerations=[TOLERATION]), []),
    MutateCase(
        "exists-toleration-for-the-key-covers-it",
        make_pod(namespace=MANAGED_NS, tolerations=[{"key": wellknown.TAINT_MANAGED_NODE, "operator": "Exists"}]),
        [],
    ),
    MutateCase(
        "toleration-with-seconds-does-not-count",
        make_pod(namespace=MANAGED_NS, tolerations=[{**TOLERATION, "tolerationSeconds": 5}]),
        [{"op": "add", "path": "/spec/tolerations/-", "value": TOLERATION}],
    ),
    MutateCase(
        "other-ns-naming-our-scheduler-13",
        make_pod(namespace=OTHER_NS, node_name="n1"),
        [
            {"op": "remove", "path": "/spec/nodeName"},
            {"op": "add", "path": "/spec/tolerations", "value": [TOLERATION]},
        ],
    ),
    MutateCase(
        "other-ns-default-scheduler-untouched", make_pod(namespace=OTHER_NS, scheduler_name="default-scheduler"), []
    ),
    MutateCase(
        "managed-ns-other-scheduler-keeps-it-but-loses-node-name",
        make_pod(namespace=MANAGED_NS, scheduler_name="volcano", node_name="n1"),
        [{"op": "remove", "path": "/spec/nodeName"}],
    ),
    MutateCase(
        "update-adds-only-the-toleration",
        make_pod(namespace=MANAGED_NS, node_name="n1"),
        [{"op": "add", "path": "/spec/tolerations", "value": [TOLERATION]}],
        operation="UPDATE",
    ),
    MutateCase(
        "update-never-touches-scheduler-name",
        make_pod(namespace=MANAGED_NS, scheduler_name="default-scheduler"),
        [],
        operation="UPDATE",
    ),
    MutateCase(
        "delete-is-ignored", make_pod(namespace=MANAGED_NS, scheduler_name="default-scheduler"), [], operation="DELETE"
    ),
]


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("case", MUTATE_CASES, ids=lambda c: c.id)
def test_mutate(case: MutateCase, version: str) -> None:
    body = review_of(case.pod, version=version, operation=case.operation)
    out = admission.review(body, case.settings, kind="mutate", namespace_managed=case.namespace_managed)
    assert out["apiVersion"] == version
    response = out["response"]
    assert response["allowed"] is True
    assert patch_of(response) == case.expect
    # The patch applies, and applying it again changes nothing (both webhooks may see one pod).
    patched = apply_patch(case.pod, case.expect)
    again = admission.review(
        review_of(patched, operation=case.operation),
        case.settings,
        kind="mutate",
        namespace_managed=case.namespace_managed,
    )
    assert "patch" not in again["response"]


def test_mutate_skips_a_terminating_pod_on_update() -> None:
    pod = make_pod(namespace=MANAGED_NS)
    pod["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    out = admission.review(review_of(pod, operation="UPDATE"), SETTINGS, kind="mutate")
    assert "patch" not in out["response"]


@pytest.mark.parametrize(("resource", "sub"), [("pods", "status"), ("pods", "binding"), ("configmaps", None)])
def test_mutate_ignores_other_resources(resource: str, sub: str | None) -> None:
    pod = make_pod(namespace=MANAGED_NS, scheduler_name="default-scheduler")
    out = admission.review(review_of(pod, resource=resource, sub_resource=sub), SETTINGS, kind="mutate")
    assert out["response"] == {"uid": "0b7c9f0e-uid", "allowed": True}


def test_custom_scheduler_name() -> None:
    settings = AdmissionSettings(scheduler_name="my-bridge")
    out = admission.review(review_of(make_pod(namespace=MANAGED_NS, scheduler_name="")), settings, kind="mutate")
    ops = patch_of(out["response"])
    assert ops[0]["value"] == "my-bridge"
    assert ops[-1]["value"] == [admission.managed_node_toleration("my-bridge")]


# ------------------------------------------------------------------------------------------ validate
@dataclass(frozen=True)
class ValidateCase:
    id: str
    pod: Obj
    denied: list[str] = field(default_factory=list)
    """Expected messages, in order; empty means allowed."""
    operation: str = "CREATE"
    old: Obj | None = None
    user: str = "alice"
    sub_resource: str | None = None
    namespace_managed: bool = False
    settings: AdmissionSettings = SETTINGS
    warnings: list[str] = field(default_factory=list)


def pod(namespace: str = MANAGED_NS, **kw: Any) -> Obj:
    return make_pod("p", namespace, **kw)


def _edit(base: Obj, fn: Callable[[Obj], None]) -> Obj:
    out = copy.deepcopy(base)
    fn(out)
    return out


JOBID = {wellknown.LABEL_SLURM_JOB_ID: "42"}
NODE = {wellknown.ANNOTATION_SLURM_NODE: "slinky-node-1"}
BOUND = pod(labels=JOBID, annotations=NODE)
TSC = [{"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule"}]
CLAIMS = [{"name": "gpu", "source": {"resourceClaimName": "gpu"}}]

VALIDATE_CASES = [
    ValidateCase("plain-managed-pod", pod()),
    ValidateCase("jobid-label-on-create", pod(labels=JOBID), [admission.MSG_JOBID_LABEL_ON_CREATE]),
    ValidateCase("node-annotation-on-create", pod(annotations=NODE), [admission.MSG_NODE_ANNOTATION_ON_CREATE]),
    ValidateCase(
        "both-reserved-keys-on-create-even-by-the-bridge",
        BOUND,
        [admission.MSG_JOBID_LABEL_ON_CREATE, admission.MSG_NODE_ANNOTATION_ON_CREATE],
        user=BRIDGE,
    ),
    ValidateCase("resource-claims", _with(pod(), resourceClaims=CLAIMS), [admission.MSG_RESOURCE_CLAIMS]),
    ValidateCase("empty-resource-claims", _with(pod(), resourceClaims=[])),
    ValidateCase("topology-spread", _with(pod(), topologySpreadConstraints=TSC), [admission.MSG_TOPOLOGY_SPREAD]),
    ValidateCase(
        "bad-annotation-value",
        pod(annotations={wellknown.ANNOTATION_MIN_NODES: "zero"}),
        [f"metadata.annotations[{wellknown.ANNOTATION_MIN_NODES}]: 'zero' is not a whole number"],
    ),
    ValidateCase(
        "unknown-annotation-typo",
        pod(annotations={wellknown.PREFIX_SLURMJOB + "partiton": "debug"}),
        [
            f"metadata.annotations[{wellknown.PREFIX_SLURMJOB}partiton]: not a known {wellknown.PREFIX_SLURMJOB}*"
            f" annotation; did you mean {wellknown.ANNOTATION_PARTITION}?"
        ],
    ),
    ValidateCase(
        "good-annotations",
        pod(annotations={wellknown.ANNOTATION_MIN_NODES: "2", wellknown.ANNOTATION_EXCLUSIVE: "true"}),
    ),
    ValidateCase(
        "deprecated-alias-is-a-warning",
        pod(annotations={wellknown.PREFIX_SLINKY + "account": "physics"}),
        warnings=[f"{wellknown.PREFIX_SLINKY}account is deprecated; use {wellknown.ANNOTATION_ACCOUNT}"],
    ),
    ValidateCase(
        "every-denial-at-once",
        _with(
            pod(labels=JOBID, annotations={**NODE, wellknown.ANNOTATION_EXCLUSIVE: "yes"}),
            topologySpreadConstraints=TSC,
        ),
        [
            admission.MSG_JOBID_LABEL_ON_CREATE,
            admission.MSG_NODE_ANNOTATION_ON_CREATE,
            admission.MSG_TOPOLOGY_SPREAD,
            f'metadata.annotations[{wellknown.ANNOTATION_EXCLUSIVE}]: \'yes\' must be "true" or "false"',
        ],
    ),
    # Scope: #13 and unmanaged pods.
    ValidateCase(
        "other-ns-naming-our-scheduler-13",
        pod(OTHER_NS, annotations={wellknown.ANNOTATION_MIN_NODES: "0"}),
        [f"metadata.annotations[{wellknown.ANNOTATION_MIN_NODES}]: 0 is outside 1..2147483647"],
    ),
    ValidateCase(
        "other-ns-other-scheduler-is-not-ours",
        _with(
            pod(
                OTHER_NS,
                labels=JOBID,
                scheduler_name="default-scheduler",
                annotations={wellknown.ANNOTATION_MIN_NODES: "0"},
            ),
            topologySpreadConstraints=TSC,
        ),
    ),
    ValidateCase(
        "managed-ns-other-scheduler-still-validated",
        pod(labels=JOBID, scheduler_name="volcano"),
        [admission.MSG_JOBID_LABEL_ON_CREATE],
    ),
    ValidateCase(
        "selector-scope-from-the-api-server",
        pod("labelled", labels=JOBID, scheduler_name="volcano"),
        [admission.MSG_JOBID_LABEL_ON_CREATE],
        namespace_managed=True,
        settings=AdmissionSettings(managed_namespace_selector="team=hpc"),
    ),
    ValidateCase(
        "selector-overrides-the-list",
        pod(labels=JOBID, scheduler_name="volcano"),
        settings=AdmissionSettings(managed_namespace_selector="team=hpc"),
    ),
    # UPDATE.
    ValidateCase("update-by-bridge-sets-keys", BOUND, old=pod(), operation="UPDATE", user=BRIDGE),
    ValidateCase(
        "update-by-user-sets-jobid",
        pod(labels=JOBID),
        [admission.MSG_JOBID_LABEL_CHANGED],
        old=pod(),
        operation="UPDATE",
    ),
    ValidateCase(
        "update-by-user-changes-node",
        pod(labels=JOBID, annotations={wellknown.ANNOTATION_SLURM_NODE: "elsewhere"}),
        [admission.MSG_NODE_ANNOTATION_CHANGED],
        old=BOUND,
        operation="UPDATE",
    ),
    ValidateCase(
        "update-by-user-changes-workflow-id",
        _edit(
            BOUND,
            lambda p: (
                p["metadata"]
                .setdefault("annotations", {})
                .update({wellknown.ANNOTATION_WORKFLOW_ID: "workload/x/other"})
            ),
        ),
        [admission.MSG_WORKFLOW_ANNOTATION_CHANGED],
        old=BOUND,
        operation="UPDATE",
    ),
    ValidateCase(
        "update-by-user-removes-both",
        pod(),
        [admission.MSG_JOBID_LABEL_CHANGED, admission.MSG_NODE_ANNOTATION_CHANGED],
        old=BOUND,
        operation="UPDATE",
    ),
    ValidateCase(
        "update-by-user-other-labels",
        _edit(BOUND, lambda p: p["metadata"]["labels"].update(team="a")),
        old=BOUND,
        operation="UPDATE",
    ),
    ValidateCase(
        "update-by-dev-admin-with-dev-settings",
        pod(labels=JOBID),
        old=pod(),
        operation="UPDATE",
        user="admin",
        settings=replace(SETTINGS, bridge_usernames=frozenset({BRIDGE, "admin"})),
    ),
    ValidateCase(
        "update-admin-is-not-the-bridge-by-default",
        pod(labels=JOBID),
        [admission.MSG_JOBID_LABEL_CHANGED],
        old=pod(),
        operation="UPDATE",
        user="admin",
    ),
    ValidateCase(
        "update-bad-annotation",
        pod(annotations={wellknown.ANNOTATION_TIMELIMIT: "1h"}),
        [f"metadata.annotations[{wellknown.ANNOTATION_TIMELIMIT}]: '1h' is not a whole number"],
        old=pod(),
        operation="UPDATE",
    ),
    ValidateCase(
        "update-keeps-an-old-value-it-does-not-touch",
        pod(labels={"a": "b"}, annotations={wellknown.ANNOTATION_TIMELIMIT: "1h"}),
        old=pod(annotations={wellknown.ANNOTATION_TIMELIMIT: "1h"}),
        operation="UPDATE",
    ),
    ValidateCase(
        "update-keeps-tsc-and-node-annotation-set-earlier",
        _with(pod(annotations=NODE), topologySpreadConstraints=TSC),
        old=_with(pod(annotations=NODE), topologySpreadConstraints=TSC),
        operation="UPDATE",
    ),
    ValidateCase(
        "resize", pod(), [admission.MSG_RESIZE], operation="UPDATE", old=pod(), sub_resource="resize", user=BRIDGE
    ),
    ValidateCase(
        "resize-of-an-unmanaged-pod",
        pod(OTHER_NS, scheduler_name="default-scheduler"),
        operation="UPDATE",
        old=pod(OTHER_NS, scheduler_name="default-scheduler"),
        sub_resource="resize",
    ),
    ValidateCase("status-subresource", pod(labels=JOBID), old=pod(), operation="UPDATE", sub_resource="status"),
]


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("case", VALIDATE_CASES, ids=lambda c: c.id)
def test_validate(case: ValidateCase, version: str) -> None:
    body = review_of(
        case.pod,
        version=version,
        operation=case.operation,
        old=case.old,
        user=case.user,
        sub_resource=case.sub_resource,
    )
    out = admission.review(body, case.settings, kind="validate", namespace_managed=case.namespace_managed)
    assert out["apiVersion"] == version
    assert out["kind"] == "AdmissionReview"
    response = out["response"]
    assert response["uid"] == "0b7c9f0e-uid"
    assert "patch" not in response
    if case.denied:
        assert response["allowed"] is False
        assert response["status"] == {"code": 403, "reason": "Forbidden", "message": "; ".join(case.denied)}
    else:
        assert response["allowed"] is True, response.get("status")
        assert response.get("warnings", []) == case.warnings


def test_messages_name_the_field_and_say_why() -> None:
    assert admission.MSG_JOBID_LABEL_ON_CREATE == (
        "metadata.labels[scheduler.slinky.slurm.net/slurm-jobid]: set by the bridge from the Slurm job; remove it"
    )
    for msg in (
        admission.MSG_JOBID_LABEL_ON_CREATE,
        admission.MSG_NODE_ANNOTATION_ON_CREATE,
        admission.MSG_JOBID_LABEL_CHANGED,
        admission.MSG_NODE_ANNOTATION_CHANGED,
        admission.MSG_WORKFLOW_ANNOTATION_CHANGED,
        admission.MSG_RESOURCE_CLAIMS,
        admission.MSG_TOPOLOGY_SPREAD,
        admission.MSG_RESIZE,
    ):
        path, why = msg.split(": ", 1)
        assert path.startswith(("metadata.", "spec.", "pods/")) and len(why) > 10


# ------------------------------------------------------------------------------------------ selectors
@pytest.mark.parametrize(
    ("text", "expect"),
    [
        ("a=b", [("a", "In", ("b",))]),
        ("a==b", [("a", "In", ("b",))]),
        ("x.io/a!=b", [("x.io/a", "NotIn", ("b",))]),
        ("a in (b, c),d", [("a", "In", ("b", "c")), ("d", "Exists", ())]),
        ("a notin (b),!e", [("a", "NotIn", ("b",)), ("e", "DoesNotExist", ())]),
        ("slinky.slurm.net/managed=true", [("slinky.slurm.net/managed", "In", ("true",))]),
    ],
)
def test_parse_selector(text: str, expect: list[tuple[str, str, tuple[str, ...]]]) -> None:
    assert [(r.key, r.operator, r.values) for r in admission.parse_selector(text)] == expect


@pytest.mark.parametrize("text", ["", "a=b,", "a in b", "=b", "a b"])
def test_parse_selector_rejects(text: str) -> None:
    with pytest.raises(ValueError):
        admission.parse_selector(text)


@pytest.mark.parametrize("text", ["a=b", "a!=b", "a in (b,c)", "a", "!a"])
@pytest.mark.parametrize("labels", [{}, {"a": "b"}, {"a": "c"}, {"a": "z"}, {"q": "b"}])
def test_negated_requirement_is_the_complement(text: str, labels: dict[str, str]) -> None:
    (req,) = admission.parse_selector(text)
    assert req.matches(labels) != req.negated().matches(labels)


# ------------------------------------------------------------------------------------------ registration
def test_configurations() -> None:
    settings = AdmissionSettings(managed_namespace_selector="slinky.slurm.net/managed=true")
    mutating, validating = admission.webhook_configurations(
        settings, base_url="https://127.0.0.1:16444", ca_bundle=b"PEM"
    )
    assert mutating["kind"] == "MutatingWebhookConfiguration"
    assert validating["kind"] == "ValidatingWebhookConfiguration"
    for config in (mutating, validating):
        assert config["metadata"]["name"] == "pods.slinky.slurm.net"
        assert config["apiVersion"] == "admissionregistration.k8s.io/v1"
        managed, scheduler = config["webhooks"]
        assert managed["name"] == "managed.pods.slinky.slurm.net"
        assert scheduler["name"] == "scheduler.pods.slinky.slurm.net"
        for hook in config["webhooks"]:
            assert hook["sideEffects"] == "None"
            assert hook["admissionReviewVersions"] == ["v1", "v1beta1"]
            assert hook["timeoutSeconds"] == 5
            assert hook["clientConfig"]["caBundle"] == base64.b64encode(b"PEM").decode()
            assert hook["rules"][0]["operations"] == ["CREATE", "UPDATE"]
            exprs = hook["namespaceSelector"]["matchExpressions"]
            assert {"key": wellknown.LABEL_WEBHOOK, "operator": "NotIn", "values": ["ignore"]} in exprs
            assert {
                "key": "kubernetes.io/metadata.name",
                "operator": "NotIn",
                "values": ["kube-system", "kube-public", "kube-node-lease", "slinky"],
            } in exprs
            assert hook["objectSelector"] == {
                "matchExpressions": [{"key": wellknown.LABEL_WEBHOOK, "operator": "NotIn", "values": ["ignore"]}]
            }
        managed_expr = {"key": "slinky.slurm.net/managed", "operator": "In", "values": ["true"]}
        assert managed_expr in managed["namespaceSelector"]["matchExpressions"]
        assert {**managed_expr, "operator": "NotIn"} in scheduler["namespaceSelector"]["matchExpressions"]
    # Mutation always fails open; validation fails closed only for managed namespaces (#189).
    assert [h["failurePolicy"] for h in mutating["webhooks"]] == ["Ignore", "Ignore"]
    assert [h["failurePolicy"] for h in validating["webhooks"]] == ["Fail", "Ignore"]
    assert [h["clientConfig"]["url"] for h in mutating["webhooks"]] == [
        "https://127.0.0.1:16444/mutate/managed",
        "https://127.0.0.1:16444/mutate",
    ]
    assert [h["clientConfig"]["url"] for h in validating["webhooks"]] == [
        "https://127.0.0.1:16444/validate/managed",
        "https://127.0.0.1:16444/validate",
    ]
    assert validating["webhooks"][0]["rules"][0]["resources"] == ["pods", "pods/resize"]
    assert mutating["webhooks"][0]["rules"][0]["resources"] == ["pods"]


def test_configurations_by_namespace_list_and_test_scope() -> None:
    mutating, _ = admission.webhook_configurations(
        AdmissionSettings(managed_namespaces=("a", "b")),
        base_url="https://x",
        ca_bundle=b"",
        only_namespaces_labelled="example.com/test",
    )
    managed, scheduler = mutating["webhooks"]
    assert {"key": "kubernetes.io/metadata.name", "operator": "In", "values": ["a", "b"]} in managed[
        "namespaceSelector"
    ]["matchExpressions"]
    for hook in (managed, scheduler):
        assert {"key": "example.com/test", "operator": "Exists"} in hook["namespaceSelector"]["matchExpressions"]


def test_configurations_with_a_multi_term_selector_send_everything_else_to_the_scheduler_hook() -> None:
    mutating, _ = admission.webhook_configurations(
        AdmissionSettings(managed_namespace_selector="a=b,c"), base_url="https://x", ca_bundle=b""
    )
    managed, scheduler = mutating["webhooks"]
    assert len(managed["namespaceSelector"]["matchExpressions"]) == 4
    assert len(scheduler["namespaceSelector"]["matchExpressions"]) == 2
