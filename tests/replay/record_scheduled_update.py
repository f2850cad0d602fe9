"""Record a `NodeSetScheduledUpdate` history whose window runs to its end, from the live dev stack.

    .venv/bin/python -m tests.replay.record_scheduled_update   # writes histories/scheduled_update/window_ended.json

It makes a namespace on the real nodes with the stack's Controller (as the integration tests' `controller_ns`),
starts an operator of its own, runs a NodeSet of one real slurmd pod, gives it a new template and a
ScheduledUpdate window from 20 s on for 1 minute, and waits for the window's workflow to complete: the
reservation made, the window opened (the pod replaced under it), the end reached, Slurm's purge seen. The other
history of that folder comes from tests/integration/test_scheduled_update.py (`temporal workflow show -o json`).
"""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

from kubernetes import client

from slinky.dev import real_nodes, stack
from tests.integration.cluster import Kube, Slurm
from tests.integration.nodeset_jobs import nodeset_up
from tests.integration.operator_fixtures import GROUP, VERSION, nodeset, objects, start_operator, stop_operator
from tests.integration.waiting import eventually

OUT = Path(__file__).parent / "histories" / "scheduled_update" / "window_ended.json"


def main() -> None:
    env = stack.load_env_file()
    kube, slurm = Kube(env), Slurm(env)
    ns, name = f"replay-{uuid.uuid4().hex[:6]}", f"r{uuid.uuid4().hex[:5]}"
    annotations = real_nodes.namespace_annotations(stack.REAL_NODE_TAINT)
    kube.core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=ns, annotations=annotations)))
    secret, controller = stack.external_controller_objects(ns)
    kube.core.create_namespaced_secret(ns, secret)
    objects(kube).create_namespaced_custom_object(GROUP, VERSION, ns, "controllers", controller)
    proc = start_operator(env, Path(tempfile.mkdtemp()) / "operator.log")
    try:
        nodeset_up(kube, slurm, ns, name, 1)
        start = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=20)
        window = {"startTime": start.strftime("%Y-%m-%dT%H:%M:%SZ"), "duration": "1m"}
        body = {
            "spec": {
                "updateStrategy": {"type": "ScheduledUpdate", "scheduledUpdate": window},
                "template": {"metadata": {"labels": {"r": "2"}}},
            }
        }
        objects(kube).patch_namespaced_custom_object(GROUP, VERSION, ns, "nodesets", name, body)
        annotation = "nodeset.slinky.slurm.net/scheduled-update-workflow"
        wf = eventually(lambda: nodeset(kube, ns, name)["metadata"].get("annotations", {}).get(annotation), 30)

        def closed() -> bool:
            described = subprocess.run(
                ["temporal", "workflow", "describe", "--address", env["TEMPORAL_ADDRESS"], "-w", wf, "-o", "json"],
                capture_output=True,
                text=True,
            ).stdout
            return '"WORKFLOW_EXECUTION_STATUS_COMPLETED"' in described

        eventually(closed, 150, "the window ran to its end", interval=2)
        shown = subprocess.run(
            ["temporal", "workflow", "show", "--address", env["TEMPORAL_ADDRESS"], "-w", wf, "-o", "json"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        events = [e["eventType"] for e in json.loads(shown)["events"]]
        assert events.count("EVENT_TYPE_TIMER_FIRED") >= 2 and events[-1].endswith("COMPLETED"), events
        OUT.parent.mkdir(parents=True, exist_ok=True)
        OUT.write_text(shown)
        print(f"wrote {OUT} ({len(events)} events)")
    finally:
        objects(kube).delete_namespaced_custom_object(GROUP, VERSION, ns, "nodesets", name)
        eventually(lambda: not objects(kube).list_namespaced_custom_object(GROUP, VERSION, ns, "nodesets")["items"], 60)
        time.sleep(2)
        stop_operator(proc)
        kube.core.delete_namespace(ns)


if __name__ == "__main__":
    main()
