"""Pure builders of a managed Slurm cluster's config files: slurm.conf, cgroup.conf and slurmdbd.conf.

This module owns the text the operator writes for a managed Controller (its `<name>-config` ConfigMap) and
for an Accounting (slurmdbd.conf), the checks that keep user strings from adding lines or keys to those
files, and the hash that rolls the pods when a file changes. Keys, their order, paths and ports follow
upstream's `internal/builder/controllerbuilder/controller_config.go` and
`internal/builder/accountingbuilder/accounting_config.go`.

Everything here is pure: parsed objects in, strings out, no I/O and no Kubernetes calls. The caller reads the
referenced ConfigMaps and the database password Secret and passes what it found (`ConfFiles`, `password`).

How Slurm reads these files (`src/common/parse_config.c`), which the checks below are built on: a line is
`Key=Value` (several pairs on NodeName/PartitionName/NodeSet lines); an unquoted value ends at whitespace, a
`"quoted"` one may hold blanks but no `"`; an unescaped `#` starts a comment anywhere, even inside quotes;
a backslash escapes the next character and an odd run of trailing backslashes joins the next line; keys are
case-insensitive and a repeated key silently wins. So a user string with a newline, a `#`, a backslash or
an operator key could change settings the operator relies on, and is refused.
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from slinky.operator.api.accounting import Accounting
from slinky.operator.api.controller import Controller
from slinky.operator.api.nodeset import NodeSet
from slinky.operator.pods import SLURMCTLD_PORT as SLURMCTLD_PORT
from slinky.operator.pods import SLURMD_PORT as SLURMD_PORT
from slinky.operator.pods import slurm_nodeset_name as slurm_nodeset_name

# Ports, users and in-pod paths. The pods the operator builds mount and listen on exactly these.

SLURMDBD_PORT = 6819
"""slurmdbd's port: DbdPort, AccountingStoragePort, and the Accounting Service."""
SLURMRESTD_PORT = 6820
"""slurmrestd's port (the RestApi Service); not part of any file here."""

SLURM_USER = "slurm"
"""SlurmUser: slurmctld and slurmdbd run as this user (uid 401 in upstream's images)."""
SLURMD_USER = "root"
"""SlurmdUser."""

SLURM_ETC_DIR = "/etc/slurm"
"""Where every daemon reads its config files, keys and PrologSlurmctld/EpilogSlurmctld scripts."""
SLURM_KEY_PATH = f"{SLURM_ETC_DIR}/slurm.key"
"""The auth/slurm + cred/slurm key. It is Slurm's default location, so no file names it (as upstream)."""
JWT_KEY_PATH = f"{SLURM_ETC_DIR}/jwt.key"
"""The auth/jwt HS256 key: `AuthAltParameters=jwt_key=<path>`."""
JWKS_PATH = f"{SLURM_ETC_DIR}/jwks.json"
"""The auth/jwt JWKS, named in AuthAltParameters when the object has a `jwksKeyRef`."""

SLURM_LOG_DIR = "/var/log/slurm"
"""The logfile sidecar's directory: each log path is a socket it relays to its stdout."""
SLURMCTLD_LOG_PATH = f"{SLURM_LOG_DIR}/slurmctld.log"
"""SlurmctldLogFile, and SlurmSchedLogFile too (upstream sends both to the one sidecar)."""
SLURMD_LOG_PATH = f"{SLURM_LOG_DIR}/slurmd.log"
"""SlurmdLogFile."""
SLURMDBD_LOG_PATH = "/dev/null"
"""slurmdbd.conf LogFile: slurmdbd runs in the foreground and logs to stderr."""
SLURMCTLD_SPOOL_DIR = "/var/spool/slurmctld"
"""The save-state volume's parent: StateSaveLocation is `<this>/<ClusterName>`."""
SLURMD_SPOOL_DIR = "/var/spool/slurmd"
"""SlurmdSpoolDir."""

MAX_NODE_COUNT = 1024
"""MaxNodeCount: dynamic (`slurmd -Z`) nodes need a non-zero value. extraConf may raise it."""

