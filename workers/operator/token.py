"""The Token reconciler: each Token's HS256 JWT kept fresh in a Secret (rules: `slinky.operator.tokens`).

It runs on the operator's controller runtime (``runtime``), whose work queue reconciles a Token on one worker at
a time (a failing one is retried with its own backoff and never blocks the others). Inputs:

* the watch on Tokens;
* the shared watch on Secrets: a change to a Secret that a Token signs with (`jwtKeyRef`), writes to (`secretRef`) or
  owns wakes that Token, so a rotated key is re-minted at once and a deleted or edited token Secret is made
  again;
* one timer per Token, set to its JWT's next refresh (80 % of the lifetime): no fixed polling.

Reconcile: read the key Secret and the token Secret from the apiserver (never from a cache: a write of ours
must not be judged on an older copy), ask `tokens.assess` what to do, write it (create, or a merge patch that
carries the Secret's resourceVersion, so two operator replicas never overwrite each other), then write
`status.issuedAt` and the `Ready` condition. A problem becomes `Ready=False` with a reason and a Warning Event
(docs/operator.md "Token: JWTs in Secrets"). A Secret the Token does not own is never written or deleted.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

from pydantic import ValidationError

from slinky.clients.errors import KubeConflict, KubeNotFound, KubeRejected
from slinky.clients.kube import rfc3339
from slinky.clients.slurm import jwt
from slinky.operator import tokens
from slinky.operator.api.token import Token
from workers.operator.runtime import Runtime, Watch, set_condition
from workers.operator.workqueue import Key

logger = logging.getLogger(__name__)
Obj = dict[str, Any]

TOKENS = "/apis/slinky.slurm.net/v1beta1/tokens"
SECRETS = "/api/v1/secrets"
READY = "Ready"
CONFLICT_RETRY_SECONDS = 0.2
"""A write that lost a race (another replica wrote first) is judged again on the object as it is now."""


def token_path(namespace: str, name: str, sub: str = "") -> str:
    path = f"/apis/slinky.slurm.net/v1beta1/namespaces/{namespace}/tokens/{name}"
    return f"{path}/{sub}" if sub else path


def secret_path(namespace: str, name: str = "") -> str:
    path = f"/api/v1/namespaces/{namespace}/secrets"
    return f"{path}/{name}" if name else path


def referenced_secrets(token: Obj) -> set[str]:
    """The Secrets a Token reads or writes: its key Secret and its token Secret (default name included)."""
    spec = token.get("spec") or {}
    names = {ref.get("name") for field in ("jwtKeyRef", "jwtHs256KeyRef", "secretRef") if (ref := spec.get(field))}
    if not (spec.get("secretRef") or {}).get("name") and spec.get("username"):
        names.add(tokens.default_secret_name(token["metadata"]["name"], str(spec["username"])))
    return {str(n) for n in names if n}


class TokenReconciler:
    """The Token reconciler on the operator's runtime: its watches, per-Token refresh timers and reconcile."""

    kind = "Token"
    primary = TOKENS

    def __init__(self, runtime: Runtime, *, clock: Callable[[], float] = time.time) -> None:
        self.runtime = runtime
        self.kube = runtime.kube
        self.tokens = runtime.caches.of(TOKENS)
        self.clock = clock
        self.mints = 0
        self.watches: Sequence[Watch] = (Watch(SECRETS, self.tokens_using),)

    def tokens_using(self, secret: Obj) -> set[Key]:
        """The Tokens a Secret event concerns: those naming it (key or target) and the one owning it."""
        meta = secret.get("metadata") or {}
        namespace, name = meta.get("namespace", ""), meta.get("name", "")
        keys = {key for key, token in self.tokens.items() if key[0] == namespace and name in referenced_secrets(token)}
        for ref in meta.get("ownerReferences") or []:
            if ref.get("kind") == "Token" and (namespace, ref.get("name")) in self.tokens:
                keys.add((namespace, str(ref["name"])))
        return keys

    # ------------------------------------------------------------------------------------ timers
    def _schedule(self, key: Key, at: float) -> None:
        """One timer per Token, at its next refresh; a newer one replaces it (no fixed polling)."""
        self.runtime.requeue_later(self.kind, key, max(at - self.clock(), 0.05), replace=True)

    def _cancel_timer(self, key: Key) -> None:
        self.runtime.cancel_requeue(self.kind, key)

    # ------------------------------------------------------------------------------------ reconcile
    async def reconcile(self, key: Key) -> None:
        raw = self.tokens.get(key)
        if raw is None or raw["metadata"].get("deletionTimestamp"):
            self._cancel_timer(key)
            return
        try:
            token = Token.model_validate(raw)
        except ValidationError as err:
            self._cancel_timer(key)
            await self._status(key, raw, ("False", tokens.INVALID_SPEC, f"the Token does not parse: {err}"))
            return
        try:
            plan = tokens.plan_of(token)
            key_secret = await self._get_secret(plan.namespace, plan.key_ref.name)
            signing_key = tokens.signing_key(plan, key_secret)
            existing = await self._get_secret(plan.namespace, plan.secret_name)
            verdict = tokens.assess(plan, existing, signing_key, self.clock())
            issued_at = await self._apply(plan, existing, signing_key, verdict)
        except tokens.TokenProblem as problem:
            # Nothing to refresh until the spec or a Secret changes: the watches wake the Token then.
            self._cancel_timer(key)
            await self._status(key, raw, ("False", problem.reason, problem.message))
            return
        except KubeConflict:  # another writer was first: judge the Secret as it is now
            self.runtime.requeue_later(self.kind, key, CONFLICT_RETRY_SECONDS, replace=True)
            return
        if verdict.action in ("create", "mint") and issued_at is not None:
            refresh_at = tokens.next_refresh(plan, issued_at)
        else:
            refresh_at = verdict.refresh_at
        if refresh_at is None:
            self._cancel_timer(key)
        else:
            self._schedule(key, refresh_at)
        where = f"Secret {plan.namespace}/{plan.secret_name} key {plan.secret_key}"
        message = (
            f"JWT for Slurm user {plan.username} in {where}, refreshed at 80 % of {plan.lifetime_seconds}s"
            if plan.refresh
            else f"JWT for Slurm user {plan.username} in {where}, written once (refresh: false)"
        )
        await self._status(key, raw, ("True", tokens.ISSUED, message), issued_at=issued_at)

    async def _apply(
        self, plan: tokens.TokenPlan, existing: Obj | None, key: bytes, verdict: tokens.Verdict
    ) -> float | None:
        """Write what the verdict asks; the ``iat`` of the JWT the Secret now holds (None: unknown)."""
        path = secret_path(plan.namespace, plan.secret_name)
        try:
            if verdict.action in ("create", "mint"):
                issued = float(int(self.clock()))
                token = jwt.mint(key, plan.username, plan.lifetime_seconds, now=issued)
                if existing is None:
                    body = tokens.secret_body(plan, token, key)
                    await self.kube.create(secret_path(plan.namespace), body, decode=False)
                else:
                    await self.kube.patch(path, tokens.secret_patch(plan, existing, key, token), decode=False)
                self.mints += 1
                logger.info("minted the JWT of token %s/%s into %s (%s)", plan.namespace, plan.name, path, verdict.why)
                return issued
            if existing is not None and (verdict.action == "seal" or verdict.adopt):
                await self.kube.patch(path, tokens.secret_patch(plan, existing, key, None), decode=False)
        except KubeConflict:
            raise  # lost a race: judged again
        except KubeRejected as err:  # the Secret the spec makes is refused (a bad name or key in the spec)
            where = f"{plan.namespace}/{plan.secret_name}"
            raise tokens.TokenProblem(tokens.SECRET_REJECTED, f"the apiserver refuses Secret {where}: {err}") from err
        return verdict.issued_at

    async def _get_secret(self, namespace: str, name: str) -> Obj | None:
        try:
            return await self.kube.get(secret_path(namespace, name))
        except KubeNotFound:
            return None

    # ------------------------------------------------------------------------------------ status
    async def _status(
        self, key: Key, raw: Obj, condition: tuple[str, str, str], *, issued_at: float | None = None
    ) -> None:
        """Write ``Ready`` (its time kept while status and reason stay) and ``issuedAt``; a False reason that is
        new posts a Warning Event on the Token."""
        status_, reason, message = condition
        current = raw.get("status") or {}
        generation = int(raw["metadata"].get("generation") or 0)
        if status_ == "False":
            self.runtime.warn_once(raw, reason, message)
        else:
            self.runtime.clear_warnings(raw)
        status: Obj = {
            "conditions": set_condition(current.get("conditions") or [], READY, status_, reason, message, generation)
        }
        if issued_at is not None:
            status["issuedAt"] = rfc3339(issued_at)
        await self.runtime.write_status(token_path(*key), raw, status)
