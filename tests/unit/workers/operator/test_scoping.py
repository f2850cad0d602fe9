"""Namespace scoping of the operator's watches."""

from __future__ import annotations

from workers.operator.scoping import in_scope, replace_synced, watch_paths


def test_paths_per_namespace_or_one_cluster_wide() -> None:
    assert watch_paths("/api/v1/pods", []) == [(None, "/api/v1/pods")]
    assert watch_paths("/apis/slinky.slurm.net/v1beta1/nodesets", ["slurm", "hpc", "slurm"]) == [
        ("slurm", "/apis/slinky.slurm.net/v1beta1/namespaces/slurm/nodesets"),
        ("hpc", "/apis/slinky.slurm.net/v1beta1/namespaces/hpc/nodesets"),
    ]
    assert in_scope("x", []) and in_scope("hpc", ["hpc"]) and not in_scope("x", ["hpc"])


def test_a_relist_of_one_namespace_keeps_the_others() -> None:
    def obj(ns: str, name: str) -> dict[str, object]:
        return {"metadata": {"namespace": ns, "name": name}}

    cache = {("a", "x"): obj("a", "x"), ("b", "y"): obj("b", "y")}
    replace_synced(cache, [obj("a", "z")], "a")
    assert sorted(cache) == [("a", "z"), ("b", "y")]
    replace_synced(cache, [obj("c", "w")], None)
    assert sorted(cache) == [("c", "w")]
