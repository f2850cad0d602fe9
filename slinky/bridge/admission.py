"""The bridge's pod admission rules, as pure functions over AdmissionReview dicts (no I/O).

``review`` answers one AdmissionReview (``admission.k8s.io/v1`` or ``v1beta1``; the answer echoes the
request's apiVersion). ``kind="mutate"`` returns a JSONPatch; ``kind="validate"`` allows or denies with
a message that names the field and says why. ``docs/admission.md`` lists every rule and message.

Which pods are covered (upstream slurm-bridge ``internal/admission``):

* pods in a managed namespace. The API server evaluates label selectors on namespaces, the webhook
  cannot see namespace labels, so the registration sends managed namespaces to a URL with
  ``/mutate/managed`` and ``/validate/managed`` and the server passes ``namespace_managed=True``. With a namespace list
  (no selector) the namespace name is checked here too;
* any pod whose ``spec.schedulerName`` is the bridge's, wherever it is (upstream issue #13).
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from slinky import admission_review as admission_review_envelope
from slinky import wellknown
from slinky.bridge.translate.annotations import parse_annotations
from slinky.bridge.translate.errors import TranslationError

Obj = dict[str, Any]
Kind = Literal["mutate", "validate"]

API_VERSIONS: Final = admission_review_envelope.API_VERSIONS
DEFAULT_SCHEDULER: Final = "default-scheduler"
BRIDGE_SERVICE_ACCOUNT: Final = "system:serviceaccount:slinky:slurm-bridge"
"""The bridge's identity in the chart (namespace ``slinky``, service account ``slurm-bridge``)."""
RESIZE_SUBRESOURCE: Final = "resize"


@dataclass(frozen=True)
class AdmissionSettings:
    """What the webhook needs to decide; built from ``Settings().bridge`` plus the webhook's own flags.

    Attributes:
        scheduler_name: The bridge's ``spec.schedulerName``.
        managed_namespaces: Managed namespaces by name; ignored when ``managed_namespace_selector`` is set.
        managed_namespace_selector: Label selector of managed namespaces (``k=v,k2 in (a,b)``); the
            API server evaluates it through the registration, see ``namespace_managed``.
        bridge_usernames: ``userInfo.username`` values allowed to change the jobid label and the node
            annotation (the bridge itself).
    """

    scheduler_name: str = wellknown.SCHEDULER_NAME
    managed_namespaces: tuple[str, ...] = (wellknown.DEFAULT_MANAGED_NAMESPACE,)
    managed_namespace_selector: str | None = None
    bridge_usernames: frozenset[str] = field(default_factory=lambda: frozenset({BRIDGE_SERVICE_ACCOUNT}))


# ------------------------------------------------------------------------------------------ messages
def _label(key: str) -> str:
    return f"metadata.labels[{key}]"


def _annotation(key: str) -> str:
    return f"metadata.annotations[{key}]"


MSG_JOBID_LABEL_ON_CREATE: Final = (
    f"{_label(wellknown.LABEL_SLURM_JOB_ID)}: set by the bridge from the Slurm job; remove it"
)
MSG_NODE_ANNOTATION_ON_CREATE: Final = (
    f"{_annotation(wellknown.ANNOTATION_SLURM_NODE)}: set by the bridge from the Slurm allocation; remove it"
)
MSG_JOBID_LABEL_CHANGED: Final = (
    f"{_label(wellknown.LABEL_SLURM_JOB_ID)}: only the bridge may change it (it ties the pod to its Slurm job)"
)
MSG_NODE_ANNOTATION_CHANGED: Final = (
    f"{_annotation(wellknown.ANNOTATION_SLURM_NODE)}: only the bridge may change it"
    " (it is the node Slurm allocated to the pod)"
)
MSG_WORKFLOW_ANNOTATION_CHANGED: Final = (
    f"{_annotation(wellknown.ANNOTATION_WORKFLOW_ID)}: only the bridge may change it"
    " (it names the Temporal workflow that owns the pod's lifecycle)"
)
MSG_RESOURCE_CLAIMS: Final = (
    "spec.resourceClaims: dynamic resource claims are not supported by the bridge;"
    " request resources in containers[].resources or the slurmjob.slinky.slurm.net/gres annotation"
)
MSG_TOPOLOGY_SPREAD: Final = (
    "spec.topologySpreadConstraints: not supported, Slurm picks the nodes;"
    " use the slurmjob.slinky.slurm.net/constraints annotation or a topology-aware partition"
)
MSG_RESIZE: Final = (
    "pods/resize: in-place resize is not supported, the Slurm job's allocation is fixed;"
    " delete the pod and create it with the new resources"
)


