"""The chaos suite's short run in ``make test``: 20 workloads (singles and 2-pod gangs) while kill -9 hits
slurmrestd, the bridge worker and slurmctld (seed 22 picks those three), each restarted by ``slinky dev up``.
Every count of ``bench/chaos.py`` must be 0: lost pods, orphan, double or foreign-cancelled jobs, stuck finalizers
and stuck workflows. The long run (``make chaos``: 200 workloads, 10 kills of every component) is in
docs/benchmarks.md."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import chaos

pytestmark = pytest.mark.integration


@pytest.mark.timeout(300)
def test_a_short_chaos_run_loses_nothing(dev_env: dict[str, str], tmp_path: Path) -> None:
    out = tmp_path / "chaos.json"
    code = chaos.main(["--workloads", "20", "--kills", "3", "--seed", "22", "--settle", "15", "--json", str(out)])
    summary = json.loads(out.read_text())
    assert code == 0, summary
    assert summary["kills"] == 3 and summary["pods"] >= 20
    assert set(summary["faults"]) == {"slurmrestd", "bridge-worker", "slurmctld"}
