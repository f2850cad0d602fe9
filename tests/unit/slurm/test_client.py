"""SlurmClient against httpx.MockTransport with recorded slurmrestd 26.05 answers."""

from __future__ import annotations

import json
import time

import httpx
import pytest

from slinky.clients.errors import (
    ConfigError,
    SlurmConflict,
    SlurmError,
    SlurmInvalidRequest,
    SlurmNotFound,
    SlurmRejected,
    SlurmUnavailable,
    SlurmUnsupported,
)
from slinky.clients.slurm.client import ALLOCATE_NOT_NOW_NUMBERS, SlurmClient
from slinky.clients.slurm.models import JobDescMsg, ReservationDesc
from slinky.config import SlurmSettings
from tests.unit.slurm.helpers import TOKEN, Router, fake_cluster, make_client, sample

V = "/slurm/v0.0.44"
EXTERNAL = JobDescMsg(name="ext-a", partition="k8s", flags=["EXTERNAL_JOB"], cpus_per_task=4)


def _entry_body(case: dict[str, object]) -> dict[str, object]:
    return {"errors": case["errors"], "warnings": []}


# --- error mapping: every error of slurm.md's tables, with its recorded status and body ----------------

ERRORS = sample("errors.json")
ACCOUNTING = sample("errors_accounting.json")
OUTAGE = sample("rest_during_ctld_outage.json")


@pytest.mark.parametrize(
    ("status", "body", "error_type", "number"),
    [
        (422, _entry_body(ERRORS["too_many_cpus"]), SlurmRejected, 2014),
        (422, _entry_body(ERRORS["too_much_mem"]), SlurmRejected, 2014),
        (422, _entry_body(ERRORS["bad_partition"]), SlurmRejected, 2000),
        (422, _entry_body(ACCOUNTING["bad_account"]), SlurmRejected, 2045),
        (422, _entry_body(ACCOUNTING["bad_qos"]), SlurmRejected, 2066),
        (422, _entry_body(ERRORS["no_script_no_external_flag"]), SlurmInvalidRequest, 9000),
        (502, _entry_body(OUTAGE["POST job/submit"]), SlurmUnavailable, 1800),
    ],
    ids=["cpus-2014", "memory-2014", "partition-2000", "account-2045", "qos-2066", "no-script-9000",
         "ctld-down-502-1800"],
)  # fmt: skip
async def test_submit_errors_map_to_types(
    status: int, body: dict[str, object], error_type: type[SlurmError], number: int
) -> None:
    router = Router().add("POST", f"{V}/job/submit", (status, body))
    async with make_client(router) as client:
        with pytest.raises(error_type) as caught:
            await client.submit_job(EXTERNAL)
    assert type(caught.value) is error_type
    assert caught.value.error_number == number
    assert caught.value.status_code == status
    assert caught.value.source
    assert len(router.calls("POST", f"{V}/job/submit")) == 1  # a POST is never retried


@pytest.mark.parametrize(
    ("method", "path", "status", "sample_name", "error_type", "number"),
    [
        ("DELETE", "node/k8s-node-10", 422, "node_delete_busy_response.json", SlurmConflict, 2016),
        ("DELETE", "node/k8s-node-10", 422, "node_delete_missing_response.json", SlurmNotFound, 2018),
        ("POST", "new/node", 422, "new_node_duplicate_response.json", SlurmConflict, 2168),
        ("POST", "new/node", 422, "new_node_bad_state_response.json", SlurmRejected, 2028),
    ],
    ids=["delete-busy-2016", "delete-missing-2018", "create-duplicate-2168", "create-bad-state-2028"],
)
async def test_node_errors_map_to_types(
    method: str, path: str, status: int, sample_name: str, error_type: type[SlurmError], number: int
) -> None:
    router = Router().add(method, f"{V}/{path}", (status, sample(sample_name)))
    async with make_client(router) as client:
        with pytest.raises(error_type) as caught:
            if method == "DELETE":
                await client.delete_node("k8s-node-10")
            else:
                await client.create_node("NodeName=k8s-node-10 CPUs=8 State=External")
    assert type(caught.value) is error_type and caught.value.error_number == number


async def test_conflict_and_invalid_request_are_rejections() -> None:
    assert issubclass(SlurmConflict, SlurmRejected) and issubclass(SlurmInvalidRequest, SlurmRejected)
    assert not issubclass(SlurmNotFound, SlurmRejected) and not issubclass(SlurmUnavailable, SlurmRejected)