SLURM_CONF = "slurm.conf"
CGROUP_CONF = "cgroup.conf"
SLURMDBD_CONF = "slurmdbd.conf"

CLUSTER_NAME_MAX_LEN = 40
"""Longest ClusterName. slurm.conf(5) ClusterName: 40 characters at most, because slurmdbd prefixes its
MySQL/MariaDB table names with it (`<cluster>_assoc_usage_month_table` must fit the 64-character limit);
upstream's Controller webhook (`internal/webhook/controller_webhook.go`) denies longer names."""

SLURMCTLD_PARAMETERS = ("enable_configless", "reconfig_on_restart")
"""SlurmctldParameters the operator sets: slurmd and the login pods fetch their config from slurmctld."""
AUTH_INFO = ("use_client_ids",)
"""AuthInfo the operator sets (slurm.conf and slurmdbd.conf)."""

SLURM_CONF_OWNED_KEYS = frozenset(
    {
        "ClusterName",
        "SlurmUser",
        "SlurmctldHost",
        "SlurmctldPort",
        "SlurmctldAddr",
        "StateSaveLocation",
        "SlurmdUser",
        "SlurmdPort",
        "SlurmdSpoolDir",
        "SlurmctldLogFile",
        "SlurmSchedLogFile",
        "SlurmdLogFile",
        "AuthType",
        "CredType",
        "AuthAltTypes",
        "AccountingStorageType",
        "AccountingStorageHost",
        "AccountingStoragePort",
        # Older spellings of the keys above; Slurm may still read them as the same setting.
        "ControlMachine",
        "ControlAddr",
        "BackupController",
        "BackupAddr",
        "CryptoType",
    }
)
"""slurm.conf keys only the operator sets: identity, addresses, ports, paths the pods mount, authentication
and the accounting endpoint (set through an Accounting, not extraConf). A Controller's extraConf naming one
(in any letter case) is refused."""

SLURM_CONF_MERGED_KEYS = frozenset({"SlurmctldParameters", "AuthInfo", "AuthAltParameters"})
"""slurm.conf keys whose value is a comma-separated option list: extraConf may set them, and its options are
merged with the operator's (an option the operator sets, such as `jwt_key=`, keeps the operator's value)."""

SLURMDBD_CONF_OWNED_KEYS = frozenset(
    {
        "DbdHost",
        "DbdAddr",
        "DbdPort",
        "SlurmUser",
        "AuthType",
        "AuthAltTypes",
        "StorageType",
        "StorageHost",
        "StoragePort",
        "StorageUser",
        "StorageLoc",
        "StoragePass",
    }
)
"""slurmdbd.conf keys only the operator sets; an Accounting's extraConf naming one is refused."""

SLURMDBD_CONF_MERGED_KEYS = frozenset({"AuthInfo", "AuthAltParameters"})
"""slurmdbd.conf option-list keys merged like `SLURM_CONF_MERGED_KEYS`."""

PARTITION_OWNED_KEYS = frozenset({"PartitionName", "Nodes"})
"""Keys of a NodeSet's partition line that the operator sets; `spec.partition.config` may not repeat them."""


@dataclass(frozen=True)
class ConfFiles:
    """File names (the data keys) the caller found in a Controller's referenced ConfigMaps.

    `config` from `configFileRefs` (files put in /etc/slurm), the others from the four script refs. Each
    tuple is kept sorted, so equal sets of names give equal objects and the same slurm.conf.
    """

    config: tuple[str, ...] = ()
    prolog: tuple[str, ...] = ()
    epilog: tuple[str, ...] = ()
    prolog_slurmctld: tuple[str, ...] = ()
    epilog_slurmctld: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for item in dataclasses.fields(self):
            object.__setattr__(self, item.name, tuple(sorted(getattr(self, item.name))))


_FILE_FIELDS = {
    "config": "spec.configFileRefs",
    "prolog": "spec.prologScriptRefs",
    "epilog": "spec.epilogScriptRefs",
    "prolog_slurmctld": "spec.prologSlurmctldScriptRefs",
    "epilog_slurmctld": "spec.epilogSlurmctldScriptRefs",
}


