"""One Controller's job list, shared by every reader in a process and asked for only when it may have changed.

A full ``GET jobs`` costs slurmrestd about 8 KB and 1 ms per job record: with 10,000 held jobs in Slurm it was an
80 MB answer that took 8-20 s (measured on 26.05, issue 16), and the operator asked for it on every node poll
while a node of its NodeSets was busy, in every metrics round and in every drain of a busy node. :class:`JobList`
keeps the last list and asks ``GET jobs?update_time=T``, which slurmctld answers with nothing when no job changed
since ``T`` (measured: 0-30 ms at 10,000 jobs), and it spaces full lists by :data:`SPACING` times what the last
one took, so at any size they use at most a tenth of slurmrestd's time. Readers that must not act on a list that
old (a forced scale-in cancels the jobs it names) ask with ``fresh=True``: one ``update_time`` request at least.

Concurrent readers share one request (a lock): sixteen drains at once cost one list, not sixteen.
"""

from __future__ import annotations

import asyncio
import time

from slinky.clients.slurm.client import SlurmApi
from slinky.clients.slurm.models import JobInfo

__all__ = ["SPACING", "JobList"]

SPACING = 10.0
"""Between two requests for the list, at least this many times what the last full list took."""


class JobList:
    """The job list of one slurmrestd, read with ``update_time`` and spaced by its cost.

    Args:
        client: The Controller's client.
        spacing: See :data:`SPACING`.
    """

    def __init__(self, client: SlurmApi, *, spacing: float = SPACING) -> None:
        self.client = client
        self.spacing = spacing
        self._jobs: list[JobInfo] | None = None
        self._last_update: int | None = None
        self._asked_at = -float("inf")
        """When the request that the cached list answers was sent (``time.monotonic``)."""
        self._full_seconds = 0.0
        self._lock = asyncio.Lock()
        self.full_lists = 0
        self.unchanged = 0
        """Requests answered "no change since update_time" (the cached list served)."""

    def age(self) -> float:
        """Seconds since the cached list's request was sent (infinite before the first)."""
        return time.monotonic() - self._asked_at

    async def read(self, max_age: float = 0.0, *, fresh: bool = False) -> list[JobInfo]:
        """The job list, no older than ``max_age`` seconds, or than ``spacing`` times the last full list's duration
        if that is longer; ``fresh``: no older than this call (a request is sent, cheap when nothing changed).

        Raises:
            SlurmError: The request failed; the cached list is kept for the next reader.
        """
        called = time.monotonic()
        async with self._lock:
            if self._jobs is not None:
                if fresh and self._asked_at >= called:
                    return self._jobs  # another reader's request, sent after this call began
                if not fresh and self.age() <= max(max_age, self.spacing * self._full_seconds):
                    return self._jobs
            update_time = None if self._jobs is None or self._last_update is None else self._last_update - 1
            asked = time.monotonic()
            page = await self.client.list_jobs(update_time)
            if page.changed or self._jobs is None:
                # last_update has one-second resolution and slurmctld answers "no change" when it equals
                # update_time: the next request asks from a second before it (see JobWatcher).
                self._jobs, self._last_update = page.jobs, page.last_update
                self._full_seconds = time.monotonic() - asked
                self.full_lists += 1
            else:
                self.unchanged += 1
            self._asked_at = asked
            return self._jobs
