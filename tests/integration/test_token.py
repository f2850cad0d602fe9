"""The Token controller on the real stack: a JWT of the key in an owned Secret, accepted by the real slurmrestd,
refreshed before it expires, re-minted at once when the key rotates, written once with `refresh: false`, and
bad input reported as `Ready=False` plus a Warning Event while a good Token next to it is served.

Another operator process (a colleague's test run) may reconcile the same Tokens: every assertion holds
whichever replica wrote.
"""

from __future__ import annotations

import base64
import json
import os
import time
from typing import Any

import httpx
import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from slinky import wellknown
from slinky.clients.kube import rfc3339
from slinky.clients.slurm import jwt
from slinky.operator import tokens
from tests.integration.cluster import Kube
from tests.integration.operator_fixtures import GROUP, VERSION, condition, objects, wait_for

pytestmark = pytest.mark.integration


# ------------------------------------------------------------------------------------------ helpers
def apply_token(kube: Kube, ns: str, name: str, **spec: Any) -> dict[str, Any]:
    body = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "Token",
        "metadata": {"name": name},
        "spec": {"jwtKeyRef": {"name": "slurm-keys", "key": "jwt.key"}, "username": "slurm", **spec},
    }
    return dict(objects(kube).create_namespaced_custom_object(GROUP, VERSION, ns, "tokens", body))


def token_obj(kube: Kube, ns: str, name: str) -> dict[str, Any]:
    return dict(objects(kube).get_namespaced_custom_object(GROUP, VERSION, ns, "tokens", name))


def secret(kube: Kube, ns: str, name: str) -> dict[str, Any] | None:
    try:
        resp = kube.core.read_namespaced_secret(name, ns, _preload_content=False)
    except ApiException as err:
        if err.status == 404:
            return None
        raise
    return dict(json.loads(resp.data))


def value(obj: dict[str, Any] | None, key: str) -> str:
    encoded = ((obj or {}).get("data") or {}).get(key)
    return base64.b64decode(encoded).decode() if encoded else ""


def jwt_in(kube: Kube, ns: str, name: str, key: str = "SLURM_JWT") -> str:
    return value(secret(kube, ns, name), key)


def put_key(kube: Kube, ns: str, name: str, key: bytes) -> None:
    data = {"jwt.key": base64.b64encode(key).decode()}
    try:
        kube.core.create_namespaced_secret(ns, client.V1Secret(metadata=client.V1ObjectMeta(name=name), data=data))
    except ApiException as err:
        if err.status != 409:
            raise
        kube.core.patch_namespaced_secret(name, ns, {"data": data})


def ready(kube: Kube, ns: str, name: str) -> dict[str, Any]:
    return condition(token_obj(kube, ns, name), "Ready")


def diag(env: dict[str, str], token: str) -> int:
    headers = {"X-SLURM-USER-NAME": "slurm", "X-SLURM-USER-TOKEN": token}
    return httpx.get(f"{env['SLURM_REST_URL']}/slurm/v0.0.44/diag", headers=headers, timeout=30).status_code


