"""Everything the runtime needs to start (or refresh) one daemon pod, decided from the agent's caches.

:func:`plan` reads the pod, its daemon container, the ConfigMaps and Secrets its volumes and env name, and
the pods and Services its /etc/hosts lists, and returns a :class:`Launch`: pure data plus the two things that
depend on the pod's address (the daemon's argv, for slurmd's ``NodeAddr``; the hosts file). A missing
ConfigMap, Secret or key raises ``pod_volumes.MissingSource`` (the pod waits, as a kubelet's would, with
``CreateContainerConfigError``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from slinky.dev import daemons, pod_dns, pod_volumes
from slinky.dev import slurmd_spec as spec

Obj = dict[str, Any]


@dataclasses.dataclass(frozen=True)
class Launch:
    pod: Obj
    daemon: daemons.Daemon
    container: Obj
    env: Mapping[str, str]
    volumes: Sequence[pod_volumes.Volume]
    mounts: Sequence[pod_volumes.Mount]
    peers: Sequence[Obj]
    services: Sequence[Obj]
    extra_hosts: Sequence[tuple[str, str]]

    @property
    def user(self) -> str:
        return daemons.run_user(self.daemon, self.pod, self.container)

    @property
    def owner(self) -> str:
        return daemons.file_owner(self.daemon, self.user)

    def argv(self, address: str) -> list[str]:
        extra = spec.slurmd_args(self.container, address) if self.daemon.container == spec.CONTAINER_NAME else ()
        return daemons.argv(self.daemon, self.container, extra)

    def environment(self) -> dict[str, str]:
        """The container's env with the daemon's own on top (``SLURM_JWT=daemon`` must hold for slurmrestd)."""
        return {**self.env, **self.daemon.env}

    def hosts(self, address: str) -> str:
        return pod_dns.hosts_file(self.pod, address, self.peers, self.services, self.extra_hosts)


def plan(
    pod: Obj,
    configmaps: pod_volumes.Lookup,
    secrets: pod_volumes.Lookup,
    peers: Sequence[Obj],
    services: Sequence[Obj],
    extra_hosts: Sequence[tuple[str, str]] = (),
) -> Launch:
    """The launch of a pod that has a daemon container.

    Raises:
        ValueError: the pod has no daemon container.
        pod_volumes.MissingSource: a ConfigMap, Secret or key it needs is missing.
        pod_volumes.VolumeError: a volume or env source the agent does not emulate.
    """
    found = daemons.daemon_container(pod)
    if found is None:
        raise ValueError("the pod has no daemon container")
    daemon, container = found
    namespace = str(pod["metadata"]["namespace"])
    volumes, mounts = pod_volumes.plan(pod, container, configmaps, secrets)
    env = pod_volumes.env(container, namespace, configmaps, secrets)
    return Launch(pod, daemon, container, env, volumes, mounts, list(peers), list(services), list(extra_hosts))
