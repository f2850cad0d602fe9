"""The Token rules: names and defaults, Go durations, the Secret written, and when a JWT is re-minted."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from slinky import wellknown
from slinky.clients.slurm import jwt
from slinky.operator import tokens
from slinky.operator.api.token import Token

KEY = b"k" * 32
OTHER_KEY = b"o" * 32
NOW = 1_800_000_000.0


def make_token(name: str = "api", uid: str = "uid-1", **spec: Any) -> Token:
    body = {"jwtKeyRef": {"name": "slurm-jwt", "key": "jwt.key"}, "username": "slurm", **spec}
    return Token.model_validate({"metadata": {"name": name, "namespace": "ns", "uid": uid}, "spec": body})


def plan(**spec: Any) -> tokens.TokenPlan:
    return tokens.plan_of(make_token(**spec))


def written(p: tokens.TokenPlan, *, key: bytes = KEY, issued: float = NOW, lifetime: float | None = None) -> Any:
    """The Secret as the apiserver returns it after creating the body for a JWT issued at ``issued``."""
    token = jwt.mint(key, p.username, p.lifetime_seconds if lifetime is None else lifetime, now=issued)
    secret = tokens.secret_body(p, token, key)
    secret["metadata"]["resourceVersion"] = "7"
    return secret


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


# ------------------------------------------------------------------------------------------ durations
@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("15m", 900),
        ("1h30m", 5400),
        ("90s", 90),
        ("1.5h", 5400),
        ("2h45m30s", 9930),
        ("1500ms", 1.5),
        (".5s", 0.5),
        ("0", 0),
        ("+10s", 10),
        ("-10s", -10),
        ("1m1000000us", 61),
        ("3\u00b5s", 3e-6),
    ],
    ids=["minutes", "hours+minutes", "seconds", "fractional hours", "three units", "ms", "leading dot", "bare zero",
         "plus sign", "minus sign", "us", "micro sign"],
)  # fmt: skip
def test_go_durations_parse(text: str, seconds: float) -> None:
    assert tokens.parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "15", "15x", "m", "1h 30m", "1..5s", "15 m", "fifteen", "1d", "3000000h"])
def test_bad_durations_raise_a_typed_error_naming_the_field(text: str) -> None:
    with pytest.raises(tokens.InvalidDuration) as err:
        tokens.parse_duration(text, "spec.lifetime")
    assert err.value.field == "spec.lifetime"
    assert "spec.lifetime" in str(err.value)


def test_lifetime_defaults_to_15m_is_whole_seconds_and_is_clamped_to_slurms_infinite() -> None:
    assert tokens.lifetime_seconds(None) == 900
    assert tokens.lifetime_seconds("5.9s") == 5
    assert tokens.lifetime_seconds("1000000h") == jwt.MAX_LIFETIME_SECONDS
    assert tokens.lifetime_seconds("596523h") == 596523 * 3600  # just under the clamp
    for short in ("0", "500ms", "-5m"):
        with pytest.raises(tokens.InvalidDuration):
            tokens.lifetime_seconds(short)


# ------------------------------------------------------------------------------------------ the plan
def test_defaults_secret_name_key_refresh_and_lifetime() -> None:
    p = plan()
    assert (p.secret_name, p.secret_key) == ("api-jwt-slurm", "SLURM_JWT")
    assert (p.lifetime_seconds, p.refresh) == (900, True)
    assert (p.key_ref.name, p.key_ref.key) == ("slurm-jwt", "jwt.key")
    assert (p.namespace, p.name, p.uid) == ("ns", "api", "uid-1")


def test_secret_ref_and_the_deprecated_key_ref_are_honoured() -> None:
    p = plan(secretRef={"name": "mine", "key": "token"}, refresh=False, lifetime="1h")
    assert (p.secret_name, p.secret_key, p.refresh, p.lifetime_seconds) == ("mine", "token", False, 3600)
    old = tokens.plan_of(
        Token.model_validate(
            {"metadata": {"name": "t"}, "spec": {"username": "u", "jwtHs256KeyRef": {"name": "old", "key": "k"}}}
        )
    )
    assert (old.key_ref.name, old.key_ref.key) == ("old", "k")
    # a secretRef without a name keeps the default name
    assert plan(secretRef={"key": "tok"}).secret_name == "api-jwt-slurm"


@pytest.mark.parametrize(
    ("spec", "reason"),
    [
        ({"lifetime": "soon"}, tokens.INVALID_LIFETIME),
        ({"lifetime": "0s"}, tokens.INVALID_LIFETIME),
        ({"username": " "}, tokens.INVALID_USERNAME),
        ({"jwtKeyRef": None}, tokens.JWT_KEY_MISSING),
        ({"jwtKeyRef": {"name": "", "key": "jwt.key"}}, tokens.JWT_KEY_MISSING),
    ],
    ids=["lifetime not a duration", "zero lifetime", "blank user", "no key ref", "key ref without a name"],
)
def test_bad_specs_are_problems_with_a_reason(spec: dict[str, Any], reason: str) -> None:
    with pytest.raises(tokens.TokenProblem) as err:
        plan(**spec)
    assert err.value.reason == reason


def test_invalid_lifetime_message_names_the_field() -> None:
    with pytest.raises(tokens.TokenProblem) as err:
        plan(lifetime="soon")
    assert "spec.lifetime" in err.value.message and "'soon'" in err.value.message


# ------------------------------------------------------------------------------------------ the key
def test_signing_key_from_the_key_secret() -> None:
    p = plan()
    assert tokens.signing_key(p, {"data": {"jwt.key": base64.b64encode(KEY).decode()}}) == KEY
    with pytest.raises(tokens.TokenProblem) as missing:
        tokens.signing_key(p, None)
    assert missing.value.reason == tokens.JWT_KEY_SECRET_NOT_FOUND
    assert "ns/slurm-jwt" in missing.value.message
    for data in ({}, {"other": b64("x")}, {"jwt.key": ""}, {"jwt.key": "!!not base64!!"}):
        with pytest.raises(tokens.TokenProblem) as absent:
            tokens.signing_key(p, {"data": data})
        assert absent.value.reason == tokens.JWT_KEY_NOT_FOUND


# ------------------------------------------------------------------------------------------ the Secret
def test_secret_body_is_owned_labelled_annotated_and_holds_the_jwt() -> None:
    p = plan()
    token = jwt.mint(KEY, "slurm", 900, now=NOW)
    body = tokens.secret_body(p, token, KEY)
    meta = body["metadata"]
    assert (meta["name"], meta["namespace"]) == ("api-jwt-slurm", "ns")
    assert meta["ownerReferences"] == [
        {
            "apiVersion": "slinky.slurm.net/v1beta1",
            "kind": "Token",
            "name": "api",
            "uid": "uid-1",
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]
    assert meta["labels"] == {wellknown.LABEL_APP: wellknown.APP_TOKEN, wellknown.LABEL_INSTANCE: "api"}
    assert meta["annotations"][wellknown.ANNOTATION_JWT_KEY_HASH] == tokens.key_hash(KEY)
    assert tokens.key_hash(KEY) != tokens.key_hash(OTHER_KEY)
    assert KEY.decode() not in str(body)
    assert base64.b64decode(body["data"]["SLURM_JWT"]).decode() == token
    assert "immutable" not in body
    assert tokens.secret_body(plan(refresh=False), token, KEY)["immutable"] is True


def test_secret_patch_keeps_foreign_owner_refs_and_carries_the_resource_version() -> None:
    p = plan(refresh=False)
    existing = written(plan())
    existing["metadata"]["ownerReferences"].append({"apiVersion": "v1", "kind": "ConfigMap", "name": "x", "uid": "u"})
    patch = tokens.secret_patch(p, existing, KEY, None)
    assert patch["metadata"]["resourceVersion"] == "7"
    assert [r["kind"] for r in patch["metadata"]["ownerReferences"]] == ["ConfigMap", "Token"]
    assert "data" not in patch and patch["immutable"] is True
    minted = tokens.secret_patch(plan(), existing, KEY, "a.b.c")
    assert base64.b64decode(minted["data"]["SLURM_JWT"]) == b"a.b.c" and "immutable" not in minted


def test_ownership() -> None:
    p = plan()
    secret = written(p)
    assert tokens.ownership(p, secret) == "ours"
    assert tokens.ownership(plan(uid="uid-2"), secret) == "stale"  # an earlier Token of this name
    assert tokens.ownership(plan(name="other"), secret) == "foreign"
    secret["metadata"]["ownerReferences"][0]["controller"] = False
    assert tokens.ownership(p, secret) == "foreign"
    assert tokens.ownership(p, {"metadata": {"name": "api-jwt-slurm"}}) == "foreign"


# ------------------------------------------------------------------------------------------ refresh
def test_no_secret_is_created() -> None:
    assert tokens.assess(plan(), None, KEY, NOW).action == "create"


def test_a_fresh_token_is_kept_until_80_percent_of_its_lifetime() -> None:
    p = plan(lifetime="100s")
    secret = written(p, issued=NOW)
    fresh = tokens.assess(p, secret, KEY, NOW + 79)
    assert (fresh.action, fresh.issued_at, fresh.refresh_at, fresh.adopt) == ("keep", NOW, NOW + 80, False)
    # upstream's rule: exp - lifetime/5
    assert fresh.refresh_at == NOW + 100 - 100 / 5
    assert tokens.assess(p, secret, KEY, NOW + 80).action == "mint"
    due = tokens.assess(p, secret, KEY, NOW + 150)
    assert (due.action, due.why) == ("mint", "it expired")


@pytest.mark.parametrize(
    ("change", "why"),
    [
        ({"key": OTHER_KEY}, "the key changed"),
        ({"user": "root"}, "for user 'root'"),
        ({"lifetime": 50}, "lifetime is 50s"),
        ({"garble": True}, "not a JWT"),
        ({"drop": True}, "no key SLURM_JWT"),
    ],
    ids=["rotated key", "username changed", "lifetime changed", "not a JWT", "key removed"],
)
def test_a_token_not_matching_the_key_or_spec_is_reminted_at_once(change: dict[str, Any], why: str) -> None:
    p = plan(lifetime="100s")
    secret = written(p, issued=NOW)
    if "key" in change:  # the key Secret was rotated: the Secret's JWT and hash are of the old key
        verdict = tokens.assess(p, secret, change["key"], NOW + 1)
    else:
        if "user" in change:
            secret["data"]["SLURM_JWT"] = b64(jwt.mint(KEY, change["user"], 100, now=NOW))
        if "lifetime" in change:
            secret["data"]["SLURM_JWT"] = b64(jwt.mint(KEY, "slurm", change["lifetime"], now=NOW))
        if "garble" in change:
            secret["data"]["SLURM_JWT"] = b64("hello")
        if "drop" in change:
            del secret["data"]["SLURM_JWT"]
        verdict = tokens.assess(p, secret, KEY, NOW + 1)
    assert verdict.action == "mint"
    assert why in verdict.why


def test_a_rotated_key_is_reminted_even_without_the_hash_annotation() -> None:
    p = plan()
    secret = written(p)
    del secret["metadata"]["annotations"]
    verdict = tokens.assess(p, secret, OTHER_KEY, NOW + 1)
    assert (verdict.action, verdict.why) == ("mint", "it is not a JWT signed by the key")


def test_a_secret_not_owned_by_the_token_is_a_conflict_and_never_touched() -> None:
    p = plan()
    secret = {"metadata": {"name": "api-jwt-slurm", "resourceVersion": "1"}, "data": {"SLURM_JWT": b64("x")}}
    with pytest.raises(tokens.TokenProblem) as err:
        tokens.assess(p, secret, KEY, NOW)
    assert err.value.reason == tokens.SECRET_CONFLICT
    owned_by_another = written(plan(name="other"))
    with pytest.raises(tokens.TokenProblem):
        tokens.assess(p, owned_by_another, KEY, NOW)


def test_a_secret_of_an_earlier_token_of_the_same_name_is_adopted() -> None:
    old = written(plan(uid="old"))
    verdict = tokens.assess(plan(uid="new"), old, KEY, NOW + 1)
    assert (verdict.action, verdict.adopt) == ("keep", True)


def test_refresh_false_writes_once_and_never_remints() -> None:
    p = plan(refresh=False, lifetime="100s")
    assert tokens.next_refresh(p, NOW) is None
    sealed = written(p, issued=NOW)
    assert sealed["immutable"] is True
    for now, key in ((NOW + 1, KEY), (NOW + 10_000, KEY), (NOW + 1, OTHER_KEY)):  # fresh, expired, rotated
        verdict = tokens.assess(p, sealed, key, now)
        assert (verdict.action, verdict.refresh_at) == ("keep", None)
    assert tokens.assess(p, sealed, KEY, NOW + 1).issued_at == NOW


def test_refresh_turned_off_seals_a_good_token_and_replaces_a_bad_one() -> None:
    on, off = plan(lifetime="100s"), plan(lifetime="100s", refresh=False)
    mutable = written(on, issued=NOW)
    assert tokens.assess(off, mutable, KEY, NOW + 1).action == "seal"
    assert tokens.assess(off, mutable, OTHER_KEY, NOW + 1).action == "mint"


def test_refresh_turned_on_over_an_immutable_secret_is_a_problem() -> None:
    sealed = written(plan(refresh=False))
    with pytest.raises(tokens.TokenProblem) as err:
        tokens.assess(plan(), sealed, KEY, NOW + 1)
    assert err.value.reason == tokens.IMMUTABLE_SECRET
    assert "delete it" in err.value.message


def test_next_refresh_of_a_new_token() -> None:
    assert tokens.next_refresh(plan(lifetime="5s"), NOW) == NOW + 4
    assert tokens.next_refresh(plan(), NOW) == NOW + 720  # 12 of 15 minutes
