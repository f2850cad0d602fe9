"""The Token rules: which Secret a Token writes, what goes in it, and when its JWT is re-minted (pure).

A Token (``slinky.slurm.net/v1beta1``) keeps an HS256 JWT for one Slurm user in a Secret (upstream
``internal/controller/token``). The controller (``workers/operator/token.py``) reads the Token, its key
Secret and its token Secret, and asks :func:`assess` what to do; everything here is a function of those
objects and the clock, so every rule is unit-tested without an apiserver.

* The Secret is ``<token>-jwt-<username>``, key ``SLURM_JWT``, unless ``spec.secretRef`` says otherwise.
* It is owned by the Token (a controller ownerReference) and carries the hash of the signing key in the
  annotation ``slinky.slurm.net/jwt-key-hash``; a Secret of that name that the Token does not own is never
  touched (``SecretConflict``).
* ``refresh`` (the default): the JWT is re-minted at 80 % of its lifetime (``exp - lifetime/5``, as upstream),
  when it has expired, when it is not signed by the current key (a rotated key: at once), or when it is for
  another user or lifetime than the spec says.
* ``refresh: false``: the Secret is written once and made immutable; it is never re-minted (made again only
  when it is deleted).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
from dataclasses import dataclass
from typing import Any, Final, Literal

from slinky import wellknown
from slinky.clients.slurm import jwt
from slinky.operator.api.base import API_VERSION, SecretKeySelector
from slinky.operator.api.token import DEFAULT_LIFETIME, DEFAULT_SECRET_KEY, Token

Obj = dict[str, Any]
MIN_LIFETIME_SECONDS: Final = 1
"""A JWT's times are whole seconds: a shorter lifetime would expire as it is written."""

# The reasons of the Token's Ready condition (docs/operator.md "Token: JWTs in Secrets").
ISSUED: Final = "Issued"
INVALID_SPEC: Final = "InvalidSpec"
INVALID_USERNAME: Final = "InvalidUsername"
INVALID_LIFETIME: Final = "InvalidLifetime"
JWT_KEY_MISSING: Final = "JwtKeyMissing"
JWT_KEY_SECRET_NOT_FOUND: Final = "JwtKeySecretNotFound"
JWT_KEY_NOT_FOUND: Final = "JwtKeyNotFound"
SECRET_CONFLICT: Final = "SecretConflict"
IMMUTABLE_SECRET: Final = "ImmutableSecret"
SECRET_REJECTED: Final = "SecretRejected"