@dataclass(frozen=True)
class ConfProblem:
    """One input that cannot go into a config file: which object, which JSON field, and what to fix."""

    kind: str
    name: str
    field: str
    message: str

    def __str__(self) -> str:
        return f"{self.kind}/{self.name}: {self.field}: {self.message}"


class ConfError(ValueError):
    """Raised by the builders when their input has problems; `problems` lists every one of them."""

    def __init__(self, problems: Sequence[ConfProblem]) -> None:
        self.problems = tuple(problems)
        super().__init__("; ".join(str(p) for p in self.problems))


# Names and addresses, as upstream derives them from the objects.


def _meta(obj: Controller | NodeSet | Accounting, key: str) -> str:
    return str(obj.metadata.get(key) or "")


def _namespace(obj: Controller | NodeSet | Accounting) -> str:
    return _meta(obj, "namespace") or "default"


def cluster_name(controller: Controller) -> str:
    """Slurm's ClusterName: `spec.clusterName`, else upstream's default `<namespace>_<name>`."""
    return controller.spec.cluster_name or f"{_namespace(controller)}_{_meta(controller, 'name')}"


def slurmctld_replicas(controller: Controller) -> int:
    """How many slurmctld run: 1, plus `ha.backups` (default 1) with `ha.enabled`, as upstream's `Replicas()`."""
    ha = controller.spec.ha
    if not ha.enabled:
        return 1
    return 1 + max(ha.backups if ha.backups is not None else 1, 0)


def _slurmctld_hosts(controller: Controller) -> list[str]:
    """`<pod>(<address>)` per slurmctld replica: the StatefulSet pod `<name>-controller-<i>` (its hostname) and
    its stable DNS name under the headless `<name>-controller-internal` Service."""
    base = f"{_meta(controller, 'name')}-controller"
    namespace = _namespace(controller)
    return [f"{base}-{i}({base}-{i}.{base}-internal.{namespace})" for i in range(slurmctld_replicas(controller))]


def _slurmctld_addr(controller: Controller) -> str:
    return f"{_meta(controller, 'name')}-controller.{_namespace(controller)}"


def _accounting_endpoint(accounting: Accounting) -> tuple[str, int]:
    """Where slurmctld reaches slurmdbd: the external one, else the Accounting's Service `<name>-accounting`."""
    ext = accounting.spec.external_config
    if accounting.spec.external and ext is not None:
        return ext.host, ext.port
    return f"{_meta(accounting, 'name')}-accounting", SLURMDBD_PORT


def _nodeset_name_field(nodeset: NodeSet) -> str:
    hostname = nodeset.spec.template.spec.get("hostname")
    return "spec.template.spec.hostname" if isinstance(hostname, str) and hostname.split() else "metadata.name"


# Slurm's line syntax, restricted to what is safe to write: see the module docstring.

_KEY = r"[A-Za-z0-9_.]+"
_PLAIN_VALUE = r'[^\s"#\\\x00-\x1f\x7f]+'
_QUOTED_VALUE = r'"[^"#\\\x00-\x1f\x7f]*"'
_ITEM = re.compile(rf"({_KEY})([-+*/]?)=({_QUOTED_VALUE}|{_PLAIN_VALUE})")
_BLANKS = re.compile(r"[ \t]*")
_CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_HOST = re.compile(r"[A-Za-z0-9._:-]+")
_FILE_NAME = re.compile(r"[A-Za-z0-9._-]+")
_CLUSTER_NAME = re.compile(r"[a-z0-9_-]+")


def _excerpt(text: str) -> str:
    return repr(text if len(text) <= 40 else text[:37] + "...")


