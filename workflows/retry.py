"""Named retry policies and timeouts for the lifecycle's activities (deterministic constants only)."""

from __future__ import annotations

from datetime import timedelta

from temporalio.common import RetryPolicy

NON_RETRYABLE = ["AlreadyBound"]

KUBE = RetryPolicy(
    initial_interval=timedelta(milliseconds=200),
    backoff_coefficient=2.0,
    maximum_interval=timedelta(seconds=15),
    non_retryable_error_types=NON_RETRYABLE,
)
"""Kubernetes verbs: idempotent, so retried until the API server answers."""

SLURM = RetryPolicy(
    initial_interval=timedelta(milliseconds=250),
    backoff_coefficient=2.0,
    maximum_interval=timedelta(seconds=30),
    non_retryable_error_types=NON_RETRYABLE,
)
"""Slurm verbs: submit looks for an earlier job before it retries, so it too may retry forever."""

SLURM_PROBE = RetryPolicy(
    initial_interval=timedelta(milliseconds=250),
    backoff_coefficient=2.0,
    maximum_interval=timedelta(seconds=5),
    maximum_attempts=4,
    non_retryable_error_types=NON_RETRYABLE,
)
"""A Slurm read or drain inside a wait loop: a failure is "no news", and the loop tries again at its next
wake-up, so the workflow stays responsive to its signals (pod gone, keep, abort) while Slurm is away."""

SLURM_CLEANUP = RetryPolicy(
    initial_interval=timedelta(milliseconds=250),
    backoff_coefficient=2.0,
    maximum_interval=timedelta(seconds=30),
    maximum_attempts=12,
    non_retryable_error_types=NON_RETRYABLE,
)
"""A last cleanup whose failure must not hold the workflow forever (about 4 minutes of tries)."""

BEST_EFFORT = RetryPolicy(maximum_attempts=3, initial_interval=timedelta(milliseconds=200))
"""Events and conditions: worth a few tries, never worth blocking a lifecycle."""

CALL_TIMEOUT = timedelta(seconds=30)


def call_timeout(members: int) -> timedelta:
    """A call's deadline: ``CALL_TIMEOUT``, plus 50 ms per member for the per-member calls of a big gang (1,000
    bindings took 20-25 s on a loaded 2-core API server, close to the bare 30 s)."""
    return CALL_TIMEOUT + timedelta(milliseconds=50 * members)