class TokenProblem(Exception):
    """Why a Token cannot be served now: ``reason`` is its Ready condition's reason, the message says what to fix."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


class InvalidDuration(ValueError):
    """A Go duration string that does not parse, or is out of range; ``field`` names where it came from."""

    def __init__(self, field: str, value: str, why: str) -> None:
        super().__init__(f"{field}: {value!r} {why}")
        self.field = field
        self.value = value


# ------------------------------------------------------------------------------------------ durations
_UNITS: Final = {
    "ns": 1e-9,
    "us": 1e-6,
    "\u00b5s": 1e-6,  # micro sign
    "\u03bcs": 1e-6,  # Greek mu
    "ms": 1e-3,
    "s": 1.0,
    "m": 60.0,
    "h": 3600.0,
}
_MAX_DURATION_SECONDS: Final = (2**63 - 1) / 1e9
"""A Go ``time.Duration`` is an int64 of nanoseconds."""
_SEGMENT: Final = re.compile(r"(\d+\.?\d*|\.\d+)([^\d.]+)")


def parse_duration(text: str, field: str = "spec.lifetime") -> float:
    """Seconds of a Go ``time.Duration`` string: ``"15m"``, ``"1h30m"``, ``"90s"``, ``"1.5h"``, ``"0"``.

    Raises:
        InvalidDuration: Empty, a number without a unit, an unknown unit, or anything else Go would refuse.
    """
    value = text.strip()
    body = value[1:] if value[:1] in "+-" else value
    sign = -1.0 if value.startswith("-") else 1.0
    if body == "0":
        return 0.0
    if not body:
        raise InvalidDuration(field, text, "is not a duration (e.g. 15m, 1h30m, 90s)")
    seconds, pos = 0.0, 0
    while pos < len(body):
        match = _SEGMENT.match(body, pos)
        if match is None:
            raise InvalidDuration(field, text, "is not a duration (e.g. 15m, 1h30m, 90s)")
        number, unit = match.groups()
        if unit not in _UNITS:
            raise InvalidDuration(field, text, f"has an unknown unit {unit!r} (ns, us, ms, s, m, h)")
        seconds += float(number) * _UNITS[unit]
        pos = match.end()
    if seconds > _MAX_DURATION_SECONDS:
        raise InvalidDuration(field, text, "is out of range (Go durations end at about 2562047h)")
    return sign * seconds


def lifetime_seconds(lifetime: str | None) -> int:
    """The lifetime a JWT gets: the spec's Go duration (15m when unset) in whole seconds, clamped to Slurm's
    infinite (``MaxInt32 - 1`` s).

    Raises:
        InvalidDuration: Not a duration, or shorter than one second.
    """
    text = DEFAULT_LIFETIME if lifetime is None else lifetime
    seconds = parse_duration(text, "spec.lifetime")
    if seconds < MIN_LIFETIME_SECONDS:
        raise InvalidDuration("spec.lifetime", text, f"is shorter than {MIN_LIFETIME_SECONDS}s")
    return min(int(seconds), jwt.MAX_LIFETIME_SECONDS)


# ------------------------------------------------------------------------------------------ the spec
def default_secret_name(token_name: str, username: str) -> str:
    """The Secret a Token writes when ``spec.secretRef`` does not name one (upstream's name)."""
    return f"{token_name}-jwt-{username}"


@dataclass(frozen=True)
class TokenPlan:
    """A Token's spec, defaults applied and checked: what to mint, with which key, into which Secret."""

    namespace: str
    name: str
    uid: str
    username: str
    lifetime_seconds: int
    refresh: bool
    key_ref: SecretKeySelector
    secret_name: str
    secret_key: str


def plan_of(token: Token) -> TokenPlan:
    """The checked plan of a Token.

    Raises:
        TokenProblem: ``InvalidUsername``, ``InvalidLifetime`` or ``JwtKeyMissing``.
    """
    meta = token.metadata
    spec = token.spec
    if not spec.username.strip():
        raise TokenProblem(INVALID_USERNAME, "spec.username is empty: name the Slurm user the token is for")
    try:
        lifetime = lifetime_seconds(spec.lifetime)
    except InvalidDuration as err:
        raise TokenProblem(INVALID_LIFETIME, str(err)) from err
    key_ref = spec.jwt_key()
    if key_ref is None or not key_ref.name or not key_ref.key:
        raise TokenProblem(JWT_KEY_MISSING, "spec.jwtKeyRef (name and key) must name the Secret key to sign with")
    ref = spec.secret_ref
    return TokenPlan(
        namespace=str(meta.get("namespace", "")),
        name=str(meta.get("name", "")),
        uid=str(meta.get("uid", "")),
        username=spec.username,
        lifetime_seconds=lifetime,
        refresh=spec.refresh is not False,
        key_ref=key_ref,
        secret_name=ref.name if ref and ref.name else default_secret_name(str(meta.get("name", "")), spec.username),
        secret_key=ref.key if ref and ref.key else DEFAULT_SECRET_KEY,
    )


def secret_value(secret: Obj, key: str) -> bytes | None:
    """The decoded value of ``key`` in a Secret as the apiserver returns it (``data`` is base64); None if absent
    or not base64."""
    encoded = (secret.get("data") or {}).get(key)
    if not isinstance(encoded, str):
        return None
    try:
        return base64.b64decode(encoded, validate=True)
    except (binascii.Error, ValueError):
        return None


def signing_key(plan: TokenPlan, secret: Obj | None) -> bytes:
    """The HS256 key from the ``jwtKeyRef`` Secret (None: it does not exist).

    Raises:
        TokenProblem: ``JwtKeySecretNotFound`` or ``JwtKeyNotFound`` (absent or empty key).
    """
    where = f"Secret {plan.namespace}/{plan.key_ref.name}"
    if secret is None:
        raise TokenProblem(JWT_KEY_SECRET_NOT_FOUND, f"{where} (spec.jwtKeyRef) does not exist")
    key = secret_value(secret, plan.key_ref.key)
    if not key:
        raise TokenProblem(JWT_KEY_NOT_FOUND, f"{where} has no non-empty key {plan.key_ref.key!r} (spec.jwtKeyRef)")
    return key


def key_hash(key: bytes) -> str:
    """A short fingerprint of the signing key for the Secret's annotation: a changed key is seen without
    trying the token (never the key itself; 64 bits of a SHA-256 of a random key tell nothing about it)."""
    return hashlib.sha256(key).hexdigest()[:16]


# ------------------------------------------------------------------------------------------ the Secret
def owner_reference(plan: TokenPlan) -> Obj:
    return {
        "apiVersion": API_VERSION,
        "kind": "Token",
        "name": plan.name,
        "uid": plan.uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


def secret_metadata(plan: TokenPlan, key: bytes) -> Obj:
    """Labels, the key-hash annotation and the ownerReference of the token Secret."""
    return {
        "labels": {wellknown.LABEL_APP: wellknown.APP_TOKEN, wellknown.LABEL_INSTANCE: plan.name},
        "annotations": {wellknown.ANNOTATION_JWT_KEY_HASH: key_hash(key)},
        "ownerReferences": [owner_reference(plan)],
    }


def secret_body(plan: TokenPlan, token: str, key: bytes) -> Obj:
    """The whole Secret to create: ``token`` under the plan's key, immutable when ``refresh`` is false."""
    body: Obj = {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": {"name": plan.secret_name, "namespace": plan.namespace, **secret_metadata(plan, key)},
        "data": {plan.secret_key: base64.b64encode(token.encode()).decode()},
    }
    if not plan.refresh:
        body["immutable"] = True
    return body


def secret_patch(plan: TokenPlan, existing: Obj, key: bytes, token: str | None) -> Obj:
    """A merge patch of an owned Secret: our metadata, the new ``token`` (None: keep the one there) and
    ``immutable`` when refresh is false; it carries the Secret's resourceVersion, so a write made meanwhile
    (another operator replica) fails with 409 instead of being overwritten."""
    meta = secret_metadata(plan, key)
    others = [r for r in existing["metadata"].get("ownerReferences") or [] if not _is_token_controller(r)]
    patch: Obj = {
        "metadata": {
            "resourceVersion": existing["metadata"].get("resourceVersion", ""),
            "labels": meta["labels"],
            "annotations": meta["annotations"],
            "ownerReferences": [*others, *meta["ownerReferences"]],
        }
    }
    if token is not None:
        patch["data"] = {plan.secret_key: base64.b64encode(token.encode()).decode()}
    if not plan.refresh:
        patch["immutable"] = True
    return patch


def _is_token_controller(ref: Obj) -> bool:
    return (
        bool(ref.get("controller"))
        and ref.get("kind") == "Token"
        and _group(ref) == _group({"apiVersion": API_VERSION})
    )


def _group(ref: Obj) -> str:
    return str(ref.get("apiVersion", "")).split("/")[0]


def ownership(plan: TokenPlan, secret: Obj) -> Literal["ours", "stale", "foreign"]:
    """Whose the Secret is: ``ours`` (controller ownerReference to this Token), ``stale`` (to an earlier Token of
    the same name, since deleted: adopted), ``foreign`` (anyone else's, or nobody's: never touched)."""
    for ref in secret.get("metadata", {}).get("ownerReferences") or []:
        if _is_token_controller(ref) and ref.get("name") == plan.name:
            return "ours" if ref.get("uid") == plan.uid else "stale"
    return "foreign"


# ------------------------------------------------------------------------------------------ refresh
Action = Literal["create", "mint", "seal", "keep"]


@dataclass(frozen=True)
class Verdict:
    """What to do with the token Secret now, and when to look again.

    Attributes:
        action: ``create`` the Secret; ``mint`` a new JWT into it; ``seal`` it (make it immutable, keep its JWT,
            refresh false); ``keep`` it as it is.
        why: Why, for the log and the condition's message ("expired", "the key changed", ...).
        adopt: The Secret's ownerReference names an earlier Token of this name: rewrite the metadata (also
            with ``keep``).
        issued_at: ``iat`` of the JWT kept (None with create/mint: the new one's, or unknown).
        refresh_at: When the kept JWT is due (epoch seconds); None when it is never re-minted.
    """

    action: Action
    why: str
    adopt: bool = False
    issued_at: float | None = None
    refresh_at: float | None = None


def _claims(token: str, key: bytes) -> dict[str, Any] | None:
    try:
        return jwt.claims_of(token, key)
    except jwt.InvalidToken:
        return None


def _stale(plan: TokenPlan, secret: Obj, key: bytes, now: float) -> tuple[str, dict[str, Any]]:
    """Why the Secret's JWT must be replaced ("" if it need not), with its claims when it verifies."""
    raw = secret_value(secret, plan.secret_key)
    if raw is None:
        return f"the Secret has no key {plan.secret_key}", {}
    annotations = secret.get("metadata", {}).get("annotations") or {}
    recorded = annotations.get(wellknown.ANNOTATION_JWT_KEY_HASH)
    claims = _claims(raw.decode(errors="replace"), key)
    if claims is None:
        why = "the key changed" if recorded and recorded != key_hash(key) else "it is not a JWT signed by the key"
        return why, {}
    try:
        issued, expires = float(claims["iat"]), float(claims["exp"])
    except (KeyError, TypeError, ValueError):
        return "it has no iat/exp", {}
    if claims.get("sun") != plan.username:
        return f"it is for user {claims.get('sun')!r}, not {plan.username!r}", claims
    if int(expires - issued) != plan.lifetime_seconds:
        return f"its lifetime is {int(expires - issued)}s, not {plan.lifetime_seconds}s", claims
    if now >= expires:
        return "it expired", claims
    if now >= refresh_time(issued, expires):
        return "80 % of its lifetime passed", claims
    return "", claims


def refresh_time(issued: float, expires: float) -> float:
    """When a JWT is replaced: at 80 % of its lifetime, i.e. ``exp - lifetime/5`` (upstream)."""
    return issued + jwt.REFRESH_FRACTION * (expires - issued)


def assess(plan: TokenPlan, secret: Obj | None, key: bytes, now: float) -> Verdict:
    """What the token Secret needs, given the Secret as it is (None: absent), the current key and the time.

    Raises:
        TokenProblem: ``SecretConflict`` (the Secret is not this Token's), ``ImmutableSecret`` (refresh is on but
            the Secret, written while it was off, cannot be updated).
    """
    if secret is None:
        return Verdict("create", "the Secret does not exist")
    where = f"Secret {plan.namespace}/{plan.secret_name}"
    owner = ownership(plan, secret)
    if owner == "foreign":
        raise TokenProblem(
            SECRET_CONFLICT,
            f"{where} exists and is not owned by this Token: name another one in spec.secretRef, or delete it",
        )
    adopt = owner == "stale"
    why, claims = _stale(plan, secret, key, now)
    issued = float(claims["iat"]) if claims else None
    if secret.get("immutable"):
        if plan.refresh:
            raise TokenProblem(
                IMMUTABLE_SECRET,
                f"{where} is immutable (written while spec.refresh was false) and cannot be refreshed: "
                "delete it to have it made again",
            )
        return Verdict("keep", why or "written once (refresh: false)", adopt=adopt, issued_at=issued)
    if not plan.refresh:
        return Verdict("mint" if why else "seal", why or "refresh is off", adopt=adopt, issued_at=issued)
    if why:
        return Verdict("mint", why, adopt=adopt)
    return Verdict(
        "keep",
        "fresh",
        adopt=adopt,
        issued_at=issued,
        refresh_at=refresh_time(float(claims["iat"]), float(claims["exp"])),
    )


def next_refresh(plan: TokenPlan, issued_at: float) -> float | None:
    """When a JWT just minted at ``issued_at`` (whole seconds, as in its ``iat``) is due; None without refresh."""
    if not plan.refresh:
        return None
    return refresh_time(issued_at, issued_at + plan.lifetime_seconds)