async def test_invalid_node_state_transition_is_rejected() -> None:
    body = {"errors": [{"description": "Failure to update node k8s-node-10", "error_number": 2180,
                        "error": "Invalid node state transition", "source": "_update_node"}]}  # fmt: skip
    router = Router().add("POST", f"{V}/node/k8s-node-10", (422, body))
    async with make_client(router) as client:
        with pytest.raises(SlurmRejected) as caught:
            await client.drain_node("k8s-node-10", "x")
    assert caught.value.error_number == 2180


async def test_get_unknown_job_is_not_found_404_2017() -> None:
    router = Router().add("GET", f"{V}/job/999999", (404, _entry_body(ERRORS["get_unknown_job"])))
    async with make_client(router, read_retries=3) as client:
        with pytest.raises(SlurmNotFound) as caught:
            await client.get_job(999999)
    assert caught.value.error_number == 2017
    assert len(router.requests) == 1  # not found is final, not retried


async def test_get_unknown_node_is_200_with_error_entry_and_means_not_found() -> None:
    body = {"errors": [{"description": "Failure to query node nope", "error_number": 0, "error": "No error",
                        "source": "_dump_nodes"}], "warnings": []}  # fmt: skip
    router = Router().add("GET", f"{V}/node/nope", (200, body))
    async with make_client(router) as client:
        with pytest.raises(SlurmNotFound) as caught:
            await client.get_node("nope")
    assert caught.value.status_code == 200 and caught.value.error_number == 0


async def test_cancel_of_unknown_job_answers_200_and_succeeds() -> None:
    router = Router().add("DELETE", f"{V}/job/999999", (200, sample("cancel_response.json")))
    async with make_client(router) as client:
        assert await client.cancel_job(999999) is None
    assert len(router.requests) == 1


async def test_ctld_outage_get_500_is_unavailable_and_retried_then_succeeds() -> None:
    outage = (500, _entry_body(OUTAGE["GET job/{id}"]))
    router = Router().add("GET", f"{V}/job/1", outage, (200, sample("get_job_running.json")))
    async with make_client(router, read_retries=2) as client:
        job = await client.get_job(1)
    assert job.is_running
    assert len(router.calls("GET", f"{V}/job/1")) == 2


async def test_reads_give_up_after_the_retry_budget() -> None:
    outage = (500, _entry_body(OUTAGE["GET job/{id}"]))
    router = Router().add("GET", f"{V}/job/1", outage)
    async with make_client(router, read_retries=2) as client:
        with pytest.raises(SlurmUnavailable) as caught:
            await client.get_job(1)
    assert caught.value.error_number == -1 and not caught.value.outcome_unknown
    assert len(router.requests) == 3


async def test_retry_after_header_is_carried() -> None:
    router = Router().add("GET", f"{V}/diag", lambda r: httpx.Response(503, headers={"Retry-After": "0"}))
    async with make_client(router, read_retries=0) as client:
        with pytest.raises(SlurmUnavailable) as caught:
            await client.diag()
    assert caught.value.retry_after == 0.0 and caught.value.status_code == 503


async def test_a_429_under_load_is_waited_out_as_the_server_asks_not_hammered() -> None:
    busy = lambda r: httpx.Response(429, headers={"Retry-After": "0.3"})  # noqa: E731
    router = Router().add("GET", f"{V}/job/1", busy, (200, sample("get_job_running.json")))
    async with make_client(router, read_retries=2) as client:
        started = time.monotonic()
        job = await client.get_job(1)
    assert job.is_running
    assert len(router.calls("GET", f"{V}/job/1")) == 2, "one retry, not a burst"
    assert time.monotonic() - started >= 0.3, "the retry came after the server's Retry-After"


async def test_a_503_on_a_write_is_not_resent_and_says_when_to_try_again() -> None:
    router = Router().add("POST", f"{V}/job/submit", lambda r: httpx.Response(503, headers={"Retry-After": "2"}))
    async with make_client(router, read_retries=3) as client:
        with pytest.raises(SlurmUnavailable) as caught:
            await client.submit_job(JobDescMsg(name="x", partition="p"))
    assert len(router.requests) == 1, "a write is never resent by the client (the activity's retry policy decides)"
    assert caught.value.retry_after == 2.0 and caught.value.outcome_unknown


async def test_connect_failure_is_unavailable_and_post_is_not_retried() -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    router = Router().add("POST", f"{V}/job/submit", refuse)
    async with make_client(router) as client:
        with pytest.raises(SlurmUnavailable) as caught:
            await client.submit_job(EXTERNAL)
    assert not caught.value.outcome_unknown  # nothing reached the server
    assert len(router.requests) == 1


