"""``slinky slurm ping|jobs|job ID|nodes|partitions``: look at Slurm through the client.

Tables by default, JSON with ``--json``. Settings come from ``slinky.config.Settings().slurm``
(``SLURM_REST_URL``, ``SLURM_JWT_FILE`` or ``SLINKY_SLURM__*``). Exit codes: 0 ok, 1 a Slurm error,
2 not found.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from pydantic import BaseModel

from slinky.clients.errors import SlinkyError, SlurmNotFound
from slinky.clients.slurm.client import SlurmClient

__all__ = ["add_parser", "render_table"]

_Fetch = Callable[[SlurmClient, argparse.Namespace], Awaitable[Any]]


def add_parser(sub: Any) -> None:
    """Add the ``slurm`` area to the top-level sub-parsers."""
    parser: argparse.ArgumentParser = sub.add_parser("slurm", help="query Slurm through slurmrestd")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    commands = parser.add_subparsers(dest="slurm_command", required=True)
    for name, help_text, fetch, render in (
        ("ping", "controller status", _fetch_ping, _render_ping),
        ("jobs", "all jobs", _fetch_jobs, _render_jobs),
        ("nodes", "all nodes", _fetch_nodes, _render_nodes),
        ("partitions", "all partitions", _fetch_partitions, _render_partitions),
    ):
        command = commands.add_parser(name, help=help_text)
        command.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help="print JSON")
        command.set_defaults(handler=_handler(fetch, render))
    job = commands.add_parser("job", help="one job")
    job.add_argument("job_id", type=int)
    job.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help="print JSON")
    job.set_defaults(handler=_handler(_fetch_job, _render_jobs))


def _handler(fetch: _Fetch, render: Callable[[Any], str]) -> Callable[[argparse.Namespace], int]:
    def handle(args: argparse.Namespace) -> int:
        try:
            result = asyncio.run(_run(fetch, args))
        except SlurmNotFound as exc:
            print(f"not found: {exc}", file=sys.stderr)
            return 2
        except SlinkyError as exc:
            print(f"error: {type(exc).__name__}: {exc}", file=sys.stderr)
            return 1
        if getattr(args, "json", False):
            print(json.dumps(_jsonable(result), indent=2))
        else:
            print(render(result))
        return 0

    return handle


async def _run(fetch: _Fetch, args: argparse.Namespace) -> Any:
    from slinky.config import Settings

    async with SlurmClient.from_settings(Settings().slurm, read_retries=0) as client:
        return await fetch(client, args)


def _jsonable(result: Any) -> Any:
    if isinstance(result, BaseModel):
        return result.model_dump(mode="json")
    if isinstance(result, list):
        return [_jsonable(item) for item in result]
    return result


async def _fetch_ping(client: SlurmClient, args: argparse.Namespace) -> Any:
    return await client.ping()


async def _fetch_jobs(client: SlurmClient, args: argparse.Namespace) -> Any:
    return (await client.list_jobs()).jobs


async def _fetch_job(client: SlurmClient, args: argparse.Namespace) -> Any:
    return [await client.get_job(args.job_id)]


async def _fetch_nodes(client: SlurmClient, args: argparse.Namespace) -> Any:
    return await client.list_nodes()


async def _fetch_partitions(client: SlurmClient, args: argparse.Namespace) -> Any:
    return await client.list_partitions()


def render_table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """Left-aligned columns separated by two spaces, like ``squeue``."""
    cells = [[str(h) for h in headers], *[[str(c) for c in row] for row in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells)


def _render_ping(pings: Any) -> str:
    rows = [(p.hostname, p.mode, p.pinged, p.responding, p.latency) for p in pings]
    return render_table(("HOST", "MODE", "PINGED", "RESPONDING", "LATENCY_US"), rows)


def _render_jobs(jobs: Any) -> str:
    rows = [
        (j.job_id, j.name, j.partition, "+".join(j.job_state), j.state_reason, j.node_count or "", j.nodes,
         j.admin_comment[:40])
        for j in jobs
    ]  # fmt: skip
    return render_table(("JOBID", "NAME", "PARTITION", "STATE", "REASON", "NODES", "NODELIST", "ADMIN_COMMENT"), rows)


def _render_nodes(nodes: Any) -> str:
    rows = [
        (n.name, "+".join(n.state), n.cpus, n.alloc_cpus, n.real_memory, ",".join(n.partitions), n.address,
         n.reason)
        for n in nodes
    ]  # fmt: skip
    return render_table(("NODE", "STATE", "CPUS", "ALLOC", "MEMORY_MB", "PARTITIONS", "ADDRESS", "REASON"), rows)


def _render_partitions(partitions: Any) -> str:
    rows = [(p.name, "+".join(sorted(p.states)), p.total_nodes, p.total_cpus, p.node_list) for p in partitions]
    return render_table(("PARTITION", "STATE", "NODES", "CPUS", "NODELIST"), rows)
