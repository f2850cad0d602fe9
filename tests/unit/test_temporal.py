"""``slinky.clients.temporal``: the workers' converter writes what the stock pydantic converter writes, and builds
its state once however many data converters temporalio makes; a process leaves without finalizing."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

from temporalio.contrib.pydantic import pydantic_data_converter

from slinky.bridge.models.workload import JobEvent, PodEvent, PodEventKind
from slinky.clients.temporal import SharedPydanticPayloadConverter, data_converter


def test_payloads_are_the_stock_converters_both_ways() -> None:
    values = [PodEvent(uid="u", name="p", kind=PodEventKind.DELETING), JobEvent(job_id=7, state="RUNNING"), 3, None]
    ours = data_converter.payload_converter.to_payloads(values)
    assert ours == pydantic_data_converter.payload_converter.to_payloads(values)
    types = [PodEvent, JobEvent, int, type(None)]
    assert pydantic_data_converter.payload_converter.from_payloads(ours, types) == values
    assert data_converter.payload_converter.from_payloads(ours, types) == values


def test_every_data_converter_shares_one_payload_state() -> None:
    """temporalio makes a data converter per activation and per command context: each payload converter it
    builds reuses the first one's encodings instead of making new ones."""
    first, second = dataclasses.replace(data_converter), dataclasses.replace(data_converter)
    assert first.payload_converter is not second.payload_converter
    a, b = SharedPydanticPayloadConverter(), SharedPydanticPayloadConverter()
    assert a.converters is b.converters


def test_exit_without_finalizing_flushes_the_logs_and_exits_with_the_code() -> None:
    """The process exits with its code and its last output, and skips finalization (no atexit hook runs)."""
    script = (
        "import atexit, logging, sys\n"
        "from slinky.clients.temporal import exit_without_finalizing\n"
        "logging.basicConfig(stream=sys.stderr, level=logging.INFO)\n"
        "atexit.register(lambda: print('finalized', flush=True))\n"
        "print('buffered', end='')\n"
        "logging.getLogger('t').info('last words')\n"
        "exit_without_finalizing(3)\n"
    )
    repo = Path(__file__).resolve().parents[2]
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=repo, timeout=60)
    assert done.returncode == 3
    assert done.stdout == "buffered"
    assert "last words" in done.stderr