async def test_read_timeout_on_submit_means_outcome_unknown() -> None:
    def slow(request: httpx.Request) -> httpx.Response:
        raise httpx.ReadTimeout("timed out", request=request)

    router = Router().add("POST", f"{V}/job/submit", slow)
    async with make_client(router) as client:
        with pytest.raises(SlurmUnavailable) as caught:
            await client.submit_job(EXTERNAL)
    assert caught.value.outcome_unknown
    assert len(router.requests) == 1


# --- requests and answers ------------------------------------------------------------------------------


async def test_submit_wraps_job_sends_headers_and_returns_id() -> None:
    router = Router().add("POST", f"{V}/job/submit", (200, sample("submit_ext_response.json")))
    async with make_client(router, user_name="slurm") as client:
        job_id = await client.submit_job(EXTERNAL)
    assert job_id == 1
    request = router.requests[0]
    assert json.loads(request.content) == {"job": EXTERNAL.to_request()}
    assert request.headers["X-SLURM-USER-NAME"] == "slurm"
    assert request.headers["X-SLURM-USER-TOKEN"] == TOKEN


async def test_update_job_sends_bare_job_desc() -> None:
    router = Router().add("POST", f"{V}/job/5", (200, sample("update_pending_response.json")))
    update = JobDescMsg.model_validate(sample("update_pending_request.json"))
    async with make_client(router) as client:
        await client.update_job(5, update)
    assert json.loads(router.requests[0].content) == sample("update_pending_request.json")


async def test_list_jobs_keeps_update_time_when_server_answers_zero() -> None:
    warnings = sample("jobs_update_time.json")["no_change"]["warnings"]
    no_change = {"jobs": [], "last_update": {"number": 0}, "errors": [], "warnings": warnings}
    router = Router().add("GET", f"{V}/jobs", (200, sample("get_job_running.json")), (200, no_change))
    async with make_client(router) as client:
        first = await client.list_jobs()
        second = await client.list_jobs(first.last_update)
    assert first.changed and first.last_update == 1795320019 and [j.job_id for j in first.jobs] == [1]
    assert not second.changed and second.jobs == [] and second.last_update == 1795320019
    assert "update_time" not in router.requests[0].url.params
    assert router.requests[1].url.params["update_time"] == "1795320019"


async def test_resources_and_node_calls_use_v0044_paths() -> None:
    router = (
        Router()
        .add("GET", f"{V}/resources/1", (200, sample("get_job_resources.json")))
        .add("POST", f"{V}/new/node", (200, sample("new_node_response.json")))
        .add("POST", f"{V}/node/k8s-node-10", (200, sample("node_drain_response.json")))
        .add("DELETE", f"{V}/node/k8s-node-10", (200, sample("node_delete_response.json")))
    )
    async with make_client(router) as client:
        layout = await client.get_job_resources(1)
        await client.create_node(sample("new_node_request.json")["node_conf"])
        await client.drain_node("k8s-node-10", "slurm-bridge: cordoned")
        await client.resume_node("k8s-node-10")
        await client.delete_node("k8s-node-10")
    assert layout[0].node == "k8s-node-1" and layout[0].mem_alloc == 1000
    posts = router.calls("POST", f"{V}/node/k8s-node-10")
    assert json.loads(posts[0].content) == sample("node_drain_request.json")
    assert json.loads(posts[1].content) == {"state": ["RESUME"]}
    assert json.loads(router.calls("POST", f"{V}/new/node")[0].content) == sample("new_node_request.json")


async def test_ping_reports_controller_down_with_200() -> None:
    body = {"pings": OUTAGE["GET ping"]["pings"], "errors": [], "warnings": []}
    router = Router().add("GET", f"{V}/ping", (200, body))
    async with make_client(router) as client:
        pings = await client.ping()
    assert pings[0].pinged == "DOWN" and not pings[0].responding


# --- versions ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("version", "call"),
    [
        ("v0.0.42", "submit_external"),
        ("v0.0.43", "create_node"),
        ("v0.0.43", "resources"),
    ],
    ids=["external-job-on-42", "new-node-on-43", "resources-on-43"],
)
async def test_features_missing_in_the_version_are_refused_before_sending(version: str, call: str) -> None:
    router = Router()
    async with make_client(router, api_version=version) as client:
        with pytest.raises(SlurmUnsupported) as caught:
            if call == "submit_external":
                await client.submit_job(EXTERNAL)
            elif call == "create_node":
                await client.create_node("NodeName=n1 State=EXTERNAL")
            else:
                await client.get_job_resources(1)
    assert caught.value.api_version == version
    assert router.requests == []