def _parse_line(line: str) -> list[tuple[str, str]]:
    """The `(key, value)` items of one line, quotes removed; none for a blank or comment line.

    Raises:
        ValueError: saying what in the line is not `Key=Value` items (optionally followed by a comment).
    """
    bad = _CONTROL.search(line)
    if bad is not None:
        raise ValueError(f"contains a control character (U+{ord(bad.group()):04X}); only tabs are allowed")
    items: list[tuple[str, str]] = []
    pos = 0
    while True:
        blanks = _BLANKS.match(line, pos)
        pos = blanks.end() if blanks else pos
        if pos == len(line) or line[pos] == "#":
            return items
        match = _ITEM.match(line, pos)
        if match is None:
            raise ValueError(
                f"expected Key=Value at {_excerpt(line[pos:])} (a value may not hold '\"', '#' or '\\'; "
                "quote a value with blanks)"
            )
        end = match.end()
        if end < len(line) and line[end] not in " \t#":
            raise ValueError(f"unexpected {_excerpt(line[end:])} after {match.group()}")
        value = match.group(3)
        items.append((match.group(1), value[1:-1] if value.startswith('"') else value))
        pos = end


def _extra_conf_problems(
    kind: str, name: str, text: str, owned: frozenset[str], merged: frozenset[str]
) -> list[ConfProblem]:
    """Every line of an extraConf must be blank, a comment, or `Key=Value` items that set no owned key."""
    owned_lower = {key.lower() for key in owned}
    merged_lower = {key.lower() for key in merged}
    out: list[ConfProblem] = []
    for number, line in enumerate(text.split("\n"), start=1):
        try:
            items = _parse_line(line)
        except ValueError as err:
            out.append(ConfProblem(kind, name, "spec.extraConf", f"line {number}: {err}"))
            continue
        for key, value in items:
            if key.lower() in owned_lower:
                out.append(
                    ConfProblem(
                        kind,
                        name,
                        "spec.extraConf",
                        f"line {number}: {key} is set by the operator and cannot be set in extraConf",
                    )
                )
            elif key.lower() in merged_lower and re.search(r"\s", value):
                out.append(
                    ConfProblem(kind, name, "spec.extraConf", f"line {number}: {key} options cannot contain blanks")
                )
    return out


def _merged_lines(extra_conf: str, ours: Mapping[str, Sequence[str]]) -> list[str]:
    """For each option-list key that a (valid) extraConf sets: the operator's options plus the user's, whose
    option names the operator does not set, sorted. Written after extraConf, so this line is the one Slurm
    keeps (a repeated key wins)."""
    user: dict[str, str] = {}
    for line in extra_conf.split("\n"):
        for key, value in _parse_line(line):
            user[key.lower()] = value
    out: list[str] = []
    for key in sorted(ours):
        given = user.get(key.lower())
        if given is None:
            continue
        options = list(ours[key])
        seen = {option.split("=", 1)[0].lower() for option in options}
        for option in (part.strip() for part in given.split(",")):
            option_name = option.split("=", 1)[0].lower()
            if option and option_name not in seen:
                options.append(option)
                seen.add(option_name)
        out.append(f"{key}={','.join(sorted(options, key=lambda o: (o.lower(), o)))}")
    return out


def _token_problem(value: str, allowed: re.Pattern[str], allowed_text: str) -> str | None:
    """Why `value` cannot be written as one plain Slurm value, or None."""
    if not value:
        return "must not be empty"
    if "\n" in value or "\r" in value:
        return "must be a single line: remove the newline"
    if "#" in value:
        return "must not contain '#' (Slurm reads the rest of the line as a comment)"
    if not allowed.fullmatch(value):
        return f"must contain only {allowed_text}"
    return None


_NAME_TEXT = "letters, digits, '.', '_' and '-', starting with a letter or digit"
_HOST_TEXT = "letters, digits, '.', '_', ':' and '-'"


def _port_problem(port: int) -> str | None:
    return None if 1 <= port <= 65535 else f"must be a port number from 1 to 65535, not {port}"


def _cluster_name_problem(controller: Controller) -> str | None:
    name = cluster_name(controller)
    origin = "" if controller.spec.cluster_name else f" (the default <namespace>_<name>, {name!r}; set clusterName)"
    if len(name) > CLUSTER_NAME_MAX_LEN:
        return f"must be at most {CLUSTER_NAME_MAX_LEN} characters, not {len(name)}{origin}"
    if not _CLUSTER_NAME.fullmatch(name):
        return f"must contain only lowercase letters, digits, '_' and '-'{origin}"
    return None


