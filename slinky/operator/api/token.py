"""Token: an HS256 JWT for one Slurm user, kept fresh in a Secret (upstream `api/v1beta1/token_types.go`)."""

from __future__ import annotations

from pydantic import Field

from slinky.operator.api.base import ApiModel, Conditions, FreeForm, SecretKeyRef

DEFAULT_LIFETIME = "15m"
DEFAULT_SECRET_KEY = "SLURM_JWT"


class TokenSpec(ApiModel):
    """The desired state of a Token."""

    jwt_hs256_key_ref: SecretKeyRef | None = Field(None, description="Deprecated: use jwtKeyRef.")
    jwt_key_ref: SecretKeyRef | None = Field(None, description="The HS256 key to sign with (same namespace).")
    username: str = Field(description="The Slurm user the token is for.")
    lifetime: str | None = Field(None, description="How long a token is valid (Go duration); default 15m.")
    refresh: bool | None = Field(True, description="Re-mint at 80 % of the lifetime; false makes the Secret immutable.")
    secret_ref: SecretKeyRef | None = Field(
        None, description="The Secret and key to write; default <token>-jwt-<username>, key SLURM_JWT."
    )

    def jwt_key(self) -> SecretKeyRef | None:
        """The key reference, the deprecated field as fallback."""
        return self.jwt_key_ref or self.jwt_hs256_key_ref


class TokenStatus(ApiModel):
    """The observed state of a Token."""

    issued_at: str | None = Field(
        None, description="When the current JWT was issued.", json_schema_extra={"format": "date-time"}
    )
    conditions: Conditions | None = Field(None, description="The latest observations of the Token's state.")


class Token(ApiModel):
    """A JWT kept in a Secret."""

    api_version: str = "slinky.slurm.net/v1beta1"
    kind: str = "Token"
    metadata: FreeForm = Field(default_factory=dict)
    spec: TokenSpec
    status: TokenStatus = Field(default_factory=TokenStatus)