# ------------------------------------------------------------------------------------------ tests
def test_the_secret_holds_a_jwt_of_the_key_that_slurmrestd_accepts_and_is_remade(
    kube: Kube, cluster: str, dev_env: dict[str, str]
) -> None:
    ns = cluster
    key = base64.b64decode(secret(kube, ns, "slurm-keys")["data"]["jwt.key"])  # type: ignore[index]
    created = apply_token(kube, ns, "api")
    token = wait_for(lambda: jwt_in(kube, ns, "api-jwt-slurm"), what="the token Secret")
    claims = jwt.claims_of(token, key)
    assert (claims["sun"], claims["iss"], claims["exp"] - claims["iat"]) == ("slurm", "slurm-operator", 900)
    made = secret(kube, ns, "api-jwt-slurm")
    assert made is not None
    owner = made["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["name"], owner["uid"], owner["controller"]) == (
        "Token",
        "api",
        created["metadata"]["uid"],
        True,
    )
    assert made["metadata"]["annotations"][wellknown.ANNOTATION_JWT_KEY_HASH] == tokens.key_hash(key)
    assert not made.get("immutable")
    status = wait_for(lambda: ready(kube, ns, "api").get("status") == "True" and token_obj(kube, ns, "api")["status"])
    assert status["issuedAt"] == rfc3339(claims["iat"])

    assert diag(dev_env, token) == 200  # the real slurmrestd takes it

    # an edited Secret is repaired, a deleted one is made again (both with a new JWT of the key)
    kube.core.patch_namespaced_secret("api-jwt-slurm", ns, {"data": {"SLURM_JWT": base64.b64encode(b"x").decode()}})
    repaired = wait_for(lambda: (t := jwt_in(kube, ns, "api-jwt-slurm")) not in ("x", token) and t, what="repair")
    assert jwt.claims_of(repaired, key)["sun"] == "slurm"
    kube.core.delete_namespaced_secret("api-jwt-slurm", ns)
    remade = wait_for(lambda: (t := jwt_in(kube, ns, "api-jwt-slurm")) not in ("", repaired) and t, what="remade")
    assert jwt.claims_of(remade, key)["sun"] == "slurm"


def test_a_short_lifetime_is_refreshed_before_it_expires(kube: Kube, cluster: str) -> None:
    ns = cluster
    key = os.urandom(32)
    put_key(kube, ns, "short-key", key)
    apply_token(kube, ns, "short", lifetime="5s", jwtKeyRef={"name": "short-key", "key": "jwt.key"}, username="alice")
    first = wait_for(lambda: jwt_in(kube, ns, "short-jwt-alice"), what="the first JWT")
    first_claims = jwt.claims_of(first, key)
    assert first_claims["exp"] - first_claims["iat"] == 5
    second = wait_for(lambda: (t := jwt_in(kube, ns, "short-jwt-alice")) != first and t, timeout=10, what="refresh")
    assert time.time() < first_claims["exp"], "the JWT was replaced only after it had expired"
    second_claims = jwt.claims_of(second, key)
    assert second_claims["sun"] == "alice" and second_claims["jti"] != first_claims["jti"]
    assert second_claims["iat"] > first_claims["iat"]
    wait_for(
        lambda: token_obj(kube, ns, "short").get("status", {}).get("issuedAt") != rfc3339(first_claims["iat"]),
        what="issuedAt moved",
    )


def test_a_rotated_key_remints_at_once(kube: Kube, cluster: str) -> None:
    ns = cluster
    old_key, new_key = os.urandom(32), os.urandom(32)
    put_key(kube, ns, "rotating", old_key)
    apply_token(kube, ns, "rot", lifetime="1h", jwtKeyRef={"name": "rotating", "key": "jwt.key"})
    old = wait_for(lambda: jwt_in(kube, ns, "rot-jwt-slurm"), what="the first JWT")
    jwt.claims_of(old, old_key)
    put_key(kube, ns, "rotating", new_key)
    rotated_at = time.monotonic()
    new = wait_for(lambda: (t := jwt_in(kube, ns, "rot-jwt-slurm")) != old and t, timeout=5, what="re-mint")
    assert time.monotonic() - rotated_at < 5  # not at the 48-minute refresh: at once
    assert jwt.claims_of(new, new_key)["sun"] == "slurm"
    with pytest.raises(jwt.InvalidToken):
        jwt.claims_of(new, old_key)
    annotations = secret(kube, ns, "rot-jwt-slurm")["metadata"]["annotations"]  # type: ignore[index]
    assert annotations[wellknown.ANNOTATION_JWT_KEY_HASH] == tokens.key_hash(new_key)


