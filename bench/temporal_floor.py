"""What Temporal alone costs a pod's lifecycle on this stack: the floor under the bridge's burst rate.

A workflow with the history of an immediately allocated pod (``tests/replay/histories/pod_happy_path.json``, event
for event: ``tests/integration/test_bench_temporal_floor.py`` checks it). It starts as the pod watcher starts a
single pod's lifecycle (eagerly, with its search attributes), runs two local activities (translate, submit), sets
the phase, job id and partition, runs a third (place) and sets Running, waits for the next signal under a 300 s
timer, then runs two more (cancel, release) and sets Finished. Every activity does nothing, so a burst measures
Temporal's server and the Python SDK's worker alone, with the bridge worker's options, on the same dev server as
the bridge. Its "bound" is the end of the third activity, as the bridge's is the binding.

Usage (from bench/bridge.py, or alone)::

    .venv/bin/python -m bench.temporal_floor --pods 64 --bursts 3
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
import uuid
from datetime import timedelta
from typing import Any

from temporalio import activity, workflow
from temporalio.client import Client
from temporalio.common import (
    SearchAttributeKey,
    SearchAttributePair,
    TypedSearchAttributes,
    WorkflowIDConflictPolicy,
)
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

from bench.common import CpuMeter
from slinky.dev import stack
from workflows.workload import PATCH_FOLDED_STEPS, PATCH_ONE_RECHECK_TIMER, SA_JOB_ID, SA_PARTITION, SA_PHASE

# The lifecycle's own search attributes and patch id: the floor's history stays the lifecycle's.
PHASE, JOB_ID, PARTITION = SA_PHASE, SA_JOB_ID, SA_PARTITION
PLACED: dict[str, float] = {}
"""Workflow id -> when its third activity (the bridge's binding) ran, in this process's monotonic clock."""


@activity.defn(name="floor_step")
async def floor_step(step: dict[str, str]) -> dict[str, str]:
    if step.get("name") == "place":
        PLACED.setdefault(activity.info().workflow_id, time.monotonic())
    return step


@workflow.defn(name="TemporalFloor")
class TemporalFloor:
    """The commands of an immediately allocated pod's lifecycle, with activities that do nothing."""

    def __init__(self) -> None:
        self.events = 0
        self.recheck: asyncio.Task[None] | None = None

    @workflow.signal(name="pod_event")
    def pod_event(self, event: dict[str, str]) -> None:
        self.events += 1

    async def _step(self, name: str) -> None:
        await workflow.execute_local_activity(floor_step, {"name": name}, start_to_close_timeout=timedelta(seconds=30))

    @workflow.run
    async def run(self, partition: str) -> None:
        await self._step("translate")
        await self._step("submit")
        workflow.upsert_search_attributes(
            [PHASE.value_set("Pending"), JOB_ID.value_set(1), PARTITION.value_set(partition)]
        )
        workflow.upsert_search_attributes([PHASE.value_set("Binding")])
        workflow.patched(PATCH_FOLDED_STEPS)  # the lifecycle's patch: its marker and change-version upsert
        await self._step("place")
        workflow.upsert_search_attributes([PHASE.value_set("Running")])
        workflow.patched(PATCH_ONE_RECHECK_TIMER)  # the wait's patch, and its one re-check timer, kept at the signal
        self.recheck = asyncio.create_task(workflow.sleep(300))  # left to fire after the close, as the lifecycle's
        await workflow.wait_condition(lambda: self.events >= 1)
        await self._step("cancel")
        await self._step("release")
        workflow.upsert_search_attributes([PHASE.value_set("Finished")])


async def burst(client: Client, count: int, meter: CpuMeter | None = None) -> dict[str, Any]:
    """Start ``count`` lifecycles at once; time start -> placed; then end them all (the pods' deletion).

    Returns the bridge benchmark's burst fields: ``per_second`` (placed per second), ``p50_ms``, ``p99_ms``, ``n``,
    and with a ``meter`` the CPU per lifecycle of each process it measures, start to completion (this process is
    the worker and the driver).
    """
    queue = f"bench-temporal-floor-{uuid.uuid4().hex[:8]}"
    ids = [f"{queue}-{i}" for i in range(count)]
    async with Worker(
        client,
        task_queue=queue,
        workflows=[TemporalFloor],
        activities=[floor_step],
        # The bridge worker's options (workers/bridge/worker.py).
        workflow_runner=UnsandboxedWorkflowRunner(),
        max_concurrent_local_activities=200,
        sticky_queue_schedule_to_start_timeout=timedelta(seconds=10),
    ):
        if meter is not None:
            meter.start()
        start = time.monotonic()
        handles = await asyncio.gather(
            *(
                client.start_workflow(
                    TemporalFloor.run,
                    "bench",
                    id=wid,
                    task_queue=queue,
                    id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
                    request_eager_start=True,
                    search_attributes=TypedSearchAttributes(
                        [
                            SearchAttributePair(SearchAttributeKey.for_keyword("SlinkyNamespace"), "bench"),
                            SearchAttributePair(SearchAttributeKey.for_keyword("SlinkyWorkloadKind"), "Pod"),
                            SearchAttributePair(SearchAttributeKey.for_keyword("SlinkyWorkloadName"), wid),
                            SearchAttributePair(PHASE, "Submitting"),
                            SearchAttributePair(SearchAttributeKey.for_int("SlinkyGroupSize"), 1),
                        ]
                    ),
                )
                for wid in ids
            )
        )
        deadline = time.monotonic() + 180
        while sum(wid in PLACED for wid in ids) < count and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        placed = [PLACED[wid] for wid in ids if wid in PLACED]
        to_bound = meter.stop() if meter is not None else {}
        await asyncio.gather(*(h.signal(TemporalFloor.pod_event, {"type": "DELETED"}) for h in handles))
        await asyncio.gather(*(h.result() for h in handles))
        used = meter.stop() if meter is not None else {}
        latencies = sorted(t - start for t in placed)
        span = max(placed, default=start) - start
        return {
            "per_second": round(len(placed) / span, 1) if span > 0 else float("nan"),
            "p50_ms": round(latencies[len(latencies) // 2] * 1000, 1) if latencies else float("nan"),
            "p99_ms": round(latencies[min(len(latencies) - 1, round(0.99 * (len(latencies) - 1)))] * 1000, 1)
            if latencies
            else float("nan"),
            "n": len(placed),
            "workflow_ids": ids,
            "cpu_ms_per_pod": {
                **{name: round(seconds * 1000 / count, 1) for name, seconds in used.items() if seconds > 0},
                "all": round(sum(used.values()) * 1000 / count, 1),
            },
            "cpu_ms_per_pod_to_bound": {
                **{name: round(seconds * 1000 / count, 1) for name, seconds in to_bound.items() if seconds > 0},
                "all": round(sum(to_bound.values()) * 1000 / count, 1),
            },
        }


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pods", type=int, default=64)
    parser.add_argument("--bursts", type=int, default=3)
    args = parser.parse_args()
    env = stack.load_env_file()
    client = await Client.connect(env["TEMPORAL_ADDRESS"], namespace=env["TEMPORAL_NAMESPACE"])
    runs = [await burst(client, args.pods, CpuMeter.of_pid_files(stack.STATE / "pids")) for _ in range(args.bursts)]
    print(json.dumps(runs, indent=2))
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(asyncio.run(main()))
