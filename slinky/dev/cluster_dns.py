"""Cluster DNS for the real nodes: Debian's dnsmasq answers, this process feeds it from the API.

Debian 12 has no CoreDNS. dnsmasq serves ``cluster.local`` from a hosts file (``--addn-hosts``), which it reads
again on SIGHUP; this process list-watches Services and Endpoints, writes that file when a name or address
changes, and signals dnsmasq. Names, as Kubernetes' DNS specification has them:

* ``<service>.<namespace>.svc.cluster.local``: the ClusterIP; for a headless Service, every ready endpoint;
* ``<hostname>.<service>.<namespace>.svc.cluster.local``: an endpoint with a hostname (a StatefulSet's pod
  ``<pod>.<service>``, whose ``hostname`` and ``subdomain`` the endpoints controller copies).

Usage: ``python -m slinky.dev.cluster_dns --kubeconfig K --hosts FILE --dnsmasq-pid-file P``.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from slinky.clients.kube import KubeClient

logger = logging.getLogger("slinky.dev.cluster_dns")
DOMAIN = "cluster.local"
Obj = Mapping[str, Any]


def records(services: Iterable[Obj], endpoints: Iterable[Obj], domain: str = DOMAIN) -> list[tuple[str, str]]:
    """(address, name) pairs for every Service and named endpoint, sorted: the hosts file's lines."""
    by_key = {(e["metadata"]["namespace"], e["metadata"]["name"]): e for e in endpoints}
    found: set[tuple[str, str]] = set()
    for svc in services:
        ns, name = svc["metadata"]["namespace"], svc["metadata"]["name"]
        fqdn = f"{name}.{ns}.svc.{domain}"
        cluster_ip = (svc.get("spec") or {}).get("clusterIP") or ""
        if cluster_ip and cluster_ip != "None":
            found.add((cluster_ip, fqdn))
        for subset in (by_key.get((ns, name)) or {}).get("subsets") or []:
            for address in subset.get("addresses") or []:
                ip = address.get("ip")
                if not ip:
                    continue
                if cluster_ip == "None":
                    found.add((ip, fqdn))
                if address.get("hostname"):
                    found.add((ip, f"{address['hostname']}.{fqdn}"))
    return sorted(found)


def hosts_file(pairs: Iterable[tuple[str, str]]) -> str:
    return "".join(f"{ip} {name}\n" for ip, name in pairs)


class Feeder:
    def __init__(self, kube: KubeClient, hosts: Path, pid_file: Path) -> None:
        self.kube = kube
        self.hosts = hosts
        self.pid_file = pid_file
        self.services: dict[tuple[str, str], Obj] = {}
        self.endpoints: dict[tuple[str, str], Obj] = {}
        self.changed = asyncio.Event()
        self.written = ""

    async def follow(self, path: str, into: dict[tuple[str, str], Obj]) -> None:
        async for kind, obj in self.kube.list_watch(path):
            if kind == "SYNC":
                into.clear()
                for item in obj["items"]:
                    into[(item["metadata"]["namespace"], item["metadata"]["name"])] = item
            elif kind == "DELETED":
                into.pop((obj["metadata"]["namespace"], obj["metadata"]["name"]), None)
            else:
                into[(obj["metadata"]["namespace"], obj["metadata"]["name"])] = obj
            self.changed.set()

    def write(self) -> bool:
        text = hosts_file(records(self.services.values(), self.endpoints.values()))
        if text == self.written:
            return False
        tmp = self.hosts.with_suffix(".tmp")
        tmp.write_text(text)
        os.replace(tmp, self.hosts)
        self.written = text
        try:
            os.kill(int(self.pid_file.read_text().split()[0]), signal.SIGHUP)
        except (OSError, ValueError, IndexError) as err:
            logger.warning("dnsmasq not told (%s): it reads the file at its next start", err)
        return True

    async def run(self) -> None:
        tasks = [
            asyncio.create_task(self.follow("/api/v1/services", self.services)),
            asyncio.create_task(self.follow("/api/v1/endpoints", self.endpoints)),
        ]
        try:
            while True:
                await self.changed.wait()
                await asyncio.sleep(0.1)  # a burst of changes, one write
                self.changed.clear()
                if self.write():
                    logger.info("%d names", self.written.count("\n"))
        finally:
            for task in tasks:
                task.cancel()


async def _main(args: argparse.Namespace) -> None:
    async with KubeClient.from_kubeconfig(args.kubeconfig) as kube:
        await Feeder(kube, Path(args.hosts), Path(args.dnsmasq_pid_file)).run()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--hosts", required=True)
    parser.add_argument("--dnsmasq-pid-file", required=True)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    asyncio.run(_main(args))


if __name__ == "__main__":
    main()
