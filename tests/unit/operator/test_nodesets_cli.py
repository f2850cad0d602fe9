"""`slinky nodesets`: rows and tables from objects shaped as the dev stack returned them, argument parsing, and
the errors a user sees (one line on stderr, exit code 1), with the API server on a mock transport."""

from __future__ import annotations

import argparse
import copy
import json
import os
import shlex
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from slinky.cli import build_parser
from slinky.clients.kube import KubeClient, KubeConfig
from slinky.config import Settings
from slinky.operator import nodesets_cli as cli
from slinky.operator.api.base import Condition
from slinky.operator.models import ScaleInResult, ScaleInStatus

REPO = Path(__file__).resolve().parents[3]
NOW = datetime(2026, 11, 25, 0, 49, 30, tzinfo=UTC)
WF_ID = "nodeset-scalein/team-a/gpu-0/8d514486-c0dc-4ddc-9f58-96625724fb6c"

# A NodeSet scaled 2 -> 0 while both nodes ran a job, as the apiserver returned it (managedFields left out).
NODESET: dict[str, Any] = {
    "apiVersion": "slinky.slurm.net/v1beta1",
    "kind": "NodeSet",
    "metadata": {
        "creationTimestamp": "2026-11-25T00:49:16Z",
        "generation": 2,
        "name": "gpu",
        "namespace": "team-a",
        "resourceVersion": "6002",
        "uid": "d5cee70e-7cff-43f4-b983-d954208c9679",
    },
    "spec": {
        "controllerRef": {"name": "slurm"},
        "ordinalPadding": 0,
        "oversubscribeNode": False,
        "pinToNode": False,
        "pruneSlurmNodeRecords": "Never",
        "replicas": 0,
        "revisionHistoryLimit": 0,
        "scalingMode": "StatefulSet",
        "slurmd": {"image": "slurmd:26.05"},
        "workloadDisruptionProtection": True,
    },
    "status": {
        "availableReplicas": 2,
        "conditions": [
            {
                "lastTransitionTime": "2026-11-25T00:49:16Z",
                "message": "slurmrestd answers",
                "observedGeneration": 2,
                "reason": "Reachable",
                "status": "True",
                "type": "ControllerReady",
            },
            {
                "lastTransitionTime": "2026-11-25T00:49:16Z",
                "message": "the spec is valid",
                "observedGeneration": 2,
                "reason": "Valid",
                "status": "True",
                "type": "SpecValid",
            },
        ],
        "desired": 0,
        "nodeSetHash": "3237870682",
        "observedGeneration": 2,
        "readyReplicas": 2,
        "replicas": 2,
        "selector": "app.kubernetes.io/instance=gpu,app.kubernetes.io/name=slurmd",
        "slurmAllocated": 2,
        "slurmDown": 0,
        "slurmDrain": 2,
        "slurmIdle": 0,
        "unavailableReplicas": 0,
        "updatedReplicas": 2,
    },
}

# One of its pods while its scale-in waited for the job (status conditions shortened to the ones read).
POD: dict[str, Any] = {
    "metadata": {
        "name": "gpu-0",
        "namespace": "team-a",
        "uid": "8d514486-c0dc-4ddc-9f58-96625724fb6c",
        "creationTimestamp": "2026-11-25T00:49:16Z",
        "labels": {
            "app.kubernetes.io/instance": "gpu",
            "app.kubernetes.io/name": "slurmd",
            "nodeset.slinky.slurm.net/pod-hostname": "gpu-0",
        },
        "annotations": {
            "kubectl.kubernetes.io/default-container": "slurmd",
            "nodeset.slinky.slurm.net/pod-cordon": "true",
            "nodeset.slinky.slurm.net/pod-deadline": "2026-11-25T00:59:16Z",
            "nodeset.slinky.slurm.net/scale-in-workflow": WF_ID,
        },
        "ownerReferences": [
            {
                "apiVersion": "slinky.slurm.net/v1beta1",
                "kind": "NodeSet",
                "name": "gpu",
                "uid": "d5cee70e-7cff-43f4-b983-d954208c9679",
                "controller": True,
            }
        ],
    },
    "spec": {"hostname": "gpu-0", "nodeName": "slinky-worker-2", "subdomain": "slurm-workers"},
    "status": {
        "phase": "Running",
        "conditions": [
            {"type": "SlurmNodeStateDrain", "status": "True", "lastTransitionTime": "2026-11-25T00:49:18Z"},
            {"type": "Ready", "status": "True", "lastTransitionTime": "2026-11-25T00:49:17Z"},
        ],
    },
}

