"""``slinky.clients.temporal``: the workers' converter writes what the stock pydantic converter writes, and builds
its state once however many data converters temporalio makes."""

from __future__ import annotations

import dataclasses

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