async def test_external_job_on_v0043_is_sent_to_the_v0043_path() -> None:
    router = Router().add("POST", "/slurm/v0.0.43/job/submit", (200, sample("submit_ext_response.json")))
    async with make_client(router, api_version="v0.0.43") as client:
        assert await client.submit_job(EXTERNAL) == 1


async def test_served_versions_probe_and_check() -> None:
    ping = (200, {"pings": [], "errors": [], "warnings": []})
    router = Router()
    for version in ("v0.0.43", "v0.0.44"):
        router.add("GET", f"/slurm/{version}/ping", ping)
    async with make_client(router, api_version="v0.0.45") as client:
        assert await client.served_versions() == ("v0.0.43", "v0.0.44")
        with pytest.raises(SlurmUnsupported):
            await client.check_version()


@pytest.mark.parametrize("bad", ["v0.0.41", "v0.0.46", "0.0.44"])
def test_unsupported_version_is_a_config_error(bad: str) -> None:
    with pytest.raises(ConfigError):
        SlurmClient("http://x", api_version=bad)


@pytest.mark.parametrize("cap", [0, 124, 500])
def test_connection_cap_must_stay_below_124(cap: int) -> None:
    with pytest.raises(ConfigError):
        SlurmClient("http://x", max_connections=cap)


async def test_from_settings_uses_token_file_and_limits(tmp_path: object) -> None:
    from pathlib import Path

    token_file = Path(str(tmp_path)) / "jwt"
    token_file.write_text("SLURM_JWT=abc.def.ghi\n")
    settings = SlurmSettings(rest_url="http://slurm.test:6820/", jwt_file=str(token_file), max_connections=16)
    router = Router().add("GET", f"{V}/ping", (200, {"pings": []}))
    client = SlurmClient.from_settings(settings, transport=httpx.MockTransport(router))
    async with client:
        await client.ping()
    assert router.requests[0].headers["X-SLURM-USER-TOKEN"] == "abc.def.ghi"
    assert str(router.requests[0].url).startswith("http://slurm.test:6820/slurm/v0.0.44/ping")


async def test_bad_token_511_1007_is_a_rejection_not_an_outage() -> None:
    # Recorded live from slurmrestd 26.05 with an invalid token.
    body = {"errors": [{"description": "slurm_get_statistics() failed to get slurmctld statistics",
                        "error_number": 1007, "error": "Protocol authentication error",
                        "source": "_op_handler_diag"}]}  # fmt: skip
    router = Router().add("GET", f"{V}/diag", (511, body))
    async with make_client(router, read_retries=3) as client:
        with pytest.raises(SlurmRejected) as caught:
            await client.diag()
    assert type(caught.value) is SlurmRejected and caught.value.error_number == 1007
    assert len(router.requests) == 1  # not retried


# --- job/allocate (immediate): answers recorded from Slurm 26.05 -------------------------------------------
ALLOCATE = sample("allocate_immediate.json")


async def test_allocate_sends_immediate_to_job_allocate_and_returns_the_id() -> None:
    recorded = ALLOCATE["allocated"]
    router = Router().add("POST", f"{V}/job/allocate", (recorded["status"], recorded["body"]))
    async with make_client(router) as client:
        job_id = await client.allocate_job(EXTERNAL)
    assert job_id == recorded["body"]["job_id"]
    assert json.loads(router.requests[0].content) == {"job": {**EXTERNAL.to_request(), "immediate": True}}


@pytest.mark.parametrize(
    ("case", "error_type", "number"),
    [("insufficient_priority", SlurmRejected, 2013), ("nodes_busy", SlurmConflict, 2016)],
)
async def test_allocate_refusals_are_rejections_that_mean_not_now(
    case: str, error_type: type[SlurmError], number: int
) -> None:
    recorded = ALLOCATE[case]
    router = Router().add("POST", f"{V}/job/allocate", (recorded["status"], recorded["body"]))
    async with make_client(router) as client:
        with pytest.raises(error_type) as caught:
            await client.allocate_job(EXTERNAL)
    assert caught.value.error_number == number
    assert number in ALLOCATE_NOT_NOW_NUMBERS
    assert len(router.requests) == 1, "never retried"


