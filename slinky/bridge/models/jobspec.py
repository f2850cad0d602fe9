"""The Slurm job specification: the intermediate representation between a workload and Slurm.

`SlurmJobSpec` is what the translator produces and what the submit activity sends. It is a frozen
pydantic model so that it can travel through Temporal (workflow inputs, activity arguments) with the
pydantic data converter, and `to_job_desc` turns it into the exact slurmrestd v0.0.44
``job_desc_msg`` for an ``EXTERNAL_JOB``.

The ``admin_comment`` carries ``{"pods": ["<ns>/<name>", ...]}``, the same JSON upstream
slurm-bridge writes (``internal/utils/externaljobinfo``). It is how a Slurm job is matched back to
its pods, also after a slurmctld crash reuses job ids, so `pods_from_admin_comment` must never
raise on what it finds in Slurm.
"""

from __future__ import annotations

import json
from typing import Any, Final

from pydantic import BaseModel, ConfigDict, Field

from slinky import wellknown

EXTERNAL_JOB_FLAG: Final = "EXTERNAL_JOB"
WORKING_DIRECTORY: Final = "/tmp"
"""External jobs run no script; slurmrestd still wants a working directory."""


def _no_val(number: int) -> dict[str, Any]:
    """A slurmrestd ``uint32/uint64_no_val_struct`` holding a set, finite number."""
    return {"set": True, "infinite": False, "number": number}


def admin_comment_for(pods: list[str] | tuple[str, ...]) -> str:
    """The ``admin_comment`` that maps a Slurm job to its pods, in upstream's exact form.

    >>> admin_comment_for(["ns/a"])
    '{"pods": ["ns/a"]}'
    """
    return json.dumps({"pods": list(pods)})


def pods_from_admin_comment(text: str | None) -> list[str] | None:
    """The ``"ns/name"`` pod keys in an ``admin_comment``, or None when it is not one of ours.

    Anything a user or another tool might have written (empty, not JSON, a different shape, entries
    that are not ``ns/name`` strings) gives None instead of raising, so that a reconcile loop can
    treat the job as foreign.
    """
    if not text or not isinstance(text, str):
        return None
    try:
        data = json.loads(text)
    except ValueError:
        return None
    if not isinstance(data, dict):
        return None
    pods = data.get("pods")
    if not isinstance(pods, list) or not pods:
        return None
    if not all(isinstance(p, str) and _is_pod_key(p) for p in pods):
        return None
    return list(pods)


def _is_pod_key(key: str) -> bool:
    namespace, sep, name = key.partition("/")
    return bool(sep and namespace and name and "/" not in name)


class TranslateDefaults(BaseModel):
    """Defaults the translator applies before anything derived from the workload (bridge settings).

    Workflows never read settings, so whoever starts one copies these values into its input.
    """

    model_config = ConfigDict(frozen=True)

    partition: str = Field(wellknown.DEFAULT_PARTITION, description="Partition when no annotation names one.")
    mcs_label: str | None = Field(
        wellknown.DEFAULT_MCS_LABEL, description="Slurm MCS label on every bridge job; None leaves it unset."
    )


class TranslationWarning(BaseModel):
    """Something the user should fix that did not stop the translation (a deprecated key)."""

    model_config = ConfigDict(frozen=True)

    annotation: str = Field(description="The annotation key the warning is about.")
    message: str = Field(description="User-facing text for the warning Event.")


class SlurmJobSpec(BaseModel):
    """One Slurm external job for one workload group. ``None`` means: let Slurm's default apply."""

    model_config = ConfigDict(frozen=True)

    pods: tuple[str, ...] = Field(min_length=1, description='The group\'s pods as "ns/name".')
    name: str | None = None
    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    reservation: str | None = None
    licenses: str | None = None
    constraints: str | None = Field(None, description="Comma-separated Slurm node features.")
    wckey: str | None = None
    priority: int | None = Field(None, ge=0)
    user_id: int | None = Field(None, ge=0, description="Numeric uid; Slurm runs the job as the JWT's user if unset.")
    group_id: int | None = Field(None, ge=0, description="Numeric gid.")
    min_nodes: int | None = Field(None, ge=1)
    max_nodes: int | None = Field(None, ge=1)
    tasks_per_node: int | None = Field(None, ge=1)
    cpus_per_task: int | None = Field(None, ge=1, description="Whole CPUs per task.")
    memory_per_node_mib: int | None = Field(None, ge=1, description="Memory per node, MiB.")
    tres_per_node: str | None = Field(None, description='TRES per node, e.g. "gres/gpu=2".')
    time_limit_minutes: int | None = Field(None, ge=1, description="Wall time limit, minutes.")
    exclusive: bool = Field(True, description="Whole-node allocation (shared none); False lets jobs share.")
    excluded_nodes: tuple[str, ...] = Field((), description="Slurm node names the job may not use.")
    mcs_label: str | None = None

    @property
    def admin_comment(self) -> str:
        """The pod map stored in the job's ``admin_comment``."""
        return admin_comment_for(self.pods)

    def to_job_desc(self) -> dict[str, Any]:
        """The slurmrestd v0.0.44 ``job_desc_msg`` for this external job.

        Unset fields are left out so that Slurm's (partition) defaults apply. ``required_nodes`` is
        never produced: a required node that disappears makes Slurm fail every job naming it
        (upstream slurm-bridge #43).
        """
        desc: dict[str, Any] = {
            "flags": [EXTERNAL_JOB_FLAG],
            "admin_comment": self.admin_comment,
            "current_working_directory": WORKING_DIRECTORY,
            "shared": ["none"] if self.exclusive else [],
        }
        strings = {
            "name": self.name,
            "partition": self.partition,
            "account": self.account,
            "qos": self.qos,
            "reservation": self.reservation,
            "licenses": self.licenses,
            "constraints": self.constraints,
            "wckey": self.wckey,
            "tres_per_node": self.tres_per_node,
            "mcs_label": self.mcs_label,
        }
        desc.update({key: value for key, value in strings.items() if value is not None})
        ints = {
            "minimum_nodes": self.min_nodes,
            "maximum_nodes": self.max_nodes,
            "tasks_per_node": self.tasks_per_node,
            "cpus_per_task": self.cpus_per_task,
        }
        desc.update({key: value for key, value in ints.items() if value is not None})
        if self.memory_per_node_mib is not None:
            desc["memory_per_node"] = _no_val(self.memory_per_node_mib)
        if self.time_limit_minutes is not None:
            desc["time_limit"] = _no_val(self.time_limit_minutes)
        if self.priority is not None:
            desc["priority"] = _no_val(self.priority)
        # slurmrestd takes ids as strings; numeric strings are uids/gids, not user names.
        if self.user_id is not None:
            desc["user_id"] = str(self.user_id)
        if self.group_id is not None:
            desc["group_id"] = str(self.group_id)
        if self.excluded_nodes:
            desc["excluded_nodes"] = list(self.excluded_nodes)
        return desc


class TranslationResult(BaseModel):
    """A translated workload: the job spec, and warnings the caller records as pod Events."""

    model_config = ConfigDict(frozen=True)

    spec: SlurmJobSpec
    warnings: tuple[TranslationWarning, ...] = ()
