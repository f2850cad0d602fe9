"""Authentication to slurmrestd with ``rest_auth/jwt``.

Each request carries ``X-SLURM-USER-NAME`` and ``X-SLURM-USER-TOKEN``. The token comes from a
:class:`TokenProvider`: a static token, or a file that is re-read whenever its mtime or size changes, so a
rotated token (e.g. a re-mounted Kubernetes Secret) is picked up by the next request without a restart.
A ``SLURM_JWT=`` prefix, as ``scontrol token`` prints it, is stripped.

No object here ever puts a token into a ``repr``, a log record or an exception message.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Generator
from typing import Protocol

import httpx
from pydantic import SecretStr

from slinky.clients.errors import ConfigError
from slinky.config import SlurmSettings

__all__ = [
    "USER_NAME_HEADER",
    "USER_TOKEN_HEADER",
    "SlurmAuth",
    "StaticToken",
    "TokenFile",
    "TokenProvider",
    "clean_token",
    "token_from_settings",
]

USER_NAME_HEADER = "X-SLURM-USER-NAME"
USER_TOKEN_HEADER = "X-SLURM-USER-TOKEN"
_PREFIX = "SLURM_JWT="


def clean_token(raw: str) -> str:
    """Strip whitespace and a ``SLURM_JWT=`` prefix from a token as ``scontrol token`` prints it."""
    token = raw.strip()
    if token.startswith(_PREFIX):
        token = token[len(_PREFIX) :].strip()
    return token


class TokenProvider(Protocol):
    """Something that returns the current JWT; called once per request."""

    def token(self) -> str:
        """Return the current token ("" for none)."""
        ...


class StaticToken:
    """A token that never changes.

    Args:
        token: The JWT, plain or as a ``SecretStr``; a ``SLURM_JWT=`` prefix is stripped.
    """

    def __init__(self, token: str | SecretStr) -> None:
        raw = token.get_secret_value() if isinstance(token, SecretStr) else token
        self._token = clean_token(raw)

    def token(self) -> str:
        """Return the token."""
        return self._token

    def __repr__(self) -> str:
        return "StaticToken(***)"


class TokenFile:
    """A token read from a file, re-read when the file's mtime or size changes.

    A ``stat`` per request is cheap (about a microsecond) and makes rotation take effect at once.
    If the file disappears for a moment during an atomic replace, the last good token is kept.

    Args:
        path: The file holding the JWT.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = os.fspath(path)
        self._lock = threading.Lock()
        self._stamp: tuple[int, int] | None = None
        self._token = ""
        self.reads = 0
        # Fail early on a missing file rather than at the first request.
        self.token()

    def token(self) -> str:
        """Return the current token, re-reading the file if it changed.

        Raises:
            ConfigError: The file cannot be read and no token was read before.
        """
        try:
            st = os.stat(self.path)
        except OSError as exc:
            if self._stamp is not None:
                return self._token
            raise ConfigError(f"cannot read the Slurm token file {self.path}: {exc.strerror}") from None
        stamp = (st.st_mtime_ns, st.st_size)
        if stamp != self._stamp:
            with self._lock:
                if stamp != self._stamp:
                    with open(self.path, encoding="utf-8") as handle:
                        self._token = clean_token(handle.read())
                    self._stamp = stamp
                    self.reads += 1
        return self._token

    def __repr__(self) -> str:
        return f"TokenFile({self.path!r})"


class SlurmAuth(httpx.Auth):
    """httpx auth that adds the Slurm user name and the current token to every request.

    Args:
        user_name: Sent as ``X-SLURM-USER-NAME``.
        provider: Where the token comes from; None sends no token (``rest_auth/local``).
    """

    def __init__(self, user_name: str, provider: TokenProvider | None = None) -> None:
        self.user_name = user_name
        self.provider = provider

    def current_token(self) -> str:
        """The token the next request will carry ("" for none); used to redact errors."""
        return self.provider.token() if self.provider is not None else ""

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        """Set the two Slurm headers."""
        request.headers[USER_NAME_HEADER] = self.user_name
        token = self.current_token()
        if token:
            request.headers[USER_TOKEN_HEADER] = token
        yield request

    def __repr__(self) -> str:
        return f"SlurmAuth(user_name={self.user_name!r}, provider={self.provider!r})"


def token_from_settings(settings: SlurmSettings) -> TokenProvider | None:
    """The token of ``Settings().slurm``: a token file wins over a static token; None without either."""
    if settings.jwt_file:
        return TokenFile(settings.jwt_file)
    if settings.jwt is not None:
        return StaticToken(settings.jwt)
    return None
