"""Cluster DNS for the daemon pods, as an /etc/hosts file per pod (docs/dev-stack.md, "Daemon pods").

The dev stack has no CoreDNS and no kube-proxy, so the node agent writes each daemon pod's /etc/hosts with
the names a pod of a real cluster resolves, each pointing at a pod address (pod addresses are routable from
every pod and from the host; ClusterIPs are not, here):

* a Service with a selector: ``<svc>.<ns>.svc.cluster.local``, ``<svc>.<ns>.svc``, ``<svc>.<ns>`` and, from the
  Service's own namespace, ``<svc>``, at the address of one of its pods (a ready one first, by name, as a
  ClusterIP would pick one of its endpoints; not-ready ones only with ``publishNotReadyAddresses``);
* a pod with ``hostname`` and ``subdomain`` (a headless Service's member, as a StatefulSet or NodeSet pod):
  ``<hostname>.<subdomain>.<ns>.svc.cluster.local`` and its shorter forms, and the bare ``<hostname>`` from
  pods whose DNS search list holds ``<subdomain>.<ns>.svc.cluster.local`` (upstream puts the workers'
  domain there, so ``cpu-0`` resolves from a login pod) or that share that subdomain;
* the pod itself, and the extra names the agent is given (the dev stack's own slurmctld at the bridge).

Pure: the agent passes its caches of pods and Services, and rewrites the file when the text changes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

Obj = Mapping[str, Any]

CLUSTER_DOMAIN: Final = "cluster.local"


def _meta(obj: Obj) -> Mapping[str, Any]:
    return obj.get("metadata") or {}


def _ready(pod: Obj) -> bool:
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in (pod.get("status") or {}).get("conditions") or []
    )


def _address(pod: Obj) -> str:
    status = pod.get("status") or {}
    return str(status.get("podIP") or "") if status.get("phase") == "Running" else ""


def _matches(selector: Mapping[str, str], labels: Mapping[str, str]) -> bool:
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def service_address(service: Obj, pods: Iterable[Obj]) -> str | None:
    """The address a Service's name resolves to here: one of its pods' (ready first, then by name)."""
    spec = service.get("spec") or {}
    selector = spec.get("selector") or {}
    namespace = _meta(service).get("namespace")
    candidates = [
        p
        for p in pods
        if _meta(p).get("namespace") == namespace
        and not _meta(p).get("deletionTimestamp")
        and _address(p)
        and _matches(selector, _meta(p).get("labels") or {})
    ]
    ready = sorted((p for p in candidates if _ready(p)), key=lambda p: str(_meta(p).get("name")))
    if ready:
        return _address(ready[0])
    if spec.get("publishNotReadyAddresses"):
        rest = sorted(candidates, key=lambda p: str(_meta(p).get("name")))
        return _address(rest[0]) if rest else None
    return None


def _forms(name: str, namespace: str, same_namespace: bool) -> list[str]:
    """The names a lookup from a pod can use for `<name>.<namespace>` (search list `<ns>.svc.cluster.local`,
    `svc.cluster.local`, `cluster.local`)."""
    out = [f"{name}.{namespace}.svc.{CLUSTER_DOMAIN}", f"{name}.{namespace}.svc", f"{name}.{namespace}"]
    if same_namespace:
        out.append(name)
    return out


def hosts_file(
    pod: Obj,
    address: str,
    pods: Iterable[Obj],
    services: Iterable[Obj],
    extra: Sequence[tuple[str, str]] = (),
) -> str:
    """The /etc/hosts text for `pod` at `address` (its own pod address)."""
    meta, spec = _meta(pod), pod.get("spec") or {}
    namespace = str(meta.get("namespace", ""))
    searches = set(((spec.get("dnsConfig") or {}).get("searches")) or [])
    own_subdomain = spec.get("subdomain")
    if own_subdomain:
        searches.add(f"{own_subdomain}.{namespace}.svc.{CLUSTER_DOMAIN}")
    lines: dict[str, list[str]] = {}

    def add(ip: str, names: Iterable[str]) -> None:
        for name in names:
            if name and all(name not in v for v in lines.values()):
                lines.setdefault(ip, []).append(name)

    add("127.0.0.1", ["localhost"])
    hostname = str(spec.get("hostname") or meta.get("name") or "")
    own = [hostname]
    if own_subdomain:
        own = [*(f"{hostname}.{n}" for n in _forms(str(own_subdomain), namespace, True)), hostname]
    add(address, own)
    for ip, name in extra:
        add(ip, [name])
    pods = list(pods)
    for other in sorted(pods, key=lambda p: (str(_meta(p).get("namespace")), str(_meta(p).get("name")))):
        ospec, ometa = other.get("spec") or {}, _meta(other)
        ip = _address(other)
        sub, host = ospec.get("subdomain"), ospec.get("hostname")
        if not ip or not sub or not host or ometa.get("deletionTimestamp"):
            continue
        ons = str(ometa.get("namespace", ""))
        names = [f"{host}.{n}" for n in _forms(str(sub), ons, ons == namespace)]
        if f"{sub}.{ons}.svc.{CLUSTER_DOMAIN}" in searches:
            names.append(str(host))
        add(ip, names)
    for service in sorted(services, key=lambda s: (str(_meta(s).get("namespace")), str(_meta(s).get("name")))):
        endpoint = service_address(service, pods)
        if endpoint:
            sns = str(_meta(service).get("namespace", ""))
            add(endpoint, _forms(str(_meta(service).get("name")), sns, sns == namespace))
    return "".join(f"{ip} {' '.join(names)}\n" for ip, names in lines.items())
