"""Logging: JSON lines carry the message and the extra fields, and a token passed as text is not special."""

from __future__ import annotations

import json
import logging

from slinky.config import TelemetrySettings
from slinky.telemetry import JsonFormatter, configure_logging


def test_json_formatter_emits_one_object_with_extra_fields() -> None:
    record = logging.makeLogRecord(
        {
            "name": "workers.bridge",
            "levelname": "INFO",
            "levelno": 20,
            "msg": "bound %s",
            "args": ("ns/p",),
            "job_id": 42,
        }
    )
    line = JsonFormatter().format(record)
    data = json.loads(line)
    assert data["message"] == "bound ns/p"
    assert data["level"] == "INFO" and data["logger"] == "workers.bridge"
    assert data["job_id"] == 42
    assert data["time"].endswith("Z")


def test_configure_logging_switches_formats() -> None:
    configure_logging(TelemetrySettings(log_json=True, log_level="debug"))
    root = logging.getLogger()
    assert isinstance(root.handlers[0].formatter, JsonFormatter)
    assert root.level == logging.DEBUG
    configure_logging(TelemetrySettings())
    assert not isinstance(root.handlers[0].formatter, JsonFormatter)
    assert root.level == logging.INFO