# ------------------------------------------------------------------------------------------ selectors
@dataclass(frozen=True)
class Requirement:
    """One term of a Kubernetes label selector."""

    key: str
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist"]
    values: tuple[str, ...] = ()

    def as_expression(self) -> Obj:
        expr: Obj = {"key": self.key, "operator": self.operator}
        if self.operator in ("In", "NotIn"):
            expr["values"] = list(self.values)
        return expr

    def negated(self) -> Requirement:
        opposite: dict[str, Literal["In", "NotIn", "Exists", "DoesNotExist"]] = {
            "In": "NotIn",
            "NotIn": "In",
            "Exists": "DoesNotExist",
            "DoesNotExist": "Exists",
        }
        return Requirement(self.key, opposite[self.operator], self.values)

    def matches(self, labels: Mapping[str, str]) -> bool:
        if self.operator == "Exists":
            return self.key in labels
        if self.operator == "DoesNotExist":
            return self.key not in labels
        if self.operator == "In":
            return self.key in labels and labels[self.key] in self.values
        return self.key not in labels or labels[self.key] not in self.values


_SET_TERM: Final = re.compile(r"^(?P<key>[^\s!=()]+)\s+(?P<op>in|notin)\s+\((?P<values>[^()]*)\)$")
_EQ_TERM: Final = re.compile(r"^(?P<key>[^\s!=()]+)\s*(?P<op>==|=|!=)\s*(?P<value>[^\s!=(),]*)$")
_KEY: Final = re.compile(r"^(?:[a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")


def parse_selector(text: str) -> tuple[Requirement, ...]:
    """Parse a label selector string (``kubectl -l`` syntax) into requirements.

    Supported: ``k=v``, ``k==v``, ``k!=v``, ``k in (a,b)``, ``k notin (a,b)``, ``k``, ``!k``.

    Raises:
        ValueError: The text is not a label selector.
    """
    terms: list[str] = []
    depth, start = 0, 0
    for i, ch in enumerate(text):
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif ch == "," and depth == 0:
            terms.append(text[start:i])
            start = i + 1
    terms.append(text[start:])
    out: list[Requirement] = []
    for raw in terms:
        term = raw.strip()
        if not term:
            raise ValueError(f"label selector {text!r}: empty term")
        key: str
        req: Requirement
        if m := _SET_TERM.match(term):
            key = m["key"]
            values = tuple(v.strip() for v in m["values"].split(",") if v.strip())
            req = Requirement(key, "In" if m["op"] == "in" else "NotIn", values)
        elif m := _EQ_TERM.match(term):
            key = m["key"]
            req = Requirement(key, "NotIn" if m["op"] == "!=" else "In", (m["value"],))
        elif term.startswith("!"):
            key = term[1:].strip()
            req = Requirement(key, "DoesNotExist")
        else:
            key = term
            req = Requirement(key, "Exists")
        if not _KEY.match(key):
            raise ValueError(f"label selector {text!r}: {key!r} is not a label key")
        out.append(req)
    return tuple(out)


# ------------------------------------------------------------------------------------------ review
def review(
    admission_review: Mapping[str, Any],
    settings: AdmissionSettings,
    *,
    kind: Kind,
    namespace_managed: bool = False,
) -> Obj:
    """Answer one AdmissionReview with an AdmissionReview of the same apiVersion.

    Args:
        admission_review: The request body the API server sent.
        settings: The managed scope and the bridge's identity.
        kind: ``"mutate"`` (JSONPatch) or ``"validate"`` (allow or deny).
        namespace_managed: The API server matched the namespace against the managed namespace
            selector (the registration's ``.../managed`` URL).

    Raises:
        ValueError: Not an AdmissionReview with a request (the server answers 400).
    """
    api_version, request = admission_review_envelope.request_of(admission_review)
    if kind == "mutate":
        response = _mutate(request, settings, namespace_managed)
    else:
        response = _validate(request, settings, namespace_managed)
    return admission_review_envelope.wrap(api_version, request, response)