def _controller_problems(controller: Controller, accounting: Accounting | None) -> list[ConfProblem]:
    name = _meta(controller, "name")

    def problem(field: str, message: str) -> ConfProblem:
        return ConfProblem("Controller", name, field, message)

    out: list[ConfProblem] = []
    if (msg := _token_problem(name, _NAME, _NAME_TEXT)) is not None:
        out.append(problem("metadata.name", msg))
    if (msg := _token_problem(_namespace(controller), _NAME, _NAME_TEXT)) is not None:
        out.append(problem("metadata.namespace", msg))
    if controller.spec.external:
        out.append(problem("spec.external", "an external Controller runs its own slurm.conf; none is rendered"))
    if (msg := _cluster_name_problem(controller)) is not None:
        out.append(problem("spec.clusterName", msg))
    ref = controller.spec.accounting_ref
    if accounting is not None and (ref is None or ref.name != _meta(accounting, "name")):
        out.append(problem("spec.accountingRef", f"does not name the Accounting {_meta(accounting, 'name')!r}"))
    extra = controller.spec.extra_conf or ""
    out += _extra_conf_problems("Controller", name, extra, SLURM_CONF_OWNED_KEYS, SLURM_CONF_MERGED_KEYS)
    return out


def _files_problems(controller: Controller, files: ConfFiles) -> list[ConfProblem]:
    name = _meta(controller, "name")
    out: list[ConfProblem] = []
    for attr, field in _FILE_FIELDS.items():
        names: tuple[str, ...] = getattr(files, attr)
        for file_name in names:
            msg = _token_problem(file_name, _FILE_NAME, "letters, digits, '.', '_' and '-'")
            if msg is None and file_name in {".", ".."}:
                msg = "must name a file"
            if msg is not None:
                out.append(ConfProblem("Controller", name, field, f"file name {_excerpt(file_name)} {msg}"))
        for dup in sorted({n for n in names if names.count(n) > 1}):
            out.append(ConfProblem("Controller", name, field, f"file name {dup!r} is given by several ConfigMaps"))
    if SLURM_CONF in files.config:
        out.append(ConfProblem("Controller", name, "spec.configFileRefs", "slurm.conf is written by the operator"))
    return out


def _partition_config_problems(config: str) -> list[str]:
    if "\n" in config or "\r" in config:
        return ["must be a single line: remove the newline"]
    if "#" in config:
        return ["must not contain '#' (Slurm reads the rest of the line as a comment)"]
    try:
        items = _parse_line(config)
    except ValueError as err:
        return [str(err)]
    owned = {key.lower() for key in PARTITION_OWNED_KEYS}
    return [f"{key} is set by the operator" for key, _ in items if key.lower() in owned]


def _nodeset_problems(controller: Controller, nodesets: Sequence[NodeSet]) -> list[ConfProblem]:
    out: list[ConfProblem] = []
    seen: dict[str, str] = {}
    for nodeset in nodesets:
        name = _meta(nodeset, "name")
        ref = nodeset.spec.controller_ref.name
        if ref != _meta(controller, "name"):
            message = f"names Controller {ref!r}, not {_meta(controller, 'name')!r}"
            out.append(ConfProblem("NodeSet", name, "spec.controllerRef.name", message))
        slurm_name = slurm_nodeset_name(nodeset)
        if (msg := _token_problem(slurm_name, _NAME, _NAME_TEXT)) is not None:
            out.append(ConfProblem("NodeSet", name, _nodeset_name_field(nodeset), f"Slurm NodeSet name {msg}"))
        elif slurm_name in seen:
            message = f"Slurm NodeSet name {slurm_name!r} is also NodeSet {seen[slurm_name]!r}'s"
            out.append(ConfProblem("NodeSet", name, _nodeset_name_field(nodeset), message))
        seen.setdefault(slurm_name, name)
        if nodeset.spec.partition.enabled and nodeset.spec.partition.config:
            for msg in _partition_config_problems(nodeset.spec.partition.config):
                out.append(ConfProblem("NodeSet", name, "spec.partition.config", msg))
    return out