async def test_allocate_of_an_external_job_is_refused_on_v0042_before_sending() -> None:
    router = Router()
    async with make_client(router, api_version="v0.0.42") as client:
        with pytest.raises(SlurmUnsupported):
            await client.allocate_job(EXTERNAL)
    assert router.requests == []


async def test_nodes_since_reads_slurms_304_as_unchanged_and_keeps_the_time() -> None:
    listed = {
        "nodes": [{"name": "n1", "state": ["IDLE"]}],
        "last_update": {"set": True, "infinite": False, "number": 7},
    }
    router = Router().add("GET", f"{V}/nodes", (200, listed), lambda r: httpx.Response(304))
    async with make_client(router) as client:
        first = await client.list_nodes_since(None)
        second = await client.list_nodes_since(first.last_update)
    assert (first.changed, [n.name for n in first.nodes], first.last_update) == (True, ["n1"], 7)
    assert (second.changed, second.nodes, second.last_update) == (False, [], 7)
    assert [r.url.params.get("update_time") for r in router.calls("GET", f"{V}/nodes")] == [None, "7"]


# --- reservations (a ScheduledUpdate's MAINT window), on answers recorded from slurmrestd 26.05 -------------------


async def test_reservation_create_sends_the_window_and_read_finds_it_in_the_list() -> None:
    listed = sample("reservation_get.json")
    router = Router().add("POST", f"{V}/reservation", (200, sample("reservation_post.json")))
    router.add("GET", f"{V}/reservations", (200, listed))
    desc = ReservationDesc(
        name="SlurmOperatorMaint-gpu",
        start_time=1795955734,
        duration=30,
        flags=["MAINT", "IGNORE_JOBS"],
        users=["slurm"],
        node_list=["slinky-0", "slinky-1"],
    )
    async with make_client(router) as client:
        await client.upsert_reservation(desc)
        found = await client.get_reservation("SlurmOperatorMaint-gpu")
        with pytest.raises(SlurmNotFound):
            await client.get_reservation("SlurmOperatorMaint-other")
    body = json.loads(router.calls("POST", f"{V}/reservation")[0].content)
    assert body == {
        "name": "SlurmOperatorMaint-gpu",
        "start_time": {"set": True, "infinite": False, "number": 1795955734},
        "duration": {"set": True, "infinite": False, "number": 30},
        "flags": ["MAINT", "IGNORE_JOBS"],
        "users": ["slurm"],
        "node_list": ["slinky-0", "slinky-1"],
    }
    assert found.node_list == "slinky-[0-1]" and found.flags == ["MAINT", "IGNORE_JOBS", "SPEC_NODES"]
    assert (found.start_time, found.end_time) == (1795955734, 1795957534) and found.users == "slurm"


async def test_deleting_a_missing_reservation_is_not_found() -> None:
    router = Router().add(
        "DELETE",
        f"{V}/reservation/SlurmOperatorMaint-gpu",
        (200, sample("reservation_delete.json")),
        (422, sample("reservation_delete_missing.json")),
    )
    async with make_client(router) as client:
        await client.delete_reservation("SlurmOperatorMaint-gpu")
        with pytest.raises(SlurmNotFound) as caught:
            await client.delete_reservation("SlurmOperatorMaint-gpu")
    assert caught.value.error_number == 2053


async def test_the_fake_keeps_reservations_as_slurm_does() -> None:
    fake = fake_cluster(2)
    start = int(time.time()) - 5
    await fake.upsert_reservation(
        ReservationDesc(
            name="m", start_time=start, duration=10, flags=["MAINT", "IGNORE_JOBS"], users=["slurm"], node_list=["n-1"]
        )
    )
    res = await fake.get_reservation("m")
    assert res.flags == ["MAINT", "IGNORE_JOBS", "SPEC_NODES"] and res.end_time == start + 600
    node = await fake.get_node("n-1")
    assert {"RESERVED", "MAINTENANCE"} <= set(node.state) and node.reservation == "m"
    assert (await fake.get_node("n-2")).reservation == ""
    await fake.upsert_reservation(ReservationDesc(name="m", node_list=["n-1", "n-2"]))
    moved = await fake.get_reservation("m")
    assert moved.node_list == "n-[1-2]" and moved.start_time == start, "an update keeps what it does not name"
    with pytest.raises(SlurmNotFound):
        await fake.upsert_reservation(ReservationDesc(name="m", node_list=["n-9"]))
    await fake.delete_reservation("m")
    with pytest.raises(SlurmNotFound):
        await fake.delete_reservation("m")