# The `status` query's answer for that pod (temporal workflow query --name status), and a closed one's result.
STATUS = ScaleInStatus.model_validate(
    {
        "cancelled_jobs": [],
        "cause": "scale-in",
        "deadline": "2026-11-25T00:59:16Z",
        "forced": False,
        "jobs": [163],
        "node": "gpu-0",
        "outcome": "",
        "phase": "draining",
        "pod": "gpu-0",
        "reason": "slurm-operator: Pod (team-a/gpu-0) is pending termination for scale-in",
        "states": ["MIXED", "DRAIN", "DYNAMIC_NORM"],
        "waiting_for": "jobs [163] on node gpu-0",
    }
)
SEARCH_ATTRIBUTES = {
    "SlinkyNamespace": "team-a",
    "SlinkyNodeSet": "gpu",
    "SlinkySlurmNode": "gpu-0",
    "SlinkyPhase": "draining",
}
STARTED = datetime(2026, 11, 25, 0, 49, 18, tzinfo=UTC)


def running_row(workflow_id: str = WF_ID, live: ScaleInStatus | None = STATUS, note: str = "") -> dict[str, Any]:
    return cli.scale_in_row(
        workflow_id=workflow_id,
        run_id="01a2102d",
        status="RUNNING",
        search_attributes=SEARCH_ATTRIBUTES,
        start_time=STARTED,
        close_time=None,
        live=live,
        result=None,
        now=NOW,
        note=note,
    )


def closed_row(status: str, result: ScaleInResult | None) -> dict[str, Any]:
    return cli.scale_in_row(
        workflow_id="nodeset-scalein/team-a/gpu-1/38399a3a",
        run_id="01a2102e",
        status=status,
        search_attributes={**SEARCH_ATTRIBUTES, "SlinkySlurmNode": "gpu-1", "SlinkyPhase": "done"},
        start_time=STARTED,
        close_time=STARTED + timedelta(seconds=3),
        live=None,
        result=result,
        now=NOW,
    )


def commands_for(*rows: dict[str, Any]) -> dict[str, dict[str, str]]:
    env = {"TEMPORAL_ADDRESS": "127.0.0.1:7233"}
    return {r["workflowId"]: cli.temporal_commands(r["workflowId"], "127.0.0.1:7233", "default", env) for r in rows}


def cond(type_: str, status: str, reason: str = "R") -> Condition:
    return Condition.model_validate(
        {
            "type": type_,
            "status": status,
            "reason": reason,
            "message": "m",
            "lastTransitionTime": "2026-11-25T00:00:00Z",
        }
    )


# ------------------------------------------------------------------------------------------ rows
@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0, "0s"),
        (-3, "0s"),
        (119, "119s"),
        (120, "2m"),
        (330, "5m30s"),
        (2700, "45m"),
        (12000, "3h20m"),
        (30 * 3600, "30h"),
        (77 * 3600, "3d5h"),
        (300 * 86400, "300d"),
        (800 * 86400, "2y"),
    ],
)
def test_age_reads_as_kubectl_prints_it(seconds: int, text: str) -> None:
    assert cli.human_age(seconds) == text