def test_refresh_false_writes_an_immutable_secret_once(kube: Kube, cluster: str) -> None:
    ns = cluster
    key = base64.b64decode(secret(kube, ns, "slurm-keys")["data"]["jwt.key"])  # type: ignore[index]
    apply_token(kube, ns, "once", lifetime="2s", refresh=False, secretRef={"name": "once-token", "key": "jwt"})
    token = wait_for(lambda: jwt_in(kube, ns, "once-token", "jwt"), what="the Secret")
    made = secret(kube, ns, "once-token")
    assert made is not None and made["immutable"] is True
    assert jwt.claims_of(token, key)["exp"] - jwt.claims_of(token, key)["iat"] == 2
    wait_for(lambda: ready(kube, ns, "once").get("status") == "True", what="Ready")
    time.sleep(3)  # past 80 % of the lifetime, and past its end: never re-minted
    again = secret(kube, ns, "once-token")
    assert again is not None
    assert (value(again, "jwt"), again["metadata"]["resourceVersion"]) == (token, made["metadata"]["resourceVersion"])
    kube.core.delete_namespaced_secret("once-token", ns)
    remade = wait_for(lambda: (t := jwt_in(kube, ns, "once-token", "jwt")) not in ("", token) and t, what="remade")
    assert jwt.claims_of(remade, key)["sun"] == "slurm"
    assert secret(kube, ns, "once-token")["immutable"] is True  # type: ignore[index]


def test_bad_input_is_a_condition_and_an_event_and_a_good_token_still_works(kube: Kube, cluster: str) -> None:
    ns = cluster
    theirs = {"data": {"SLURM_JWT": base64.b64encode(b"someone else's").decode()}}
    kube.core.create_namespaced_secret(
        ns, client.V1Secret(metadata=client.V1ObjectMeta(name="taken-jwt-slurm"), data=theirs["data"])
    )
    apply_token(kube, ns, "nokey", jwtKeyRef={"name": "absent", "key": "jwt.key"})
    apply_token(kube, ns, "nofield", jwtKeyRef={"name": "slurm-keys", "key": "other.key"})
    apply_token(kube, ns, "badlife", lifetime="soon")
    apply_token(kube, ns, "taken")
    apply_token(kube, ns, "caps", username="Alice")  # caps-jwt-Alice is not a valid Secret name
    apply_token(kube, ns, "good")
    expected = {
        "nokey": tokens.JWT_KEY_SECRET_NOT_FOUND,
        "nofield": tokens.JWT_KEY_NOT_FOUND,
        "badlife": tokens.INVALID_LIFETIME,
        "taken": tokens.SECRET_CONFLICT,
        "caps": tokens.SECRET_REJECTED,
    }
    for name, reason in expected.items():
        cond = wait_for(lambda n=name: (c := ready(kube, ns, n)).get("status") == "False" and c, what=f"{name} False")
        assert cond["reason"] == reason, (name, cond)
        events = wait_for(
            lambda n=name, r=reason: [e for e in kube.events(ns, n) if e["reason"] == r], what=f"{name} event"
        )
        assert events[0]["type"] == "Warning" and events[0]["source"]["component"] == "slurm-operator"
        assert events[0]["involvedObject"]["kind"] == "Token"
    assert "spec.lifetime" in ready(kube, ns, "badlife")["message"]
    assert secret(kube, ns, "nokey-jwt-slurm") is None and secret(kube, ns, "badlife-jwt-slurm") is None
    assert value(secret(kube, ns, "taken-jwt-slurm"), "SLURM_JWT") == "someone else's"  # never touched
    wait_for(lambda: jwt_in(kube, ns, "good-jwt-slurm"), what="the good Token's Secret")
    assert wait_for(lambda: ready(kube, ns, "good").get("status") == "True", what="good Ready")

    # the key Secret appears: the Secret watch wakes the Token, no poll needed
    key = os.urandom(32)
    put_key(kube, ns, "absent", key)
    fixed = wait_for(lambda: jwt_in(kube, ns, "nokey-jwt-slurm"), timeout=5, what="served once the key exists")
    assert jwt.claims_of(fixed, key)["sun"] == "slurm"
    assert wait_for(lambda: ready(kube, ns, "nokey").get("reason") == tokens.ISSUED, what="nokey Ready")
