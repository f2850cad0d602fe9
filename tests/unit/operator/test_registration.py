"""slinky.operator.registration: which running slurmd pods have not joined Slurm, and the condition that says so."""

from __future__ import annotations

from typing import Any

from slinky.operator import registration as reg


def pod(name: str, *, running: bool = True, deleted: bool = False) -> dict[str, Any]:
    state = {"running": {"startedAt": "2026-11-29T08:00:00Z"}} if running else {"waiting": {"reason": "X"}}
    meta: dict[str, Any] = {"name": name, "uid": f"uid-{name}"}
    if deleted:
        meta["deletionTimestamp"] = "2026-11-29T08:01:00Z"
    return {"metadata": meta, "status": {"containerStatuses": [{"name": "slurmd", "state": state}]}}


def test_a_pod_is_named_only_after_the_grace_period() -> None:
    since: dict[str, tuple[float, float, str]] = {}
    pods = [pod("cpu-0"), pod("cpu-1")]
    assert reg.track(pods, {}, ["cpu-1"], since, now=100.0) == []
    assert since == {"cpu-0": (100.0, 100.0, "cpu-0")}
    assert reg.track(pods, {}, ["cpu-1"], since, now=100.0 + reg.GRACE_SECONDS - 1) == []
    found = reg.track(pods, {}, ["cpu-1"], since, now=100.0 + reg.GRACE_SECONDS)
    assert found == [reg.Unregistered("cpu-0", "cpu-0", reg.GRACE_SECONDS)]


def test_the_slurm_node_is_the_pods_hostname() -> None:
    since: dict[str, tuple[float, float, str]] = {}
    reg.track([pod("slurm-worker-slinky-0")], {"slurm-worker-slinky-0": "slinky-0"}, [], since, now=0.0)
    assert since == {"slinky-0": (0.0, 0.0, "slurm-worker-slinky-0")}
    registered = reg.track(
        [pod("slurm-worker-slinky-0")], {"slurm-worker-slinky-0": "slinky-0"}, ["slinky-0"], since, 99.0
    )
    assert registered == [] and since == {}, "registering forgets the time"


def test_a_pod_made_again_keeps_its_nodes_time_and_a_node_gone_for_the_grace_is_forgotten() -> None:
    since: dict[str, tuple[float, float, str]] = {}
    reg.track([pod("cpu-0")], {}, [], since, now=0.0)
    reg.track([pod("cpu-0", deleted=True)], {}, [], since, now=10.0)  # the drift repair deleted it
    reg.track([], {}, [], since, now=15.0)  # gone, not made again yet
    reg.track([pod("cpu-0", running=False)], {}, [], since, now=20.0)
    found = reg.track([pod("cpu-0")], {}, [], since, now=40.0)
    assert [(f.pod, f.seconds) for f in found] == [("cpu-0", 40.0)], "the drift repair's delete loop still shows"
    still = reg.track([], {}, [], since, now=60.0)
    assert [(f.pod, f.seconds) for f in still] == [("cpu-0", 60.0)], "no flapping while the pod is made again"
    assert reg.track([], {}, [], since, now=40.0 + reg.FORGET_SECONDS + 1) == [] and since == {}, "scaled away"


def test_pods_not_running_slurmd_are_not_named() -> None:
    since: dict[str, tuple[float, float, str]] = {}
    pods = [pod("a", running=False), pod("b", deleted=True)]
    assert reg.track(pods, {}, [], since, now=0.0) == [] and since == {}
    assert reg.track(pods, {}, [], since, now=100.0) == [] and since == {}


def test_the_condition_quotes_slurmd_and_counts_the_rest() -> None:
    assert reg.condition([], {})[:3] == ("SlurmdRegistered", "True", "Registered")
    found = [reg.Unregistered(f"cpu-{i}", f"cpu-{i}", 45.0 - i) for i in range(5)]
    type_, status, reason, message = reg.condition(found, {"cpu-0": "error: fetch_config: DNS SRV lookup failed"})
    assert (type_, status, reason) == ("SlurmdRegistered", "False", "NotRegistered")
    assert message.startswith(
        "pod cpu-0: slurmd runs but Slurm node cpu-0 has not registered for more than 30s; "
        "slurmd says: error: fetch_config: DNS SRV lookup failed; pod cpu-1:"
    )
    assert message.endswith("(and 2 more)") and "cpu-3" not in message


def test_last_words_prefers_the_last_error() -> None:
    log = (
        "[2026-11-29T08:00:00.000] slurmd version 26.05.5 started\n"
        "[2026-11-29T08:00:01.000] error: fetch_config: DNS SRV lookup failed\n"
        "[2026-11-29T08:00:01.001] error: _establish_configuration: failed to load configs. Retrying in 10 seconds.\n"
        "[2026-11-29T08:00:11.000] debug: still waiting\n"
    )
    assert reg.last_words(log).endswith(
        "error: _establish_configuration: failed to load configs. Retrying in 10 seconds."
    )
    assert reg.last_words("one\ntwo\n") == "two"
    assert reg.last_words("") == ""