def test_a_list_row_carries_the_counts_of_the_status_and_the_desired_count_of_the_spec() -> None:
    row = cli.nodeset_row(NODESET, NOW)
    assert (row["namespace"], row["name"], row["desired"], row["replicas"], row["readyReplicas"]) == (
        "team-a",
        "gpu",
        0,
        2,
        2,
    )
    counts = (row["updatedReplicas"], row["slurmIdle"], row["slurmAllocated"], row["slurmDown"], row["slurmDrain"])
    assert counts == (2, 0, 2, 0, 2)
    assert (row["ready"], row["problem"], row["age"]) == ("True", None, "14s")


@pytest.mark.parametrize(
    ("conditions", "column", "problem"),
    [
        ([cond("ControllerReady", "True"), cond("SpecValid", "True")], "True", None),
        (
            [cond("ControllerReady", "True"), cond("SpecValid", "False", "InvalidExtraConf")],
            "InvalidExtraConf",
            "SpecValid",
        ),
        ([cond("ControllerReady", "False", "ControllerNotFound")], "ControllerNotFound", "ControllerReady"),
        (
            [cond("ControllerReady", "False", "SlurmUnreachable"), cond("SpecValid", "False", "FailedCreate")],
            "FailedCreate",
            "SpecValid",
        ),
        ([cond("ControllerReady", "Unknown")], "Unknown", None),
        ([], "Unknown", None),
        (
            [cond("ControllerReady", "True"), cond("SpecValid", "True"), cond("ScaleInProgress", "False", "NoScaleIn")],
            "True",
            None,
        ),
    ],
    ids=["all-true", "spec-invalid", "controller-missing", "spec-first", "unknown", "never-reconciled", "info-only"],
)
def test_the_ready_column_names_the_first_problem(
    conditions: list[Condition], column: str, problem: str | None
) -> None:
    text, found = cli.ready_column(conditions)
    assert text == column
    assert (found.type if found else None) == problem


def test_a_false_condition_reaches_the_list_row_and_its_json() -> None:
    obj = copy.deepcopy(NODESET)
    obj["status"]["conditions"][1].update(status="False", reason="InvalidExtraConf", message="one line please")
    row = cli.nodeset_row(obj, NOW)
    assert row["ready"] == "InvalidExtraConf"
    assert row["problem"]["type"] == "SpecValid" and row["problem"]["message"] == "one line please"
    assert "InvalidExtraConf" in cli.render_list([row], "team-a").splitlines()[1].split()


def test_the_list_table_has_a_namespace_column_only_across_namespaces() -> None:
    row = cli.nodeset_row(NODESET, NOW)
    one = cli.render_list([row], "team-a").splitlines()
    assert one[0].split() == ["NAME", "REPLICAS", "UPDATED", "IDLE", "ALLOCATED", "DOWN", "DRAIN", "READY", "AGE"]
    assert one[1].split() == ["gpu", "2/0", "2", "0", "2", "0", "2", "True", "14s"]
    every = cli.render_list([row], None).splitlines()
    assert every[0].split()[0] == "NAMESPACE" and every[1].split()[:3] == ["team-a", "gpu", "2/0"]
    assert cli.render_list([], "team-a") == "No NodeSets found in namespace team-a."


def test_a_pod_row_says_its_slurm_node_and_the_operators_marks() -> None:
    row = cli.pod_row(POD, NOW)
    assert (row["name"], row["phase"], row["ready"], row["slurmNode"]) == ("gpu-0", "Running", True, "gpu-0")
    assert (row["cordon"], row["deadline"], row["scaleInWorkflow"]) == (True, "2026-11-25T00:59:16Z", WF_ID)
    terminating = copy.deepcopy(POD)
    terminating["metadata"]["deletionTimestamp"] = "2026-11-25T00:49:29Z"
    terminating["metadata"]["annotations"] = {}
    terminating["spec"]["hostname"] = "gpu-node-7"
    terminating["status"]["conditions"] = []
    row = cli.pod_row(terminating, NOW)
    assert (row["phase"], row["ready"], row["slurmNode"], row["cordon"], row["deadline"]) == (
        "Terminating",
        False,
        "gpu-node-7",
        False,
        "",
    )


