"""The CRDs come from the pydantic models: the files match, the schemas are structural, upstream's shape holds."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from slinky.operator.api import crds
from slinky.operator.api.controller import Controller
from slinky.operator.api.nodeset import NodeSet
from slinky.operator.api.schema import model_schema
from slinky.operator.api.token import Token


def test_files_match_the_models() -> None:
    assert crds.drift() == [], "run `python -m slinky.operator.api.crds --write`"


def test_drift_is_detected(tmp_path: Path) -> None:
    crds.write(tmp_path)
    assert crds.drift(tmp_path) == []
    path = tmp_path / crds.file_name(crds.KINDS[0])
    path.write_text(path.read_text().replace("slurmdbd", "slurmdbdx", 1))
    (tmp_path / "stale.yaml").write_text("{}")
    assert crds.drift(tmp_path) == [path.name, "stale.yaml"]
    assert crds.main(["--check"]) == 0


def walk(schema: dict[str, Any], path: str = "") -> list[tuple[str, dict[str, Any]]]:
    out = [(path, schema)]
    if schema.get("x-kubernetes-preserve-unknown-fields"):
        return out
    for name, sub in schema.get("properties", {}).items():
        out += walk(sub, f"{path}.{name}")
    if "items" in schema:
        out += walk(schema["items"], f"{path}[]")
    if isinstance(schema.get("additionalProperties"), dict):
        out += walk(schema["additionalProperties"], f"{path}{{}}")
    return out


@pytest.mark.parametrize("kind", crds.KINDS, ids=lambda k: k.kind)
def test_schema_is_structural(kind: crds.Kind) -> None:
    crd = yaml.safe_load(crds.render(kind))
    for path, node in walk(crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]):
        typed = (
            "type" in node or node.get("x-kubernetes-int-or-string") or node.get("x-kubernetes-preserve-unknown-fields")
        )
        assert typed, f"{kind.kind}{path} has no type"
        assert "$ref" not in node and "allOf" not in node and "oneOf" not in node, path
        if "default" in node:
            assert node.get("type", "int-or-string") in {"string", "integer", "boolean", "int-or-string"}, path
        for key in node.get("required", []):
            assert key in node["properties"], f"{kind.kind}{path} requires unknown {key}"


# Upstream's `default: ""` (slurm-operator f2ed3fc5, config/crd/bases): the name of every reference, no more.
UPSTREAM_EMPTY_DEFAULTS = {
    "Accounting": {
        ".spec.jwksKeyRef.name",
        ".spec.jwtHs256KeyRef.name",
        ".spec.jwtKeyRef.name",
        ".spec.slurmKeyRef.name",
        ".spec.storageConfig.passwordKeyRef.name",
    },
    "Controller": {
        ".spec.accountingRef.name",
        ".spec.configFileRefs[].name",
        ".spec.epilogScriptRefs[].name",
        ".spec.epilogSlurmctldScriptRefs[].name",
        ".spec.jwksKeyRef.name",
        ".spec.jwtHs256KeyRef.name",
        ".spec.jwtKeyRef.name",
        ".spec.prologScriptRefs[].name",
        ".spec.prologSlurmctldScriptRefs[].name",
        ".spec.slurmKeyRef.name",
    },
    "LoginSet": {".spec.controllerRef.name", ".spec.sssdConfRef.name"},
    "NodeSet": {".spec.controllerRef.name", ".spec.ssh.sssdConfRef.name"},
    "RestApi": {".spec.controllerRef.name"},
    "Token": {".spec.jwtHs256KeyRef.name", ".spec.jwtKeyRef.name", ".spec.secretRef.name"},
}


@pytest.mark.parametrize("kind", crds.KINDS, ids=lambda k: k.kind)
def test_empty_string_defaults_are_upstreams(kind: crds.Kind) -> None:
    crd = yaml.safe_load(crds.render(kind))
    root = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    empty = {path for path, node in walk(root) if node.get("default") == ""}
    assert empty == UPSTREAM_EMPTY_DEFAULTS[kind.kind]


def test_names_short_names_columns_and_scale_as_upstream() -> None:
    by_kind = {k.kind: yaml.safe_load(crds.render(k)) for k in crds.KINDS}
    assert set(by_kind) == {"Accounting", "Controller", "LoginSet", "NodeSet", "RestApi", "Token"}
    names = {k: c["spec"]["names"]["shortNames"] for k, c in by_kind.items()}
    assert names == {
        "Accounting": ["slurmdbd"],
        "Controller": ["slurmctld"],
        "LoginSet": ["loginsets", "lss", "sackd"],
        "NodeSet": ["nodesets", "nss", "slurmd"],
        "RestApi": ["slurmrestd"],
        "Token": ["tokens", "jwt"],
    }
    nodeset = by_kind["NodeSet"]["spec"]["versions"][0]
    assert nodeset["subresources"]["scale"] == {
        "specReplicasPath": ".spec.replicas",
        "statusReplicasPath": ".status.replicas",
        "labelSelectorPath": ".status.selector",
    }
    wide = [c["name"] for c in nodeset["additionalPrinterColumns"] if c.get("priority") == 1]
    assert wide == ["IDLE", "ALLOCATED", "DOWN", "DRAIN"]
    assert "scale" in by_kind["LoginSet"]["spec"]["versions"][0]["subresources"]
    assert "scale" not in by_kind["Controller"]["spec"]["versions"][0]["subresources"]


def test_nodeset_schema_defaults_and_checks() -> None:
    spec = model_schema(NodeSet.model_fields["spec"].annotation)  # type: ignore[arg-type]
    props = spec["properties"]
    assert spec["required"] == ["controllerRef"]
    assert props["replicas"]["default"] == 1 and props["replicas"]["minimum"] == 0
    assert props["scalingMode"] == {
        **props["scalingMode"],
        "default": "StatefulSet",
        "enum": ["DaemonSet", "StatefulSet"],
    }
    update = props["updateStrategy"]["properties"]
    assert update["type"]["default"] == "RollingUpdate"
    assert update["rollingUpdate"]["properties"]["maxUnavailable"]["default"] == "25%"
    assert update["rollingUpdate"]["properties"]["maxUnavailable"]["x-kubernetes-int-or-string"] is True
    assert props["partition"]["properties"]["config"]["pattern"] == "^[^\\n]+$"
    assert props["slurmd"]["x-kubernetes-preserve-unknown-fields"] is True
    assert props["controllerRef"]["x-kubernetes-map-type"] == "atomic"
    assert props["workloadDisruptionProtection"]["default"] is True


def test_status_has_no_defaults_and_conditions_are_a_list_map() -> None:
    status = yaml.safe_load(crds.render(crds.KINDS[3]))["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    status = status["properties"]["status"]
    assert all("default" not in node for _, node in walk(status))
    conditions = status["properties"]["conditions"]
    assert conditions["x-kubernetes-list-type"] == "map" and conditions["x-kubernetes-list-map-keys"] == ["type"]
    assert conditions["items"]["required"] == ["lastTransitionTime", "message", "reason", "status", "type"]


UPSTREAM_NODESET = """
apiVersion: slinky.slurm.net/v1beta1
kind: NodeSet
metadata: {name: slinky, namespace: slurm}
spec:
  controllerRef: {name: slurm}
  replicas: 2
  slurmd:
    image: ghcr.io/slinkyproject/slurmd:26.05-ubuntu26.04
    resources: {limits: {cpu: "2", memory: 4Gi}}
  logfile: {image: docker.io/library/alpine:latest}
  extraConf: Weight=10
  partition: {enabled: true, config: "State=UP MaxTime=UNLIMITED"}
  updateStrategy: {type: RollingUpdate, rollingUpdate: {maxUnavailable: 1}}
  template:
    metadata: {labels: {team: hpc}}
    spec: {nodeSelector: {kubernetes.io/os: linux}, hostname: slinky-}