def is_pod(request: Mapping[str, Any]) -> bool:
    resource = request.get("resource") or {}
    return resource.get("group", "") == "" and resource.get("resource") == "pods"


def is_managed(pod: Mapping[str, Any], namespace: str, settings: AdmissionSettings, namespace_managed: bool) -> bool:
    """A pod the bridge is responsible for: managed namespace, or the bridge's schedulerName (#13)."""
    if (pod.get("spec") or {}).get("schedulerName") == settings.scheduler_name:
        return True
    if namespace_managed:
        return True
    return settings.managed_namespace_selector is None and namespace in settings.managed_namespaces


def _namespace(request: Mapping[str, Any], pod: Mapping[str, Any]) -> str:
    return str(request.get("namespace") or (pod.get("metadata") or {}).get("namespace") or "")


def _allowed(warnings: Sequence[str] = ()) -> Obj:
    out: Obj = {"allowed": True}
    if warnings:
        out["warnings"] = list(warnings)
    return out


def _denied(messages: Sequence[str]) -> Obj:
    return {
        "allowed": False,
        "status": {"code": 403, "reason": "Forbidden", "message": "; ".join(messages)},
    }


def _mutate(request: Mapping[str, Any], settings: AdmissionSettings, namespace_managed: bool) -> Obj:
    operation = request.get("operation")
    pod = request.get("object")
    if not is_pod(request) or request.get("subResource") or operation not in ("CREATE", "UPDATE"):
        return _allowed()
    if not isinstance(pod, Mapping) or not is_managed(pod, _namespace(request, pod), settings, namespace_managed):
        return _allowed()
    patch = pod_patch(pod, settings, create=operation == "CREATE")
    if not patch:
        return _allowed()
    encoded = base64.b64encode(json.dumps(patch, separators=(",", ":")).encode()).decode()
    return {"allowed": True, "patchType": "JSONPatch", "patch": encoded}


def pod_patch(pod: Mapping[str, Any], settings: AdmissionSettings, *, create: bool) -> list[Obj]:
    """The JSONPatch operations that make a managed pod the bridge's; empty when nothing is missing.

    On CREATE: ``schedulerName`` when empty or ``default-scheduler``; clear ``nodeName``; the
    managed-node toleration. On UPDATE the spec is immutable except for added tolerations, so only
    the toleration is added, and only to a live pod that already names the bridge's scheduler.
    """
    spec = pod.get("spec") or {}
    ops: list[Obj] = []
    scheduler = spec.get("schedulerName") or ""
    if create:
        if scheduler in ("", DEFAULT_SCHEDULER):
            ops.append({"op": "add", "path": "/spec/schedulerName", "value": settings.scheduler_name})
            scheduler = settings.scheduler_name
        if spec.get("nodeName"):
            ops.append({"op": "remove", "path": "/spec/nodeName"})
    elif (pod.get("metadata") or {}).get("deletionTimestamp"):
        return []
    if scheduler != settings.scheduler_name:
        return ops
    return ops + toleration_ops(spec, settings.scheduler_name)


def toleration_ops(spec: Mapping[str, Any], scheduler_name: str) -> list[Obj]:
    """The JSONPatch operation that adds the managed-node toleration to a pod spec, or none when it tolerates the
    taint already: what the admission webhook adds at create, and the bridge before it binds a pod that came
    without it (upstream's scheduler plugin adds it in PreEnqueue), so a bridged node's NoExecute taint never
    evicts a pod the bridge placed there."""
    toleration = managed_node_toleration(scheduler_name)
    tolerations = spec.get("tolerations")
    if not tolerations:
        return [{"op": "add", "path": "/spec/tolerations", "value": [toleration]}]
    if not any(_tolerates(t, toleration) for t in tolerations):
        return [{"op": "add", "path": "/spec/tolerations/-", "value": toleration}]
    return []


def managed_node_toleration(scheduler_name: str) -> Obj:
    """``slinky.slurm.net/managed-node=<scheduler>:NoExecute``, the taint on every bridged node."""
    return {
        "key": wellknown.TAINT_MANAGED_NODE,
        "operator": "Equal",
        "value": scheduler_name,
        "effect": "NoExecute",
    }