def _endpoint_problems(accounting: Accounting) -> list[ConfProblem]:
    """What slurm.conf needs of an Accounting: a Service name, or a usable externalConfig."""
    name = _meta(accounting, "name")
    out: list[ConfProblem] = []
    if (msg := _token_problem(name, _NAME, _NAME_TEXT)) is not None:
        out.append(ConfProblem("Accounting", name, "metadata.name", msg))
    if not accounting.spec.external:
        return out
    ext = accounting.spec.external_config
    if ext is None:
        return [*out, ConfProblem("Accounting", name, "spec.externalConfig", "must be set when external is true")]
    if (msg := _token_problem(ext.host, _HOST, _HOST_TEXT)) is not None:
        out.append(ConfProblem("Accounting", name, "spec.externalConfig.host", msg))
    if (msg := _port_problem(ext.port)) is not None:
        out.append(ConfProblem("Accounting", name, "spec.externalConfig.port", msg))
    return out


def validate(
    controller: Controller,
    nodesets: Iterable[NodeSet],
    accounting: Accounting | None,
    files: ConfFiles | None = None,
) -> list[ConfProblem]:
    """Every problem that keeps `slurm_conf()` from rendering these objects; empty when there is none.

    Checked: names and the ClusterName (Slurm's characters, at most 40 long), that extraConf lines are blank,
    comments or `Key=Value` items setting no key in `SLURM_CONF_OWNED_KEYS`, that the configs of enabled
    partitions and the Slurm NodeSet names are one plain line, the file names, and that the objects refer to each other.
    """
    found = list(nodesets)
    out = _controller_problems(controller, accounting)
    out += _files_problems(controller, files or ConfFiles())
    out += _nodeset_problems(controller, found)
    if accounting is not None:
        out += _endpoint_problems(accounting)
    return out


def _section(title: str, lines: Iterable[str]) -> list[str]:
    body = list(lines)
    return ["#", f"### {title} ###", *body] if body else []


def _auth_alt_parameters(has_jwks: bool) -> tuple[str, ...]:
    return (f"jwt_key={JWT_KEY_PATH}", f"jwks={JWKS_PATH}") if has_jwks else (f"jwt_key={JWT_KEY_PATH}",)


