"""Record a `NodeSetScaleIn` history whose fallback timer fires, from the live dev stack on the current code.

    .venv/bin/python -m tests.replay.record_nodeset    # writes histories/nodeset/scalein_fallback_timer.json

It makes a namespace with the stack's Controller, starts an operator of its own with a 2 s fallback, runs a
NodeSet of one real slurmd pod with a batch job held for 7 s, scales it to 0 and waits: the scale-in drains,
its fallback fires (checking the pod, then reading the node) while the job runs, the job ends, the pod goes.
The other histories in that folder come from the integration tests' and the demo's runs (`temporal workflow
show -o json`), as the module docstring of test_replay_nodeset.py says.
"""

from __future__ import annotations

import base64
import json
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

from kubernetes import client

from slinky.dev import stack
from tests.integration.cluster import Kube, Slurm
from tests.integration.nodeset_jobs import HeldJob, all_idle
from tests.integration.operator_fixtures import (
    GROUP,
    VERSION,
    apply_nodeset,
    objects,
    scale,
    start_operator,
    stop_operator,
)
from tests.integration.waiting import eventually

OUT = Path(__file__).parent / "histories" / "nodeset" / "scalein_fallback_timer.json"


def main() -> None:
    env = stack.load_env_file()
    kube, slurm = Kube(env), Slurm(env)
    ns, name = f"replay-{uuid.uuid4().hex[:6]}", f"r{uuid.uuid4().hex[:5]}"
    kube.core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=ns)))
    key = (stack.STATE / "slurm" / "root" / "etc" / "slurm" / "jwt_hs256.key").read_bytes()
    kube.core.create_namespaced_secret(
        ns,
        client.V1Secret(
            metadata=client.V1ObjectMeta(name="slurm-jwt"), data={"jwt.key": base64.b64encode(key).decode()}
        ),
    )
    controller = stack.stack_controller_objects()[2]
    controller["metadata"] = {"name": "slurm"}
    controller["spec"]["jwtKeyRef"] = {"name": "slurm-jwt", "key": "jwt.key"}  # type: ignore[index]
    objects(kube).create_namespaced_custom_object(GROUP, VERSION, ns, "controllers", controller)
    proc = start_operator(env, Path(tempfile.mkdtemp()) / "operator.log", fallback_seconds=2)
    job = None
    try:
        apply_nodeset(kube, ns, name, replicas=1)
        node = f"{name}-0"
        eventually(lambda: all_idle(slurm, [node]), 60, "the slurmd pod IDLE")
        uid = (kube.pod(ns, node) or {})["metadata"]["uid"]
        job = HeldJob(slurm, node)
        job.running()
        time.sleep(1.5)  # the poll sees the job before the scale-in starts
        scale(kube, ns, name, 0)
        time.sleep(7)  # about three fallback periods while the job runs
        job.release()
        eventually(lambda: kube.pod(ns, node) is None, 60, "the pod gone")
        wf = f"nodeset-scalein/{ns}/{node}/{uid}"
        time.sleep(2)
        shown = subprocess.run(
            ["temporal", "workflow", "show", "--address", env["TEMPORAL_ADDRESS"], "-w", wf, "-o", "json"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        events = [e["eventType"] for e in json.loads(shown)["events"]]
        assert "EVENT_TYPE_TIMER_FIRED" in events and events[-1].endswith("COMPLETED"), events
        OUT.write_text(shown)
        print(f"wrote {OUT} ({events.count('EVENT_TYPE_TIMER_FIRED')} fallback timers fired)")
    finally:
        if job is not None:
            job.cleanup()
        objects(kube).delete_namespaced_custom_object(GROUP, VERSION, ns, "nodesets", name)
        time.sleep(3)
        stop_operator(proc)
        kube.core.delete_namespace(ns)


if __name__ == "__main__":
    main()