def test_a_running_scale_in_row_says_what_it_waits_for() -> None:
    row = running_row()
    assert (row["namespace"], row["nodeset"], row["pod"], row["slurmNode"], row["phase"]) == (
        "team-a",
        "gpu",
        "gpu-0",
        "gpu-0",
        "draining",
    )
    assert (row["waitingFor"], row["jobs"], row["deadline"]) == ("jobs [163] on node gpu-0", [163], STATUS.deadline)
    assert (row["outcome"], row["age"], row["workflowId"]) == ("", "12s", WF_ID)


def test_a_running_scale_in_whose_query_failed_falls_back_to_its_search_attributes() -> None:
    row = running_row(live=None, note="status query failed: no poller")
    assert (row["pod"], row["slurmNode"], row["phase"], row["jobs"]) == ("gpu-0", "gpu-0", "draining", [])
    table = cli.render_scale_ins([row], commands_for(row))
    assert "status query failed: no poller" in table


@pytest.mark.parametrize(
    ("status", "result", "outcome", "cancelled"),
    [
        ("COMPLETED", ScaleInResult(outcome="deleted", node="gpu-1", cancelled_jobs=[162]), "deleted", [162]),
        ("COMPLETED", ScaleInResult(outcome="kept", node="gpu-1"), "kept", []),
        ("TERMINATED", None, "terminated", []),
        ("CANCELED", None, "canceled", []),
    ],
)
def test_a_closed_scale_in_row_shows_its_outcome(
    status: str, result: ScaleInResult | None, outcome: str, cancelled: list[int]
) -> None:
    row = closed_row(status, result)
    assert (row["pod"], row["slurmNode"], row["phase"], row["status"]) == ("gpu-1", "gpu-1", "done", status)
    assert (row["outcome"], row["cancelledJobs"], row["closed"]) == (outcome, cancelled, "2026-11-25T00:49:21+00:00")


def test_the_pod_comes_from_the_workflow_id_when_nothing_else_says_it() -> None:
    row = cli.scale_in_row(
        workflow_id="nodeset-scalein/ns1/cpu-3/uid-1",
        run_id="r",
        status="TERMINATED",
        search_attributes={},
        start_time=None,
        close_time=None,
        live=None,
        result=None,
        now=NOW,
    )
    assert (row["namespace"], row["pod"], row["age"]) == ("ns1", "cpu-3", "<unknown>")


# ------------------------------------------------------------------------------------------ tables
def test_one_running_scale_in_prints_the_temporal_commands_with_its_id() -> None:
    done = closed_row("COMPLETED", ScaleInResult(outcome="deleted", node="gpu-1", cancelled_jobs=[162]))
    rows = [running_row(), done]
    text = cli.render_scale_ins(rows, commands_for(*rows))
    lines = text.splitlines()
    header = lines[0].split("   ")
    assert [h.strip() for h in header if h.strip()][:3] == ["NAMESPACE", "NODESET", "POD"]
    assert lines[1].split()[:5] == ["team-a", "gpu", "gpu-0", "gpu-0", "draining"]
    assert WF_ID in lines[1] and "2026-11-25T00:59:16Z" in lines[1]
    assert "deleted" in lines[2] and "cancelled 162" in lines[2]
    assert f"temporal workflow update execute --name abort -w {WF_ID}" in text
    assert f"temporal workflow update execute --name force -w {WF_ID}" in text
    assert f"temporal workflow query --name status -w {WF_ID}" in text
    assert "nodeset-scalein/team-a/gpu-1/38399a3a" not in text.split("temporal CLI")[1], "only running ones"


def test_several_running_scale_ins_print_the_commands_once_with_a_placeholder() -> None:
    rows = [running_row(), running_row(WF_ID.replace("gpu-0", "gpu-1"))]
    text = cli.render_scale_ins(rows, commands_for(*rows))
    assert "temporal workflow update execute --name force -w <WORKFLOW ID>" in text
    assert text.count("--name force") == 1