"""


def test_an_upstream_nodeset_parses_with_upstream_defaults() -> None:
    ns = NodeSet.model_validate(yaml.safe_load(UPSTREAM_NODESET))
    assert ns.spec.controller_ref.name == "slurm"
    assert ns.spec.scaling_mode == "StatefulSet" and ns.spec.replicas == 2
    assert ns.spec.update_strategy.rolling_update.max_unavailable == 1
    assert ns.spec.slurmd["resources"]["limits"]["memory"] == "4Gi"
    assert ns.spec.template.spec["hostname"] == "slinky-"
    assert ns.spec.workload_disruption_protection is True and ns.spec.prune_slurm_node_records == "Never"
    bare = NodeSet.model_validate({"spec": {"controllerRef": {"name": "slurm"}}})
    assert bare.spec.replicas == 1 and bare.spec.update_strategy.rolling_update.max_unavailable == "25%"
    wire = ns.to_wire()
    assert wire["spec"]["controllerRef"] == {"name": "slurm"} and wire["spec"]["extraConf"] == "Weight=10"
    assert NodeSet.model_validate(wire) == ns


def test_controller_and_token_keys_fall_back_to_the_deprecated_field() -> None:
    external = Controller.model_validate(
        {
            "spec": {
                "external": True,
                "externalConfig": {"host": "slurmctld", "port": 6817},
                "jwtHs256KeyRef": {"name": "jwt", "key": "jwt.key"},
            }
        }
    )
    assert external.spec.jwt_key() is not None and external.spec.jwt_key().key == "jwt.key"  # type: ignore[union-attr]
    token = Token.model_validate({"spec": {"username": "slurm", "jwtKeyRef": {"name": "jwt", "key": "k"}}})
    assert token.spec.refresh is True and token.spec.lifetime is None and token.spec.jwt_key().name == "jwt"  # type: ignore[union-attr]
