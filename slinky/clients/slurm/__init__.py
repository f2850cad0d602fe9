"""Typed async client for slurmrestd (API v0.0.44 by default; v0.0.42-v0.0.45 selectable).

Start with :class:`SlurmClient` (``SlurmClient.from_settings(Settings().slurm)``), watch jobs with
:class:`JobWatcher`, and test with :class:`FakeSlurmClient`. Errors live in :mod:`slinky.clients.errors`.
"""

from slinky.clients.slurm.auth import StaticToken, TokenFile, TokenProvider
from slinky.clients.slurm.client import ALLOCATE_NOT_NOW_NUMBERS, JobsPage, NodesPage, SlurmApi, SlurmClient
from slinky.clients.slurm.fake import FakeSlurmClient
from slinky.clients.slurm.models import (
    ControllerPing,
    Diag,
    JobDescMsg,
    JobInfo,
    Node,
    NodeResourceLayout,
    NodeUpdate,
    Partition,
    Reservation,
    ReservationDesc,
)
from slinky.clients.slurm.versions import DEFAULT_API_VERSION, SUPPORTED_API_VERSIONS, Feature
from slinky.clients.slurm.watcher import JobEvent, JobEventType, JobWatcher

__all__ = [
    "ALLOCATE_NOT_NOW_NUMBERS",
    "DEFAULT_API_VERSION",
    "SUPPORTED_API_VERSIONS",
    "ControllerPing",
    "Diag",
    "FakeSlurmClient",
    "Feature",
    "JobDescMsg",
    "JobEvent",
    "JobEventType",
    "JobInfo",
    "JobWatcher",
    "JobsPage",
    "Node",
    "NodeResourceLayout",
    "NodeUpdate",
    "NodesPage",
    "Partition",
    "Reservation",
    "ReservationDesc",
    "SlurmApi",
    "SlurmClient",
    "StaticToken",
    "TokenFile",
    "TokenProvider",
]