def slurm_conf(
    controller: Controller,
    nodesets: Iterable[NodeSet],
    accounting: Accounting | None,
    files: ConfFiles,
) -> str:
    """slurm.conf of a managed Controller, in upstream's order.

    `nodesets` are the NodeSets whose controllerRef names the Controller (written sorted by name),
    `accounting` the Accounting its accountingRef names (None: no accounting), `files` the file names found in
    its referenced ConfigMaps. extraConf comes after everything the operator writes; only when it sets an
    option-list key (`SLURM_CONF_MERGED_KEYS`) does a merged line follow it, as upstream does.

    Raises:
        ConfError: `validate()` found problems; they are in its `problems`.
    """
    found = sorted(nodesets, key=lambda nodeset: _meta(nodeset, "name"))
    problems = validate(controller, found, accounting, files)
    if problems:
        raise ConfError(problems)
    name = cluster_name(controller)
    extra = (controller.spec.extra_conf or "").rstrip("\n")
    alt_parameters = _auth_alt_parameters(controller.spec.jwks_key_ref is not None)
    if accounting is None:
        accounting_lines = ["AccountingStorageType=accounting_storage/none"]
    else:
        host, port = _accounting_endpoint(accounting)
        accounting_lines = [
            "AccountingStorageType=accounting_storage/slurmdbd",
            f"AccountingStorageHost={host}",
            f"AccountingStoragePort={port}",
        ]
    nodeset_lines: list[str] = []
    for nodeset in found:
        slurm_name = slurm_nodeset_name(nodeset)
        nodeset_lines.append(f"NodeSet={slurm_name} Feature={slurm_name}")
        partition = nodeset.spec.partition
        if partition.enabled:
            tail = f" {partition.config.strip()}" if partition.config and partition.config.strip() else ""
            nodeset_lines.append(f"PartitionName={slurm_name} Nodes={slurm_name}{tail}")
    merged = {
        "SlurmctldParameters": SLURMCTLD_PARAMETERS,
        "AuthInfo": AUTH_INFO,
        "AuthAltParameters": alt_parameters,
    }
    lines = [
        *_section(
            "GENERAL",
            [
                f"ClusterName={name}",
                f"SlurmUser={SLURM_USER}",
                *(f"SlurmctldHost={host}" for host in _slurmctld_hosts(controller)),
                f"SlurmctldPort={SLURMCTLD_PORT}",
                f"SlurmctldAddr={_slurmctld_addr(controller)}",
                f"StateSaveLocation={SLURMCTLD_SPOOL_DIR}/{name}",
                f"SlurmdUser={SLURMD_USER}",
                f"SlurmdPort={SLURMD_PORT}",
                f"SlurmdSpoolDir={SLURMD_SPOOL_DIR}",
                f"MaxNodeCount={MAX_NODE_COUNT}",
            ],
        ),
        *_section(
            "LOGGING",
            [
                f"SlurmctldLogFile={SLURMCTLD_LOG_PATH}",
                f"SlurmSchedLogFile={SLURMCTLD_LOG_PATH}",
                f"SlurmdLogFile={SLURMD_LOG_PATH}",
            ],
        ),
        *_section(
            "PLUGINS & PARAMETERS",
            [
                "AuthType=auth/slurm",
                "CredType=cred/slurm",
                "AuthAltTypes=auth/jwt",
                f"AuthAltParameters={','.join(alt_parameters)}",
                f"AuthInfo={','.join(AUTH_INFO)}",
                f"SlurmctldParameters={','.join(SLURMCTLD_PARAMETERS)}",
                *(["MetricsType=metrics/openmetrics"] if controller.spec.metrics.enabled else []),
            ],
        ),
        *_section("ACCOUNTING", accounting_lines),
        *_section(
            "SLURMCTLD PROLOG & EPILOG",
            [
                *(f"PrologSlurmctld={SLURM_ETC_DIR}/{f}" for f in files.prolog_slurmctld),
                *(f"EpilogSlurmctld={SLURM_ETC_DIR}/{f}" for f in files.epilog_slurmctld),
            ],
        ),
        # Relative names: configless slurmd fetches these scripts from slurmctld with slurm.conf.
        *_section("PROLOG & EPILOG", [*(f"Prolog={f}" for f in files.prolog), *(f"Epilog={f}" for f in files.epilog)]),
        *_section("NODESET & PARTITION", nodeset_lines),
        *_section("EXTRA CONFIG", [extra] if extra else []),
        *_section("MERGED CONFIG", _merged_lines(extra, merged)),
    ]
    return "\n".join(lines) + "\n"


def default_cgroup_conf() -> str:
    """upstream's cgroup.conf, written when no `configFileRefs` file is named cgroup.conf.

    The caller decides whether to write it (see `wants_default_cgroup_conf`): daemons that run without
    cgroups, such as the dev stack's, need their own file (for instance `CgroupPlugin=disabled`) instead.
    """
    return "CgroupPlugin=cgroup/v2\nIgnoreSystemd=yes\n"


def wants_default_cgroup_conf(files: ConfFiles) -> bool:
    """Whether upstream would add `default_cgroup_conf()`: no referenced config file is named cgroup.conf."""
    return CGROUP_CONF not in files.config


def config_hash(files: Mapping[str, str]) -> str:
    """A short, stable sha256 of file names and contents (order-free), for the pods' config annotation."""
    digest = hashlib.sha256()
    for name in sorted(files):
        for part in (name, files[name]):
            data = part.encode()
            digest.update(len(data).to_bytes(8, "big"))
            digest.update(data)
    return digest.hexdigest()[:16]


def _slurm_value(text: str) -> str | None:
    """`text` written so that Slurm reads it back unchanged, or None when no spelling does.

    Backslashes and `#` are escaped; a value with blanks is quoted. Slurm cannot read a newline, a carriage
    return or a NUL inside a value, nor a `"` inside a quoted one or a value that is itself `"..."`.
    """
    if any(char in text for char in "\n\r\x00"):
        return None
    escaped = text.replace("\\", "\\\\").replace("#", "\\#")
    if any(char in text for char in " \t\v\f"):
        return None if '"' in text else f'"{escaped}"'
    if len(text) >= 2 and text[0] == text[-1] == '"' and text.count('"') == 2:
        return None
    return escaped


