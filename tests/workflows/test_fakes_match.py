"""The workflow tests' fakes stand for the real activities: same names, same input types, none missing."""

from __future__ import annotations

import inspect
from typing import Any, get_type_hints

from temporalio import activity

from activities.kube import KubeActivities
from activities.slurm import SlurmActivities
from tests.workflows.conftest import FakeActivities


def _by_name(fns: list[Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for fn in fns:
        definition = activity._Definition.from_callable(fn)
        assert definition is not None and definition.name is not None, fn
        out[definition.name] = fn
    return out


def test_every_real_activity_has_a_fake_with_the_same_input() -> None:
    real = _by_name(
        KubeActivities(None, None).all() + SlurmActivities(None, None).all()  # type: ignore[arg-type]
    )
    fake = _by_name(FakeActivities().all())
    assert sorted(fake) == sorted(real)
    for name, fn in real.items():
        (param,) = list(inspect.signature(fn).parameters)
        fake_param = next(iter(inspect.signature(fake[name]).parameters))
        real_type = get_type_hints(fn)[param]
        assert get_type_hints(fake[name])[fake_param] is real_type, name