def test_closed_scale_ins_print_no_commands_and_none_prints_a_sentence() -> None:
    row = closed_row("COMPLETED", ScaleInResult(outcome="deleted", node="gpu-1"))
    assert "temporal" not in cli.render_scale_ins([row], commands_for(row))
    assert cli.render_scale_ins([], {}) == "No scale-ins."


def test_show_prints_spec_counts_conditions_pods_and_scale_ins_without_repeating_the_nodeset() -> None:
    detail = cli.nodeset_detail(NODESET, [POD], [running_row()], NOW)
    text = cli.render_show(detail, commands_for(running_row()))
    assert "Replicas:      0 desired, 2 current, 2 ready, 2 updated" in text
    assert "Slurm nodes:   0 idle, 2 allocated, 0 down, 2 drain" in text
    assert "Controller:    slurm" in text and "Image:         slurmd:26.05" in text
    lines = text.splitlines()
    conditions = lines.index("Conditions:")
    assert lines[conditions + 2].split()[:4] == ["ControllerReady", "True", "Reachable", "14s"]
    assert lines[conditions + 2].endswith("slurmrestd answers")
    pods = lines.index("Pods:")
    assert lines[pods + 2].split() == ["gpu-0", "Running", "true", "gpu-0", "true", "2026-11-25T00:59:16Z", "14s"]
    scale_ins = lines.index("Running scale-ins:")
    assert lines[scale_ins + 1].split()[:2] == ["POD", "SLURM"], "namespace and NodeSet are printed above"
    assert lines[scale_ins + 2].split()[:3] == ["gpu-0", "gpu-0", "draining"]
    assert json.loads(json.dumps(detail))["pods"][0]["slurmNode"] == "gpu-0", "the JSON form is plain data"


def test_show_says_when_temporal_could_not_be_asked_and_quotes_a_control_character() -> None:
    obj = copy.deepcopy(NODESET)
    obj["spec"]["extraConf"] = "Weight=1\rNodeName=evil"
    text = cli.render_show(cli.nodeset_detail(obj, [], None, NOW), {})
    assert "unknown (Temporal could not be asked)" in text
    assert 'Extra conf:    "Weight=1\\rNodeName=evil"' in text
    assert "\r" not in text


# ------------------------------------------------------------------------------------------ temporal commands
def test_the_temporal_commands_name_the_workflow_updates_and_query() -> None:
    commands = cli.temporal_commands(WF_ID, "127.0.0.1:7233", "default", {"TEMPORAL_ADDRESS": "127.0.0.1:7233"})
    assert shlex.split(commands["abort"]) == [
        "temporal",
        "workflow",
        "update",
        "execute",
        "--name",
        "abort",
        "-w",
        WF_ID,
    ]
    assert shlex.split(commands["force"])[5] == "force"
    assert shlex.split(commands["status"]) == ["temporal", "workflow", "query", "--name", "status", "-w", WF_ID]
    assert commands["describe"] == f"temporal workflow describe -w {WF_ID}"


@pytest.mark.parametrize(
    ("address", "namespace", "env", "flags"),
    [
        ("127.0.0.1:17233", "default", {"TEMPORAL_ADDRESS": "127.0.0.1:17233"}, []),
        ("127.0.0.1:7233", "default", {}, []),
        ("temporal.example:7233", "default", {}, ["--address", "temporal.example:7233"]),
        ("127.0.0.1:17233", "default", {"TEMPORAL_ADDRESS": "127.0.0.1:7233"}, ["--address", "127.0.0.1:17233"]),
        ("127.0.0.1:7233", "slinky", {}, ["--namespace", "slinky"]),
        ("127.0.0.1:7233", "slinky", {"TEMPORAL_NAMESPACE": "slinky"}, []),
    ],
    ids=["env-matches", "cli-default", "other-host", "env-differs", "namespace", "namespace-in-env"],
)
def test_connection_flags_only_when_the_temporal_cli_would_not_find_the_server(
    address: str, namespace: str, env: dict[str, str], flags: list[str]
) -> None:
    argv = shlex.split(cli.temporal_commands(WF_ID, address, namespace, env)["abort"])
    assert argv[8:] == flags


