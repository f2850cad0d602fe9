from __future__ import annotations

from typing import Any

import pytest

from slinky import wellknown
from slinky.bridge.translate.nodes import excluded_nodes, node_fits, placement_key, slurm_node_name
from tests.builders import make_node, make_pod, make_taint, make_toleration


def _expr(key: str, operator: str, *values: str) -> dict[str, Any]:
    expression: dict[str, Any] = {"key": key, "operator": operator}
    if values:
        expression["values"] = list(values)
    return expression


def _term(*expressions: dict[str, Any], fields: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    term: dict[str, Any] = {}
    if expressions:
        term["matchExpressions"] = list(expressions)
    if fields:
        term["matchFields"] = fields
    return term


ZONE_A = make_node("a", labels={"zone": "a", "gpus": "4"})
ZONE_B = make_node("b", labels={"zone": "b", "gpus": "0"})
NO_ZONE = make_node("c", labels={"gpus": "x"})

FIT: list[tuple[str, dict[str, Any], dict[str, Any], bool]] = [
    ("no constraints fit anywhere", make_pod(), ZONE_A, True),
    ("nodeSelector matches", make_pod(node_selector={"zone": "a"}), ZONE_A, True),
    ("nodeSelector other value", make_pod(node_selector={"zone": "a"}), ZONE_B, False),
    ("nodeSelector missing label", make_pod(node_selector={"zone": "a"}), NO_ZONE, False),
    ("In matches", make_pod(node_affinity_terms=[_term(_expr("zone", "In", "a", "b"))]), ZONE_B, True),
    ("In without label", make_pod(node_affinity_terms=[_term(_expr("zone", "In", "a"))]), NO_ZONE, False),
    (
        "NotIn excludes value",
        make_pod(node_affinity_terms=[_term(_expr("zone", "NotIn", "a"))]),
        ZONE_A,
        False,
    ),
    (
        "NotIn passes missing label",
        make_pod(node_affinity_terms=[_term(_expr("zone", "NotIn", "a"))]),
        NO_ZONE,
        True,
    ),
    ("Exists", make_pod(node_affinity_terms=[_term(_expr("zone", "Exists"))]), ZONE_B, True),
    ("Exists without label", make_pod(node_affinity_terms=[_term(_expr("zone", "Exists"))]), NO_ZONE, False),
    ("DoesNotExist", make_pod(node_affinity_terms=[_term(_expr("zone", "DoesNotExist"))]), ZONE_A, False),
    ("Gt passes", make_pod(node_affinity_terms=[_term(_expr("gpus", "Gt", "2"))]), ZONE_A, True),
    ("Gt fails", make_pod(node_affinity_terms=[_term(_expr("gpus", "Gt", "2"))]), ZONE_B, False),
    (
        "Gt on non-integer label",
        make_pod(node_affinity_terms=[_term(_expr("gpus", "Gt", "2"))]),
        NO_ZONE,
        False,
    ),
    ("Lt passes", make_pod(node_affinity_terms=[_term(_expr("gpus", "Lt", "1"))]), ZONE_B, True),
    (
        "expressions in a term are ANDed",
        make_pod(node_affinity_terms=[_term(_expr("zone", "In", "a"), _expr("gpus", "Lt", "1"))]),
        ZONE_A,
        False,
    ),
    (
        "terms are ORed",
        make_pod(node_affinity_terms=[_term(_expr("zone", "In", "z")), _term(_expr("zone", "In", "a"))]),
        ZONE_A,
        True,
    ),
    ("an empty term matches nothing", make_pod(node_affinity_terms=[{}]), ZONE_A, False),
    ("no terms match nothing", make_pod(node_affinity_terms=[]), ZONE_A, False),
    (
        "matchFields on the node name",
        make_pod(node_affinity_terms=[_term(fields=[_expr("metadata.name", "In", "a")])]),
        ZONE_A,
        True,
    ),
    (
        "matchFields excludes other names",
        make_pod(node_affinity_terms=[_term(fields=[_expr("metadata.name", "In", "a")])]),
        ZONE_B,
        False,
    ),
    ("untolerated NoSchedule taint", make_pod(), make_node(taints=[make_taint("gpu", "yes")]), False),
    (
        "untolerated NoExecute taint",
        make_pod(),
        make_node(taints=[make_taint("x", effect="NoExecute")]),
        False,
    ),
    (
        "PreferNoSchedule is soft",
        make_pod(),
        make_node(taints=[make_taint("x", effect="PreferNoSchedule")]),
        True,
    ),
    (
        "Equal toleration",
        make_pod(tolerations=[make_toleration("gpu", "yes", effect="NoSchedule")]),
        make_node(taints=[make_taint("gpu", "yes")]),
        True,
    ),
    (
        "Equal toleration with another value",
        make_pod(tolerations=[make_toleration("gpu", "no")]),
        make_node(taints=[make_taint("gpu", "yes")]),
        False,
    ),
    (
        "toleration for another effect",
        make_pod(tolerations=[make_toleration("gpu", "yes", effect="NoExecute")]),
        make_node(taints=[make_taint("gpu", "yes")]),
        False,
    ),
    (
        "Exists toleration ignores the value",
        make_pod(tolerations=[make_toleration("gpu", operator="Exists")]),
        make_node(taints=[make_taint("gpu", "anything")]),
        True,
    ),
    (
        "empty key with Exists tolerates everything",
        make_pod(tolerations=[make_toleration(operator="Exists")]),
        make_node(taints=[make_taint("a"), make_taint("b", effect="NoExecute")]),
        True,
    ),
    (
        "every taint must be tolerated",
        make_pod(tolerations=[make_toleration("a", operator="Exists")]),
        make_node(taints=[make_taint("a"), make_taint("b")]),
        False,
    ),
    ("the bridge's own taint is ignored", make_pod(), make_node(managed_by=wellknown.SCHEDULER_NAME), True),
    ("a cordoned node", make_pod(), make_node(unschedulable=True), False),
    (
        "a cordoned node with the unschedulable toleration",
        make_pod(tolerations=[make_toleration("node.kubernetes.io/unschedulable", operator="Exists")]),
        make_node(unschedulable=True),
        True,
    ),
]


@pytest.mark.parametrize(("pod", "node", "want"), [c[1:] for c in FIT], ids=[c[0] for c in FIT])
def test_node_fits(pod: dict[str, Any], node: dict[str, Any], want: bool) -> None:
    assert node_fits(pod, node) is want


def test_slurm_node_name_prefers_the_label() -> None:
    assert slurm_node_name(make_node("k8s-1")) == "k8s-1"
    assert slurm_node_name(make_node("k8s-1", slurm_name="slurm-1")) == "slurm-1"


def test_excluded_nodes_are_sorted_slurm_names_of_nodes_that_do_not_fit() -> None:
    pod = make_pod(node_selector={"zone": "a"})
    nodes = [
        make_node("k-3", labels={"zone": "b"}, slurm_name="s-3"),
        make_node("k-1", labels={"zone": "a"}),
        make_node("k-2"),
    ]

    assert excluded_nodes(pod, nodes) == ("k-2", "s-3")


def test_excluded_nodes_keeps_only_nodes_slurm_knows() -> None:
    pod = make_pod(node_selector={"zone": "a"})
    nodes = [make_node("k-1"), make_node("k-2"), make_node("k-3", labels={"zone": "a"})]

    assert excluded_nodes(pod, nodes, slurm_nodes={"k-2", "k-3"}) == ("k-2",)


def test_no_nodes_no_exclusions() -> None:
    assert excluded_nodes(make_pod(node_selector={"zone": "a"}), []) == ()


def test_the_placement_key_holds_what_node_fits_reads_and_nothing_else() -> None:
    a = make_pod("a", node_selector={"zone": "a"}, tolerations=[make_toleration("gpu")], cpu="1")
    b = make_pod("b", node_selector={"zone": "a"}, tolerations=[make_toleration("gpu")], cpu="2")
    assert placement_key(a) == placement_key(b)  # name and resources do not decide the nodes
    assert placement_key(a) != placement_key(make_pod("c", node_selector={"zone": "b"}))
    assert placement_key(a) != placement_key(make_pod("d", node_selector={"zone": "a"}))  # no toleration
    term = {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}
    assert placement_key(make_pod("e", node_affinity_terms=[term])) != placement_key(make_pod("f"))
