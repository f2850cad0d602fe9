"""The six `slinky.slurm.net/v1beta1` CRDs, generated from the pydantic models (the one source of truth).

    python -m slinky.operator.api.crds --write   # regenerate deploy/crds/slinky/
    python -m slinky.operator.api.crds --check   # exit 1 when the files and the models differ

Names, shortNames, printer columns and the scale subresource are upstream's (`+kubebuilder` markers in
`api/v1beta1/*_types.go`). Upstream's CEL rules (`x-kubernetes-validations`) need Kubernetes 1.25; the
operator checks the same rules and reports them as a status condition and an Event (docs/operator.md).
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel

from slinky.operator.api import accounting, controller, loginset, nodeset, restapi, token
from slinky.operator.api.base import GROUP, VERSION
from slinky.operator.api.schema import Schema, model_schema

OUT_DIR = Path(__file__).resolve().parents[3] / "deploy" / "crds" / "slinky"


@dataclass(frozen=True)
class Column:
    """One `kubectl get` column; priority 1 shows only under `-o wide`."""

    name: str
    json_path: str
    type: str = "integer"
    description: str = ""
    priority: int = 0

    def to_wire(self) -> dict[str, Any]:
        out: dict[str, Any] = {"jsonPath": self.json_path, "name": self.name, "type": self.type}
        if self.description:
            out["description"] = self.description
        if self.priority:
            out["priority"] = self.priority
        return out


AGE = Column("AGE", ".metadata.creationTimestamp", "date")


@dataclass(frozen=True)
class Kind:
    """What a CRD needs beyond the schema."""

    kind: str
    plural: str
    short_names: tuple[str, ...]
    spec: type[BaseModel]
    status: type[BaseModel]
    columns: tuple[Column, ...] = (AGE,)
    scale: bool = False
    doc: str = ""
    spec_required: bool = field(default=False)

    @property
    def name(self) -> str:
        return f"{self.plural}.{GROUP}"


KINDS: tuple[Kind, ...] = (
    Kind(
        "Accounting",
        "accountings",
        ("slurmdbd",),
        accounting.AccountingSpec,
        accounting.AccountingStatus,
        doc="Accounting is the Schema for the accountings API (slurmdbd).",
    ),
    Kind(
        "Controller",
        "controllers",
        ("slurmctld",),
        controller.ControllerSpec,
        controller.ControllerStatus,
        doc="Controller is the Schema for the controllers API (slurmctld).",
    ),
    Kind(
        "LoginSet",
        "loginsets",
        ("loginsets", "lss", "sackd"),
        loginset.LoginSetSpec,
        loginset.LoginSetStatus,
        columns=(Column("REPLICAS", ".status.replicas", description="The current number of pods."), AGE),
        scale=True,
        doc="LoginSet is the Schema for the loginsets API (login pods).",
    ),
    Kind(
        "NodeSet",
        "nodesets",
        ("nodesets", "nss", "slurmd"),
        nodeset.NodeSetSpec,
        nodeset.NodeSetStatus,
        columns=(
            Column(
                "DESIRED",
                ".status.desired",
                description="The number of nodes match the node selector and tolerations (DaemonSet mode) "
                "or replicas (StatefulSet mode).",
            ),
            Column("REPLICAS", ".status.replicas", description="The current number of pods."),
            Column("UPDATED", ".status.updatedReplicas", description="The number of pods updated."),
            Column("READY", ".status.readyReplicas", description="The number of pods ready."),
            Column("IDLE", ".status.slurmIdle", description="The number of IDLE slurm nodes.", priority=1),
            Column(
                "ALLOCATED",
                ".status.slurmAllocated",
                description="The number of ALLOCATED/MIXED slurm nodes.",
                priority=1,
            ),
            Column("DOWN", ".status.slurmDown", description="The number of DOWN slurm nodes.", priority=1),
            Column("DRAIN", ".status.slurmDrain", description="The number of DRAIN slurm nodes.", priority=1),
            AGE,
        ),
        scale=True,
        doc="NodeSet is the Schema for the nodesets API (slurmd pods).",
    ),
    Kind(
        "RestApi",
        "restapis",
        ("slurmrestd",),
        restapi.RestApiSpec,
        restapi.RestApiStatus,
        doc="RestApi is the Schema for the restapis API (slurmrestd).",
    ),
    Kind(
        "Token",
        "tokens",
        ("tokens", "jwt"),
        token.TokenSpec,
        token.TokenStatus,
        columns=(
            Column("USER", ".spec.username", "string", "The username issued to the JWT."),
            Column("IAT", ".status.issuedAt", "date", "The JWT Issued At time."),
            AGE,
        ),
        doc="Token is the Schema for the tokens API (a JWT in a Secret).",
    ),
)


def object_schema(kind: Kind) -> Schema:
    """The openAPIV3Schema of one kind: apiVersion, kind, metadata, spec (with defaults) and status."""
    spec = model_schema(kind.spec)
    status = model_schema(kind.status, defaults=False)
    return {
        "description": kind.doc,
        "type": "object",
        "properties": {
            "apiVersion": {"description": "APIVersion of this object.", "type": "string"},
            "kind": {"description": "Kind of this object.", "type": "string"},
            "metadata": {"type": "object"},
            "spec": spec,
            "status": status,
        },
    }


def build_crd(kind: Kind) -> dict[str, Any]:
    """The CustomResourceDefinition (apiextensions.k8s.io/v1) of one kind."""
    subresources: dict[str, Any] = {"status": {}}
    if kind.scale:
        subresources["scale"] = {
            "specReplicasPath": ".spec.replicas",
            "statusReplicasPath": ".status.replicas",
            "labelSelectorPath": ".status.selector",
        }
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": kind.name},
        "spec": {
            "group": GROUP,
            "names": {
                "kind": kind.kind,
                "listKind": f"{kind.kind}List",
                "plural": kind.plural,
                "shortNames": list(kind.short_names),
                "singular": kind.kind.lower(),
            },
            "scope": "Namespaced",
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "additionalPrinterColumns": [c.to_wire() for c in kind.columns],
                    "schema": {"openAPIV3Schema": object_schema(kind)},
                    "subresources": subresources,
                }
            ],
        },
    }


HEADER = "# Generated by `python -m slinky.operator.api.crds --write` from slinky/operator/api/; do not edit.\n"


def render(kind: Kind) -> str:
    """The YAML file of one CRD."""
    return HEADER + yaml.safe_dump(build_crd(kind), sort_keys=False, width=120)


def file_name(kind: Kind) -> str:
    return f"{GROUP}_{kind.plural}.yaml"


def drift(out_dir: Path = OUT_DIR) -> list[str]:
    """Files that differ from what the models generate (missing, changed, or left over)."""
    wanted = {file_name(k): render(k) for k in KINDS}
    problems = [
        name for name, text in wanted.items() if not (out_dir / name).is_file() or (out_dir / name).read_text() != text
    ]
    if out_dir.is_dir():
        problems += sorted(p.name for p in out_dir.glob("*.yaml") if p.name not in wanted)
    return problems


def write(out_dir: Path = OUT_DIR) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for kind in KINDS:
        path = out_dir / file_name(kind)
        path.write_text(render(kind))
        paths.append(path)
    return paths


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--write", action="store_true", help="regenerate the CRD files")
    mode.add_argument("--check", action="store_true", help="exit 1 if the files differ from the models")
    args = parser.parse_args(argv)
    if args.write:
        for path in write():
            print(f"wrote {path.relative_to(OUT_DIR.parents[2])}")
        return 0
    stale = drift()
    if stale:
        print(f"CRDs out of date: {', '.join(stale)}; run `python -m slinky.operator.api.crds --write`")
        return 1
    print("CRDs match the models")
    return 0


if __name__ == "__main__":
    sys.exit(main())
