"""The sandbox repository's signing key: generated once per checkout, then reused.

The key lives in a private GnuPG home (``.sandbox/gnupg`` by default, never committed). It is
an ed25519 signing key without passphrase; apt verifies with the exported binary public key
(``signed-by=`` keyring), never with ``trusted=yes``.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from sandbox_mirror.catalog import APT_KEY_UID


class Gpg:
    """``gpg`` run against one home directory, in batch mode."""

    def __init__(self, home: Path) -> None:
        self.home = home

    def run(self, *args: str, input_bytes: bytes | None = None) -> bytes:
        cmd = ["gpg", "--homedir", str(self.home), "--batch", "--quiet", "--no-tty", *args]
        proc = subprocess.run(cmd, input=input_bytes, capture_output=True, check=False)
        if proc.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed:\n{proc.stderr.decode(errors='replace')}")
        return proc.stdout

    def ensure_key(self) -> str:
        """Fingerprint of the signing key, generating it on first use."""
        self.home.mkdir(parents=True, exist_ok=True)
        os.chmod(self.home, 0o700)
        fpr = self._fingerprint()
        if fpr is None:
            self.run(
                "--pinentry-mode",
                "loopback",
                "--passphrase",
                "",
                "--quick-gen-key",
                APT_KEY_UID,
                "ed25519",
                "sign",
                "never",
            )
            fpr = self._fingerprint()
        if fpr is None:
            raise RuntimeError(f"no signing key in {self.home} after generating one")
        return fpr

    def _fingerprint(self) -> str | None:
        try:
            out = self.run("--with-colons", "--list-secret-keys", APT_KEY_UID)
        except RuntimeError:
            return None
        for line in out.decode().splitlines():
            if line.startswith("fpr:"):
                return line.split(":")[9]
        return None

    def export_public(self, fpr: str) -> bytes:
        """The public key as a binary OpenPGP keyring (usable as an apt ``signed-by`` file)."""
        return self.run("--export", fpr)

    def clearsign(self, fpr: str, data: bytes) -> bytes:
        return self.run("--local-user", fpr, "--digest-algo", "SHA512", "--clearsign", input_bytes=data)

    def detach_sign(self, fpr: str, data: bytes) -> bytes:
        return self.run(
            "--local-user",
            fpr,
            "--digest-algo",
            "SHA512",
            "--armor",
            "--detach-sign",
            input_bytes=data,
        )

    def stop_agent(self) -> None:
        """Stop the gpg-agent this home started (signing leaves one running)."""
        subprocess.run(
            ["gpgconf", "--homedir", str(self.home), "--kill", "gpg-agent"],
            capture_output=True,
            check=False,
        )
