"""Record the crash-recovery replay histories from the live dev stack, after a run of
``tests/integration/test_slurmctld_crash.py`` (kill -9 of slurmctld under load) on the current code.

    .venv/bin/python -m tests.replay.record_crash     # writes tests/replay/histories/lost_*.json

It looks through the most recent ``WorkloadWorkflow`` executions of ``crash-*`` pods for one of each recovery
path and writes its history as ``temporal workflow show -o json`` would:

* ``lost_pending_resubmitted``: the job vanished before it started; submitted again, then bound;
* ``lost_running_readopted``: the job vanished while the pod ran; a new job allocated at once on its node;
* ``lost_running_readopt_queued``: the same, but Slurm could not give the node back at once: queued for it.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

from temporalio.client import Client

OUT = Path(__file__).parent / "histories"


def _markers(history: dict[str, object]) -> list[tuple[str, dict[str, object] | None]]:
    """(activity type, result) of each local activity, and ("signal:<state>", None) of each job_event."""
    import base64

    found: list[tuple[str, dict[str, object] | None]] = []
    for event in history["events"]:  # type: ignore[attr-defined]
        if event["eventType"] == "EVENT_TYPE_MARKER_RECORDED":
            details = event["markerRecordedEventAttributes"]["details"]
            if "data" not in details:
                continue
            kind = json.loads(base64.b64decode(details["data"]["payloads"][0]["data"]))["activity_type"]
            payloads = details.get("result", {}).get("payloads") or []
            result = json.loads(base64.b64decode(payloads[0]["data"])) if payloads and payloads[0].get("data") else None
            found.append((kind, result))
        elif event["eventType"] == "EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED":
            attributes = event["workflowExecutionSignaledEventAttributes"]
            data = json.loads(base64.b64decode(attributes["input"]["payloads"][0]["data"]))
            found.append((f"{attributes['signalName']}:{data.get('kind') or data.get('state')}", None))
    return found


def classify(history: dict[str, object]) -> str | None:
    steps = _markers(history)
    names = [name for name, _ in steps]
    submits = [result for name, result in steps if name == "submit_placeholder_job"]
    if len(submits) != 2 or "bind_pods" not in names or "remove_finalizers" not in names:
        return None
    if "delete_pods" in names:
        return None
    second = names.index("submit_placeholder_job", names.index("submit_placeholder_job") + 1)
    if names.index("bind_pods") > second:
        return "lost_pending_resubmitted"
    result = submits[1] or {}
    return "lost_running_readopted" if result.get("nodes") else "lost_running_readopt_queued"


async def main() -> int:
    client = await Client.connect(os.environ["TEMPORAL_ADDRESS"])
    wanted = {"lost_pending_resubmitted", "lost_running_readopted", "lost_running_readopt_queued"}
    query = "WorkflowType = 'WorkloadWorkflow' AND ExecutionStatus = 'Completed'"
    async for execution in client.list_workflows(query, limit=2000):
        if not wanted:
            break
        handle = client.get_workflow_handle(execution.id, run_id=execution.run_id)
        history = (await handle.fetch_history()).to_json_dict()
        kind = classify(history)
        if kind in wanted:
            (OUT / f"{kind}.json").write_text(json.dumps(history, indent=2) + "\n")
            print(f"{kind}: {execution.id}")
            wanted.discard(kind)
    if wanted:
        print(f"not found (run the crash test first): {sorted(wanted)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
