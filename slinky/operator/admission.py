"""The validating rules of the six ``slinky.slurm.net`` kinds, for an admission webhook (pure).

Kubernetes 1.20 has no CEL (``x-kubernetes-validations``), so upstream's rules that a CRD schema cannot say are
checked here, on the object as the API server would store it (``new``) and, on an update, the stored one
(``old``). Each denial names the field and says why, and that text is what ``kubectl apply`` prints. Only
``spec`` is judged: a write that leaves the spec as it was (the operator's finalizers, labels, status) is never
denied, so a webhook that disagrees with an object written before it existed cannot block its cleanup.

The same rules the operator applies at reconcile time (``slinky.operator.validation``) are denied here first.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any, Final

from pydantic import ValidationError

from slinky import admission_review as envelope
from slinky.operator.api.controller import Controller
from slinky.operator.api.nodeset import NodeSet
from slinky.operator.tokens import InvalidDuration, parse_duration
from slinky.operator.validation import controller_problems, nodeset_problems

Obj = Mapping[str, Any]

_CONTROL: Final = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
_CONF_WORD: Final = re.compile(r"^[A-Za-z][A-Za-z0-9_]*=")


def _spec(obj: Obj | None) -> Obj:
    return (obj or {}).get("spec") or {}


def _immutable(old: Obj | None, new: Obj, *fields: str) -> list[str]:
    if old is None:
        return []
    return [
        f"spec.{f} is immutable: it was {_spec(old).get(f)!r}; delete and create the object to change it"
        for f in fields
        if _spec(old).get(f) != _spec(new).get(f)
    ]


def slurm_conf_problems(text: str | None, field: str, *, one_line: bool = False) -> list[str]:
    """What keeps ``text`` from being Slurm configuration: a control character (``\\r`` included: the
    slurm.conf injection upstream fixed in 1.0.4), more than one line where one is required, or a line that is
    not ``Key=Value`` words (comments, blank lines and ``Include`` lines are fine)."""
    if not text:
        return []
    if "\r" in text or _CONTROL.search(text):
        return [f"{field} holds a control character (a carriage return or another): remove it"]
    lines = text.split("\n")
    if one_line and len([line for line in lines if line.strip()]) > 1:
        return [f"{field} must be a single line"]
    for number, line in enumerate(lines, start=1):
        words = line.split("#", 1)[0].split()
        if words[:1] in (["Include"], ["include"]):
            continue
        bad = [w for w in words if not _CONF_WORD.match(w)]
        if bad:
            where = f"line {number}" if len(lines) > 1 else "it"
            return [f"{field}: {where} is not Slurm configuration (Key=Value words): {bad[0]!r}"]
    return []


def _ref(spec: Obj, key: str) -> Obj:
    value = spec.get(key)
    return value if isinstance(value, Mapping) else {}


def _required_ref(spec: Obj, key: str, why: str) -> list[str]:
    ref = _ref(spec, key)
    if ref.get("name") and ref.get("key"):
        return []
    return [f"spec.{key} needs a name and a key: {why}"]


def nodeset(old: Obj | None, new: Obj) -> list[str]:
    out = _immutable(old, new, "controllerRef", "volumeClaimTemplates")
    try:
        model = NodeSet.model_validate(new)
    except ValidationError as err:
        first = err.errors()[0]
        return [*out, f"{'.'.join(map(str, first['loc']))}: {first['msg']}"]
    out += [p.message for p in nodeset_problems(model)]
    return out


def _external(spec: Obj) -> list[str]:
    """An external component needs only its address (everything else is ignored)."""
    if _ref(spec, "externalConfig").get("host"):
        return []
    return ["spec.externalConfig.host is required when spec.external is true"]


def _jwt_key(spec: Obj) -> str:
    """The JWT key field in use: ``jwtKeyRef``, or the deprecated ``jwtHs256KeyRef`` when only it is set."""
    return "jwtHs256KeyRef" if _ref(spec, "jwtHs256KeyRef") and not _ref(spec, "jwtKeyRef") else "jwtKeyRef"


def controller(old: Obj | None, new: Obj) -> list[str]:
    spec = _spec(new)
    try:
        out = [p.message for p in controller_problems(Controller.model_validate(new))]
    except ValidationError as err:
        first = err.errors()[0]
        out = [f"{'.'.join(map(str, first['loc']))}: {first['msg']}"]
    if spec.get("external"):
        return out + _external(spec)
    out += slurm_conf_problems(spec.get("extraConf"), "spec.extraConf")
    out += _required_ref(spec, "slurmKeyRef", "the cluster's slurm.key (auth/slurm)")
    return out + _required_ref(spec, _jwt_key(spec), "the cluster's JWT key (the operator signs with it)")


def accounting(old: Obj | None, new: Obj) -> list[str]:
    spec = _spec(new)
    if spec.get("external"):
        return _external(spec)
    out = slurm_conf_problems(spec.get("extraConf"), "spec.extraConf")
    storage = _ref(spec, "storageConfig")
    missing = [f for f in ("host", "username") if not storage.get(f)]
    password = _ref(storage, "passwordKeyRef")
    if not (password.get("name") and password.get("key")):
        missing.append("passwordKeyRef")
    if missing:
        fields = ", ".join(f"spec.storageConfig.{f}" for f in missing)
        out.append(f"{fields}: required, slurmdbd cannot reach its database without them")
    return out


def loginset(old: Obj | None, new: Obj) -> list[str]:
    out = _immutable(old, new, "controllerRef")
    return out + _required_ref(_spec(new), "sssdConfRef", "the sssd.conf the login pods run sssd with")


def restapi(old: Obj | None, new: Obj) -> list[str]:
    return _immutable(old, new, "controllerRef")


def token(old: Obj | None, new: Obj) -> list[str]:
    spec = _spec(new)
    field = _jwt_key(spec)
    out = _required_ref(spec, field, "the HS256 key the token is signed with")
    namespace = _ref(spec, field).get("namespace")
    own = (new.get("metadata") or {}).get("namespace")
    if namespace and own and namespace != own:
        out.append(f"spec.{field} must be in the Token's namespace {own!r}, not {namespace!r}")
    if spec.get("lifetime"):
        try:
            parse_duration(str(spec["lifetime"]))
        except InvalidDuration as err:
            out.append(str(err))
    return out


RULES: Final[dict[str, Callable[[Obj | None, Obj], list[str]]]] = {
    "Accounting": accounting,
    "Controller": controller,
    "LoginSet": loginset,
    "NodeSet": nodeset,
    "RestApi": restapi,
    "Token": token,
}


def review(kind: str, operation: str, old: Obj | None, new: Obj | None) -> list[str]:
    """The denials of one admission request (empty: allowed). ``DELETE`` and writes that keep the spec as it
    was are always allowed; a kind without rules too."""
    rules = RULES.get(kind)
    if rules is None or new is None or operation not in ("CREATE", "UPDATE"):
        return []
    if operation == "UPDATE" and old is not None and _spec(old) == _spec(new):
        return []
    return rules(old if operation == "UPDATE" else None, new)


def answer(admission_review: Mapping[str, Any]) -> dict[str, Any]:
    """Answer one AdmissionReview (the API server's body) with an AdmissionReview of the same apiVersion:
    allowed, or denied with HTTP 422 ``Invalid`` and every denial of the object, which kubectl prints as
    ``admission webhook "..." denied the request: NodeSet hpc/cpu: spec...``.

    Raises:
        ValueError: Not an AdmissionReview with a request (the server answers 400).
    """
    api_version, request = envelope.request_of(admission_review)
    kind = str((request.get("kind") or {}).get("kind") or "")
    new, old = request.get("object"), request.get("oldObject")
    denials = review(kind, str(request.get("operation") or ""), old, new)
    response: dict[str, Any] = {"allowed": not denials}
    if denials:
        where = (
            f"{request.get('namespace') or ''}/{request.get('name') or ((new or {}).get('metadata') or {}).get('name')}"
        )
        response["status"] = {"code": 422, "reason": "Invalid", "message": f"{kind} {where}: " + "; ".join(denials)}
    return envelope.wrap(api_version, request, response)


RESOURCES: Final = ("accountings", "controllers", "loginsets", "nodesets", "restapis", "tokens")
WEBHOOK_NAME: Final = "validate.slinky.slurm.net"


def webhook_configuration(
    name: str, client_config: dict[str, Any], *, namespace_selector: dict[str, Any] | None = None
) -> dict[str, Any]:
    """A ValidatingWebhookConfiguration for the six kinds (``admissionregistration.k8s.io/v1``): CREATE and
    UPDATE of the resources themselves only, so status writes and deletions (a namespace's too) never wait for
    the webhook; ``failurePolicy: Fail`` as upstream: nothing the rules would deny slips in while it is down."""
    webhook: dict[str, Any] = {
        "name": WEBHOOK_NAME,
        "clientConfig": client_config,
        "rules": [
            {
                "apiGroups": ["slinky.slurm.net"],
                "apiVersions": ["v1beta1"],
                "operations": ["CREATE", "UPDATE"],
                "resources": list(RESOURCES),
                "scope": "Namespaced",
            }
        ],
        "failurePolicy": "Fail",
        "sideEffects": "None",
        "admissionReviewVersions": ["v1", "v1beta1"],
        "timeoutSeconds": 10,
    }
    if namespace_selector is not None:
        webhook["namespaceSelector"] = namespace_selector
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": name},
        "webhooks": [webhook],
    }
