"""The names cluster DNS serves, from Services and Endpoints (Kubernetes' DNS specification, A records)."""

from __future__ import annotations

from typing import Any

from slinky.dev.cluster_dns import hosts_file, records


def service(ns: str, name: str, cluster_ip: str) -> dict[str, Any]:
    return {"metadata": {"namespace": ns, "name": name}, "spec": {"clusterIP": cluster_ip}}


def endpoints(ns: str, name: str, *addresses: dict[str, str]) -> dict[str, Any]:
    return {"metadata": {"namespace": ns, "name": name}, "subsets": [{"addresses": list(addresses)}]}


def test_a_cluster_ip_service_is_its_cluster_ip() -> None:
    got = records(
        [service("slinky", "slurm-restapi", "10.96.0.20")],
        [endpoints("slinky", "slurm-restapi", {"ip": "10.226.64.5"})],
    )
    assert got == [("10.96.0.20", "slurm-restapi.slinky.svc.cluster.local")]


def test_a_headless_service_is_every_ready_endpoint_and_each_named_pod() -> None:
    got = records(
        [service("slinky", "slurm-controller", "None")],
        [
            endpoints(
                "slinky",
                "slurm-controller",
                {"ip": "10.226.64.7", "hostname": "slurm-controller-0"},
                {"ip": "10.226.65.3"},
            )
        ],
    )
    assert got == [
        ("10.226.64.7", "slurm-controller-0.slurm-controller.slinky.svc.cluster.local"),
        ("10.226.64.7", "slurm-controller.slinky.svc.cluster.local"),
        ("10.226.65.3", "slurm-controller.slinky.svc.cluster.local"),
    ]
    assert hosts_file(got[:1]) == "10.226.64.7 slurm-controller-0.slurm-controller.slinky.svc.cluster.local\n"


def test_a_service_without_endpoints_or_address_gives_no_name_of_pods() -> None:
    assert records([service("a", "empty", "None"), service("a", "external", "")], []) == []