def _tolerates(existing: Mapping[str, Any], wanted: Mapping[str, Any]) -> bool:
    """Whether ``existing`` already tolerates the taint ``wanted`` describes (forever)."""
    if existing.get("tolerationSeconds") is not None:
        return False
    if existing.get("effect") not in (None, "", wanted["effect"]):
        return False
    if existing.get("operator") == "Exists":
        return existing.get("key") in (None, "", wanted["key"])
    return bool(existing.get("key") == wanted["key"] and existing.get("value") == wanted["value"])


def _validate(request: Mapping[str, Any], settings: AdmissionSettings, namespace_managed: bool) -> Obj:
    operation = request.get("operation")
    pod = request.get("object")
    if not is_pod(request) or operation not in ("CREATE", "UPDATE") or not isinstance(pod, Mapping):
        return _allowed()
    if not is_managed(pod, _namespace(request, pod), settings, namespace_managed):
        return _allowed()
    if request.get("subResource") == RESIZE_SUBRESOURCE:
        return _denied([MSG_RESIZE])
    if request.get("subResource"):
        return _allowed()
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    if operation == "CREATE":
        denials = _create_denials(pod)
        check_annotations = True
    else:
        old = request.get("oldObject") or {}
        username = str((request.get("userInfo") or {}).get("username") or "")
        denials = [] if username in settings.bridge_usernames else _reserved_key_changes(old, pod)
        # Values accepted earlier stay accepted: only a change to the workload annotations is checked,
        # so the bridge can always update (finalizer, labels) a pod it already owns.
        old_annotations = (old.get("metadata") or {}).get("annotations") or {}
        check_annotations = _workload_annotations(annotations) != _workload_annotations(old_annotations)
    warnings: list[str] = []
    if check_annotations:
        try:
            parsed = parse_annotations(annotations)
        except TranslationError as err:
            denials.append(f"{_annotation(err.annotation)}: {err.reason}" if err.annotation else str(err))
        else:
            warnings.extend(w.message for w in parsed.warnings)
    return _denied(denials) if denials else _allowed(warnings)


def _create_denials(pod: Mapping[str, Any]) -> list[str]:
    metadata = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    denials: list[str] = []
    if wellknown.LABEL_SLURM_JOB_ID in (metadata.get("labels") or {}):
        denials.append(MSG_JOBID_LABEL_ON_CREATE)
    if wellknown.ANNOTATION_SLURM_NODE in (metadata.get("annotations") or {}):
        denials.append(MSG_NODE_ANNOTATION_ON_CREATE)
    if spec.get("resourceClaims"):
        denials.append(MSG_RESOURCE_CLAIMS)
    if spec.get("topologySpreadConstraints"):
        denials.append(MSG_TOPOLOGY_SPREAD)
    return denials


