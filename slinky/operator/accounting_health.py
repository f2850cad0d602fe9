"""Is a managed Accounting's database reachable? The verdict on what slurmrestd's slurmdbd plugin answered.

slurmdbd keeps running, and its pod stays ready, while its database is down; slurmctld then queues the
records for slurmdbd (``dbd_agent_queue_size`` of ``diag``) and sends them once it is back. So the pod alone
cannot tell. The operator asks slurmdbd for its statistics (``GET /slurmdb/<version>/diag``) through a RestApi
of a Controller that uses the Accounting: slurmdbd needs its database to answer, and says so when it cannot
(error 7000, "Unable to connect to database", measured on 26.05 with MariaDB stopped).
"""

from __future__ import annotations

from dataclasses import dataclass

from slinky.clients.errors import SlurmError

DB_CONNECTION_ERROR = 7000
"""ESLURM_DB_CONNECTION: slurmrestd could not get an answer from slurmdbd, or slurmdbd none from its database."""
CONNECTED = "SlurmdbdReady"
UNREACHABLE = "DatabaseUnreachable"


@dataclass(frozen=True)
class DatabaseVerdict:
    """``Ready`` of the Accounting when its slurmdbd pod is ready."""

    status: str
    reason: str
    message: str
    event: str = ""
    """The message without what changes from one check to the next (the queue's length): the Warning Event's,
    posted once while the problem stays."""


def database_verdict(
    *,
    pod: str,
    database: str,
    via: str,
    error: SlurmError | None,
    queued: int | None = None,
) -> DatabaseVerdict | None:
    """The verdict on one slurmdbd check.

    Args:
        pod: The slurmdbd pod's name.
        database: ``user@host:port/database`` as the spec names it.
        via: Who was asked (e.g. ``RestApi slinky/slurm``).
        error: What the check raised; None when slurmdbd answered.
        queued: Messages slurmctld holds for slurmdbd (``dbd_agent_queue_size``), when known.

    Returns:
        None when the check says nothing about the database (slurmrestd itself did not answer): the caller
        keeps what the pod says.
    """
    if error is None:
        return DatabaseVerdict(
            "True", CONNECTED, f"slurmdbd pod {pod} is ready and answers from its database {database} (asked {via})"
        )
    if error.error_number != DB_CONNECTION_ERROR:
        return None
    held = (
        f"; slurmctld holds {queued} message(s) for slurmdbd, sent once the database is back"
        if queued is not None
        else "; slurmctld queues job records for slurmdbd until the database is back"
    )
    said = (
        f"slurmdbd pod {pod} runs, but accounting does not answer: {error.error or 'error 7000'} "
        f"(error {DB_CONNECTION_ERROR}, asked {via}; database {database})"
    )
    return DatabaseVerdict("False", UNREACHABLE, said + held, said)
