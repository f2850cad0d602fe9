"""Temporal's floor (bench/temporal_floor.py) is a lifecycle's history with nothing else: checked event for event."""

from __future__ import annotations

import json
import os
from pathlib import Path

from temporalio.client import Client

from bench import temporal_floor
from bench.common import CpuMeter

HAPPY_PATH = Path(__file__).resolve().parents[1] / "replay" / "histories" / "pod_happy_path.json"


def _shape(events: list[dict[str, object]]) -> list[str]:
    """Event types, with a marker told apart by what it records (a local activity's result, or a patch)."""
    shape = []
    for event in events:
        kind = str(event["eventType"]).removeprefix("EVENT_TYPE_")
        if kind == "MARKER_RECORDED":
            details = event["markerRecordedEventAttributes"]["details"]  # type: ignore[index]
            kind += ":patch" if "patch-data" in details else ":local-activity"
        shape.append(kind)
    return shape


async def test_the_floor_has_an_allocated_pods_history_and_measures_a_burst(dev_env: dict[str, str]) -> None:
    client = await Client.connect(dev_env["TEMPORAL_ADDRESS"], namespace=dev_env["TEMPORAL_NAMESPACE"])
    meter = CpuMeter({"benchmark": os.getpid()})
    result = await temporal_floor.burst(client, 4, meter)

    assert result["n"] == 4 and result["per_second"] > 0
    assert result["cpu_ms_per_pod"]["benchmark"] > 0
    history = await client.get_workflow_handle(result["workflow_ids"][0]).fetch_history()
    floor = _shape(json.loads(history.to_json())["events"])
    assert floor == _shape(json.loads(HAPPY_PATH.read_text())["events"])
