"""The verdict on slurmdbd's answer: the database down while slurmdbd runs is named, with slurmdbd's words."""

from __future__ import annotations

from slinky.clients.errors import SlurmErrorEntry, SlurmUnavailable
from slinky.clients.slurm.client import map_error
from slinky.operator.accounting_health import UNREACHABLE, database_verdict

DB = "slurm@mariadb:3306/slurm_acct_db"


def _recorded_502() -> SlurmUnavailable:
    """What slurmrestd 26.05 answered to GET /slurmdb/v0.0.44/diag with MariaDB stopped (recorded)."""
    entry = SlurmErrorEntry(
        error_number=7000,
        error="Unable to connect to database",
        description="Failed to open slurmdbd connection",
        source="openapi_get_db_conn",
    )
    err = map_error("GET", "/slurmdb/v0.0.44/diag", 502, [entry])
    assert isinstance(err, SlurmUnavailable)
    return err


def test_an_answer_is_ready() -> None:
    verdict = database_verdict(pod="slurm-accounting-0", database=DB, via="RestApi x", error=None)
    assert verdict is not None and (verdict.status, verdict.reason) == ("True", "SlurmdbdReady")
    assert DB in verdict.message


def test_error_7000_is_the_database_unreachable_with_what_slurmctld_holds() -> None:
    verdict = database_verdict(pod="slurm-accounting-0", database=DB, via="RestApi x", error=_recorded_502(), queued=6)
    assert verdict is not None and (verdict.status, verdict.reason) == ("False", UNREACHABLE)
    assert "Unable to connect to database" in verdict.message and DB in verdict.message
    assert "holds 6 message(s)" in verdict.message
    assert "holds" not in verdict.event and verdict.event in verdict.message, "the Event does not change per check"


def test_unknown_queue_still_says_records_wait() -> None:
    verdict = database_verdict(pod="p", database=DB, via="v", error=_recorded_502(), queued=None)
    assert verdict is not None and "queues job records" in verdict.message


def test_slurmrestd_not_answering_says_nothing_about_the_database() -> None:
    err = SlurmUnavailable("GET /slurmdb/v0.0.44/diag: slurmrestd unreachable (ConnectError)")
    assert database_verdict(pod="p", database=DB, via="v", error=err) is None