def validate_accounting(accounting: Accounting, password: str) -> list[ConfProblem]:
    """Every problem that keeps `slurmdbd_conf()` from rendering; empty when there is none."""
    name = _meta(accounting, "name")
    storage = accounting.spec.storage_config

    def problem(field: str, message: str) -> ConfProblem:
        return ConfProblem("Accounting", name, field, message)

    out: list[ConfProblem] = []
    if (msg := _token_problem(name, _NAME, _NAME_TEXT)) is not None:
        out.append(problem("metadata.name", msg))
    if accounting.spec.external:
        out.append(problem("spec.external", "an external Accounting runs its own slurmdbd; none is rendered"))
    if (msg := _token_problem(storage.host or "", _HOST, _HOST_TEXT)) is not None:
        out.append(problem("spec.storageConfig.host", msg))
    if (msg := _port_problem(storage.port)) is not None:
        out.append(problem("spec.storageConfig.port", msg))
    if (msg := _token_problem(storage.database, _FILE_NAME, "letters, digits, '.', '_' and '-'")) is not None:
        out.append(problem("spec.storageConfig.database", msg))
    if storage.username is not None and (msg := _token_problem(storage.username, _HOST, _HOST_TEXT)) is not None:
        out.append(problem("spec.storageConfig.username", msg))
    if _slurm_value(password) is None:
        # Never echo the password.
        message = "the password cannot be written to slurmdbd.conf: it holds a newline, carriage return or NUL"
        if not any(char in password for char in "\n\r\x00"):
            message = "the password cannot be written to slurmdbd.conf: it mixes '\"' with blanks or is '\"...\"'"
        out.append(problem("spec.storageConfig.passwordKeyRef", message))
    extra = accounting.spec.extra_conf or ""
    out += _extra_conf_problems("Accounting", name, extra, SLURMDBD_CONF_OWNED_KEYS, SLURMDBD_CONF_MERGED_KEYS)
    return out


def slurmdbd_conf(accounting: Accounting, password: str) -> str:
    """slurmdbd.conf of a managed Accounting, in upstream's order; `password` is the database password the
    caller read from `storageConfig.passwordKeyRef` (escaped or quoted as Slurm needs; none when empty).

    Raises:
        ConfError: `validate_accounting()` found problems; they are in its `problems`.
    """
    problems = validate_accounting(accounting, password)
    if problems:
        raise ConfError(problems)
    storage = accounting.spec.storage_config
    extra = (accounting.spec.extra_conf or "").rstrip("\n")
    alt_parameters = _auth_alt_parameters(accounting.spec.jwks_key_ref is not None)
    merged = {"AuthInfo": AUTH_INFO, "AuthAltParameters": alt_parameters}
    lines = [
        *_section(
            "GENERAL",
            [
                f"DbdHost={_meta(accounting, 'name')}-accounting-0",
                f"DbdPort={SLURMDBD_PORT}",
                f"SlurmUser={SLURM_USER}",
            ],
        ),
        *_section(
            "PLUGINS & PARAMETERS",
            [
                "AuthType=auth/slurm",
                "AuthAltTypes=auth/jwt",
                f"AuthAltParameters={','.join(alt_parameters)}",
                f"AuthInfo={','.join(AUTH_INFO)}",
            ],
        ),
        *_section(
            "STORAGE",
            [
                "StorageType=accounting_storage/mysql",
                f"StorageHost={storage.host}",
                f"StoragePort={storage.port}",
                *([f"StorageUser={storage.username}"] if storage.username else []),
                f"StorageLoc={storage.database}",
                *([f"StoragePass={_slurm_value(password)}"] if password else []),
            ],
        ),
        *_section("LOGGING", [f"LogFile={SLURMDBD_LOG_PATH}"]),
        *_section("EXTRA CONFIG", [extra] if extra else []),
        *_section("MERGED CONFIG", _merged_lines(extra, merged)),
    ]
    return "\n".join(lines) + "\n"