def _reserved_key_changes(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    """Changes (set, altered or removed) to the keys only the bridge writes."""
    old_meta, new_meta = old.get("metadata") or {}, new.get("metadata") or {}
    denials: list[str] = []
    key = wellknown.LABEL_SLURM_JOB_ID
    if (new_meta.get("labels") or {}).get(key) != (old_meta.get("labels") or {}).get(key):
        denials.append(MSG_JOBID_LABEL_CHANGED)
    key = wellknown.ANNOTATION_SLURM_NODE
    if (new_meta.get("annotations") or {}).get(key) != (old_meta.get("annotations") or {}).get(key):
        denials.append(MSG_NODE_ANNOTATION_CHANGED)
    key = wellknown.ANNOTATION_WORKFLOW_ID
    if (new_meta.get("annotations") or {}).get(key) != (old_meta.get("annotations") or {}).get(key):
        denials.append(MSG_WORKFLOW_ANNOTATION_CHANGED)
    return denials


def _workload_annotations(annotations: Mapping[str, str]) -> dict[str, str]:
    aliases = wellknown.DEPRECATED_ANNOTATION_ALIASES
    return {k: v for k, v in annotations.items() if k.startswith(wellknown.PREFIX_SLURMJOB) or k in aliases}


# ------------------------------------------------------------------------------------------ registration
CONFIGURATION_NAME: Final = "pods.slinky.slurm.net"
LABEL_WEBHOOK: Final = wellknown.LABEL_WEBHOOK
WEBHOOK_IGNORE: Final = wellknown.WEBHOOK_IGNORE
LABEL_NAMESPACE_NAME: Final = "kubernetes.io/metadata.name"
"""Set by the API server on every namespace since Kubernetes 1.21 (not on 1.20: see ``LABEL_WEBHOOK``)."""
EXCLUDED_NAMESPACES: Final = ("kube-system", "kube-public", "kube-node-lease", "slinky")
"""Never sent to the webhooks: the control plane's namespaces and the bridge's own (upstream operator #189)."""
TIMEOUT_SECONDS: Final = 5


def managed_requirements(settings: AdmissionSettings) -> tuple[Requirement, ...]:
    """The managed scope as namespace label requirements (by name through the 1.21+ name label)."""
    if settings.managed_namespace_selector:
        return parse_selector(settings.managed_namespace_selector)
    return (Requirement(LABEL_NAMESPACE_NAME, "In", tuple(settings.managed_namespaces)),)


def webhook_configurations(
    settings: AdmissionSettings,
    *,
    base_url: str,
    ca_bundle: bytes,
    only_namespaces_labelled: str | None = None,
) -> tuple[Obj, Obj]:
    """The MutatingWebhookConfiguration and ValidatingWebhookConfiguration, both ``pods.slinky.slurm.net``.

    Each holds two webhooks:

    * ``managed.pods.slinky.slurm.net``: managed namespaces (the API server evaluates the selector),
      URL ``/mutate/managed`` or ``/validate/managed``. The validating one fails closed (``Fail``):
      only managed namespaces can be blocked by a down webhook.
    * ``scheduler.pods.slinky.slurm.net``: every other namespace (the complement of the managed
      selector when it has one term), so that a pod naming the bridge's scheduler is still covered
      (upstream #13). It fails open (``Ignore``): a down webhook never blocks unmanaged namespaces.

    Both exclude namespaces and pods labelled ``slinky.slurm.net/webhook=ignore`` and, on 1.21+, the
    system namespaces and ``slinky`` by name. The mutating webhooks always fail open.

    Args:
        base_url: ``https://host:port`` of the webhook server.
        ca_bundle: PEM of the CA that signed the server's certificate.
        only_namespaces_labelled: Restrict every webhook to namespaces with this label key (tests on a
            shared cluster).
    """
    managed = managed_requirements(settings)
    excluded = [
        Requirement(LABEL_WEBHOOK, "NotIn", (WEBHOOK_IGNORE,)),
        Requirement(LABEL_NAMESPACE_NAME, "NotIn", EXCLUDED_NAMESPACES),
    ]
    if only_namespaces_labelled:
        excluded.append(Requirement(only_namespaces_labelled, "Exists"))
    others = [*excluded, managed[0].negated()] if len(managed) == 1 else excluded
    object_selector = {"matchExpressions": [Requirement(LABEL_WEBHOOK, "NotIn", (WEBHOOK_IGNORE,)).as_expression()]}
    bundle = base64.b64encode(ca_bundle).decode()

    def hook(name: str, path: str, requirements: Sequence[Requirement], policy: str, resources: list[str]) -> Obj:
        return {
            "name": f"{name}.{CONFIGURATION_NAME}",
            "clientConfig": {"url": f"{base_url.rstrip('/')}{path}", "caBundle": bundle},
            "rules": [
                {
                    "apiGroups": [""],
                    "apiVersions": ["v1"],
                    "operations": ["CREATE", "UPDATE"],
                    "resources": resources,
                    "scope": "Namespaced",
                }
            ],
            "namespaceSelector": {"matchExpressions": [r.as_expression() for r in requirements]},
            "objectSelector": object_selector,
            "failurePolicy": policy,
            "sideEffects": "None",
            "admissionReviewVersions": ["v1", "v1beta1"],
            "timeoutSeconds": TIMEOUT_SECONDS,
        }

    meta = {"name": CONFIGURATION_NAME, "labels": {"app.kubernetes.io/name": "slurm-bridge-webhook"}}
    mutating = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": meta,
        "webhooks": [
            {
                **hook("managed", "/mutate/managed", [*excluded, *managed], "Ignore", ["pods"]),
                "reinvocationPolicy": "Never",
            },
            {**hook("scheduler", "/mutate", others, "Ignore", ["pods"]), "reinvocationPolicy": "Never"},
        ],
    }
    validating = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": meta,
        "webhooks": [
            hook("managed", "/validate/managed", [*excluded, *managed], "Fail", ["pods", "pods/resize"]),
            hook("scheduler", "/validate", others, "Ignore", ["pods", "pods/resize"]),
        ],
    }
    return mutating, validating
