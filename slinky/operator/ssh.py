"""sshd in login pods and in the pods of a NodeSet with `ssh.enabled`, as upstream's builders make it.

Pure: the names of the objects (upstream's `<name>-ssh-config` ConfigMap and a LoginSet's `<name>-ssh-host-keys`
Secret), sshd_config (upstream's lines, then the user's `extraSshdConfig`), root's authorized_keys (a LoginSet's
`rootSshAuthorizedKeys`), and a fresh set of host keys (RSA 3072, ECDSA P-256, Ed25519, OpenSSH format), made
once per LoginSet so every login pod, and each one made again, shows the same host keys. The images start sshd
when the pod has `SSHD=1` (deploy/images/slurm/ssh-services.sh).
"""

from __future__ import annotations

import hashlib
from typing import Final

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa

SSHD_CONFIG_FILE: Final = "sshd_config"
SSHD_CONFIG_PATH: Final = f"/etc/ssh/{SSHD_CONFIG_FILE}"
AUTHORIZED_KEYS_FILE: Final = "authorized_keys"
ROOT_AUTHORIZED_KEYS_PATH: Final = f"/root/.ssh/{AUTHORIZED_KEYS_FILE}"
HOST_KEY_FILES: Final = ("ssh_host_rsa_key", "ssh_host_ecdsa_key", "ssh_host_ed25519_key")
SSH_CONFIG_VOLUME: Final = "ssh-config"
SSH_HOST_KEYS_VOLUME: Final = "ssh-host-keys"
SSHD_ENV: Final = {"name": "SSHD", "value": "1"}
"""What tells the image's entry point to start sshd beside its daemon."""
ANNOTATION_SSHD_CONF_HASH: Final = "slinky.slurm.net/sshd-conf-hash"
"""On the pod template: a changed sshd_config or authorized_keys makes new pods (a subPath mount never updates)."""
PORT: Final = 22


def config_name(owner: str) -> str:
    return f"{owner}-ssh-config"


def host_keys_name(loginset: str) -> str:
    return f"{loginset}-ssh-host-keys"


def sshd_config(extra: str | None, *, login: bool) -> str:
    """Upstream's sshd_config: the distribution's drop-ins, PAM, sftp; X11 forwarding on login pods, public key
    or password on workers (pam_slurm_adopt's advice); then `extraSshdConfig` as given."""
    lines = ["#", "### GENERAL ###", "Include /etc/ssh/sshd_config.d/*.conf", "UsePAM yes"]
    if login:
        lines.append("X11Forwarding yes")
    lines.append("Subsystem sftp internal-sftp")
    if not login:
        lines.append("AuthenticationMethods publickey password")
    lines += ["#", "### EXTRA CONFIG ###", (extra or "").rstrip("\n")]
    return "\n".join(lines) + "\n"


def authorized_keys(keys: str | None) -> str:
    return "\n".join(["#", "### SLINKY ###", (keys or "").rstrip("\n")]) + "\n"


def config_hash(data: dict[str, str]) -> str:
    text = "\0".join(f"{k}={v}" for k, v in sorted(data.items()))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def host_keys(comment: str = "slinky") -> dict[str, str]:
    """A new set of host keys: `<file>` (OpenSSH private key) and `<file>.pub` for each of :data:`HOST_KEY_FILES`."""
    keys: dict[str, rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey | ed25519.Ed25519PrivateKey] = {
        "ssh_host_rsa_key": rsa.generate_private_key(public_exponent=65537, key_size=3072),
        "ssh_host_ecdsa_key": ec.generate_private_key(ec.SECP256R1()),
        "ssh_host_ed25519_key": ed25519.Ed25519PrivateKey.generate(),
    }
    out = {}
    for name, key in keys.items():
        private = key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH, serialization.NoEncryption()
        )
        public = key.public_key().public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
        out[name] = private.decode()
        out[f"{name}.pub"] = f"{public.decode()} {comment}\n"
    return out