def test_the_visibility_query_narrows_by_search_attributes() -> None:
    assert cli.scale_ins_query() == "WorkflowType = 'NodeSetScaleIn' AND ExecutionStatus = 'Running'"
    assert cli.scale_ins_query("team-a", "gpu", include_closed=True) == (
        "WorkflowType = 'NodeSetScaleIn' AND SlinkyNamespace = 'team-a' AND SlinkyNodeSet = 'gpu'"
    )
    assert "'it\\'s'" in cli.scale_ins_query("it's")


# ------------------------------------------------------------------------------------------ arguments
def parse(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(["nodesets", *argv])


def test_arguments_of_each_command() -> None:
    args = parse("list", "-A", "-o", "json")
    assert (args.all_namespaces, args.namespace, args.output, args.handler is not None) == (True, None, "json", True)
    args = parse("show", "gpu", "-n", "team-a")
    assert (args.name, args.namespace, args.output) == ("gpu", "team-a", "table")
    args = parse("scale-ins", "gpu", "-n", "team-a", "--all")
    assert (args.nodeset, args.namespace, args.all) == ("gpu", "team-a", True)
    args = parse("scale-ins")
    assert (args.nodeset, args.namespace, args.all) == (None, None, False)


@pytest.mark.parametrize(
    "argv",
    [("list", "-n", "a", "-A"), ("show",), ("scale-ins", "-o", "yaml"), ()],
    ids=["namespace-and-all", "show-without-name", "unknown-output", "no-command"],
)
def test_bad_arguments_are_refused_by_the_parser(argv: tuple[str, ...], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        parse(*argv)
    assert exit_.value.code == 2 and "usage: slinky nodesets" in capsys.readouterr().err


def test_the_default_namespace_is_the_operators_only_one_else_default() -> None:
    args = parse("show", "gpu")
    assert cli._namespace(args, Settings(operator={"namespaces": ["slurm"]})) == "slurm"
    assert cli._namespace(args, Settings(operator={"namespaces": ["a", "b"]})) == "default"
    assert cli._namespace(parse("show", "gpu", "-n", "x"), Settings(operator={"namespaces": ["slurm"]})) == "x"


# ------------------------------------------------------------------------------------------ errors
API = "/apis/slinky.slurm.net/v1beta1"
NOT_FOUND = {"kind": "Status", "status": "Failure", "reason": "NotFound", "message": 'nodesets "x" not found'}


def kube_on(routes: dict[str, tuple[int, Any]]) -> KubeClient:
    """A client whose API server answers GET `path` with `routes[path]` (status, JSON body), else 404 text."""

    def answer(request: httpx.Request) -> httpx.Response:
        status, body = routes.get(request.url.path, (404, None))
        if body is None:
            return httpx.Response(status, text="404 page not found")
        return httpx.Response(status, json=body)

    return KubeClient(KubeConfig(server="http://kube.test", ssl_context=False), transport=httpx.MockTransport(answer))


class NoTemporal(cli.Sources):
    async def temporal_client(self) -> Any:
        raise cli.CliError("Temporal unreachable at 127.0.0.1:1: connection refused")


async def run(argv: list[str], sources: cli.Sources) -> int:
    args = parse(*argv)
    return await cli.run_async(args.command, args, sources)


async def test_a_missing_nodeset_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    kube = kube_on(
        {API: (200, {"resources": [{"name": "nodesets"}]}), f"{API}/namespaces/a/nodesets/x": (404, NOT_FOUND)}
    )
    assert await run(["show", "x", "-n", "a"], cli.Sources(Settings(), kube=kube)) == 1
    out = capsys.readouterr()
    assert (out.out, out.err) == ("", "error: NodeSet 'x' not found in namespace 'a'\n")


@pytest.mark.parametrize("argv", [["show", "x", "-n", "a"], ["list", "-A"], ["list", "-n", "a"]])
async def test_a_missing_crd_is_named(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert await run(argv, cli.Sources(Settings(), kube=kube_on({}))) == 1
    out = capsys.readouterr()
    assert out.out == ""
    assert out.err == "error: the NodeSet CRD is not installed (the API server serves no nodesets.slinky.slurm.net)\n"


async def test_an_unreachable_api_server_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    kube = KubeClient(KubeConfig(server="http://kube.test", ssl_context=False), transport=httpx.MockTransport(refuse))
    assert await run(["list", "-A"], cli.Sources(Settings(), kube=kube)) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: Kubernetes: GET /apis/slinky.slurm.net/v1beta1/nodesets: ConnectError")
    assert err.count("\n") == 1


async def test_show_prints_the_nodeset_when_temporal_is_down_and_still_fails(
    capsys: pytest.CaptureFixture[str],
) -> None:
    kube = kube_on(
        {
            f"{API}/namespaces/team-a/nodesets/gpu": (200, NODESET),
            "/api/v1/namespaces/team-a/pods": (200, {"items": [POD]}),
        }
    )
    assert await run(["show", "gpu", "-n", "team-a", "-o", "json"], NoTemporal(Settings(), kube=kube)) == 1
    out = capsys.readouterr()
    shown = json.loads(out.out)
    assert (shown["name"], [p["name"] for p in shown["pods"]], shown["scaleIns"]) == ("gpu", ["gpu-0"], None)
    assert out.err == "error: Temporal unreachable at 127.0.0.1:1: connection refused\n"


async def test_show_lists_only_the_pods_this_nodeset_owns(capsys: pytest.CaptureFixture[str]) -> None:
    stranger = copy.deepcopy(POD)
    stranger["metadata"]["name"] = "gpu-9"
    stranger["metadata"]["ownerReferences"][0]["uid"] = "an-older-nodeset-of-the-same-name"
    kube = kube_on(
        {
            f"{API}/namespaces/team-a/nodesets/gpu": (200, NODESET),
            "/api/v1/namespaces/team-a/pods": (200, {"items": [stranger, POD]}),
        }
    )
    await run(["show", "gpu", "-n", "team-a", "-o", "json"], NoTemporal(Settings(), kube=kube))
    assert [p["name"] for p in json.loads(capsys.readouterr().out)["pods"]] == ["gpu-0"]


def slinky(*argv: str, **env: str) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("SLINKY_", "TEMPORAL_", "KUBECONFIG"))}
    return subprocess.run(
        [sys.executable, "-m", "slinky.cli", "nodesets", *argv],
        cwd=REPO,
        env={**base, **env},
        text=True,
        capture_output=True,
        timeout=30,
    )


def test_an_unreachable_temporal_is_one_line_and_exit_1_from_the_command_line() -> None:
    proc = slinky("scale-ins", SLINKY_TEMPORAL__ADDRESS="127.0.0.1:1")
    assert proc.returncode == 1 and proc.stdout == ""
    assert proc.stderr.startswith("error: Temporal unreachable at 127.0.0.1:1: ")
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr


def test_an_unreachable_api_server_from_the_command_line(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\ncurrent-context: c\n"
        "clusters: [{name: k, cluster: {server: 'http://127.0.0.1:1'}}]\n"
        "contexts: [{name: c, context: {cluster: k, user: u}}]\nusers: [{name: u, user: {}}]\n"
    )
    proc = slinky("list", "-A", KUBECONFIG=str(kubeconfig))
    assert proc.returncode == 1 and proc.stdout == ""
    assert proc.stderr.startswith("error: Kubernetes: GET ") and proc.stderr.count("\n") == 1
    missing = slinky("list", KUBECONFIG=str(tmp_path / "nope"))
    assert missing.returncode == 1 and missing.stderr.startswith("error: Kubernetes: cannot load the kubeconfig")
