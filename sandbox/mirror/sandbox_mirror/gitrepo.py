"""``git/sglang.git``: a bare repository shaped like SGLang's, cloneable over dumb HTTP.

It is built from ``sandbox/sglang-src`` (the stand-in source tree, at version
``catalog.SGLANG_SOURCE_VERSION``): one commit per release of ``catalog.SGLANG_RELEASES``
with the version strings of ``python/pyproject.toml`` and ``python/sglang/version.py``
rewritten and the ``[project].dependencies`` of ``python/pyproject.toml`` set to what that
release's real ``pyproject.toml`` declares about the imitated distributions
(``catalog.sglang_dependencies``, from the recorded sdist), an annotated tag ``v<version>``
on each, branch ``main`` at the last. Authors and
dates are fixed and git runs without user or system configuration, so the commit ids are the
same on every rebuild and every machine. ``git update-server-info`` writes ``info/refs`` and
``objects/info/packs`` so that ``python3 -m http.server`` can serve clones.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from sandbox_mirror.catalog import SGLANG_AUTHOR, SGLANG_RELEASES, SGLANG_SOURCE_VERSION, sglang_dependencies

_VERSIONED = {
    "python/pyproject.toml": 'version = "{v}"',
    "python/sglang/version.py": '__version__ = "{v}"',
}
_SKIP_PARTS = {"__pycache__", ".git", ".pytest_cache"}
_SKIP_SUFFIXES = (".pyc", ".egg-info")
_SKIP_NAMES = {"_build_info.json"}


def source_files(src: Path) -> dict[str, bytes]:
    """The files of the stand-in source tree that belong in the repository."""
    files: dict[str, bytes] = {}
    for path in sorted(src.rglob("*")):
        rel = path.relative_to(src)
        if path.is_dir() or _SKIP_PARTS.intersection(rel.parts) or path.name in _SKIP_NAMES:
            continue
        if any(part.endswith(_SKIP_SUFFIXES) for part in rel.parts):
            continue
        files[rel.as_posix()] = path.read_bytes()
    return files


def _versioned(files: dict[str, bytes], version: str) -> dict[str, bytes]:
    out = dict(files)
    for rel, pattern in _VERSIONED.items():
        text = out[rel].decode()
        current = pattern.format(v=SGLANG_SOURCE_VERSION)
        if current not in text:
            raise ValueError(f"{rel} does not contain {current!r}")
        out[rel] = text.replace(current, pattern.format(v=version)).encode()
    out["python/pyproject.toml"] = with_dependencies(out["python/pyproject.toml"].decode(), version).encode()
    return out


def with_dependencies(pyproject: str, version: str) -> str:
    """``pyproject`` with its ``dependencies = [...]`` list set to SGLang ``version``'s."""
    block = "dependencies = [\n" + "".join(f'  "{d}",\n' for d in sglang_dependencies(version)) + "]"
    new, count = re.subn(r"(?ms)^dependencies = \[.*?^\]", lambda _: block, pyproject)
    if count != 1:
        raise ValueError("python/pyproject.toml has no dependencies = [...] list")
    return new


def _git(args: list[str], cwd: Path, env: dict[str, str]) -> str:
    proc = subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)} failed:\n{proc.stderr}")
    return proc.stdout.strip()


def _clean_env(home: Path) -> dict[str, str]:
    keep = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    return dict(
        keep,
        HOME=str(home),
        GIT_CONFIG_NOSYSTEM="1",
        GIT_CONFIG_GLOBAL=os.devnull,
        GIT_AUTHOR_NAME=SGLANG_AUTHOR[0],
        GIT_AUTHOR_EMAIL=SGLANG_AUTHOR[1],
        GIT_COMMITTER_NAME=SGLANG_AUTHOR[0],
        GIT_COMMITTER_EMAIL=SGLANG_AUTHOR[1],
        TZ="UTC",
    )


def build_sglang_repo(src: Path, bare: Path) -> dict[str, str]:
    """Create ``bare`` from ``src``; return tag -> commit id."""
    files = source_files(src)
    tags: dict[str, str] = {}
    with tempfile.TemporaryDirectory(prefix="sandbox-sglang-") as tmp:
        work = Path(tmp) / "work"
        work.mkdir()
        env = _clean_env(Path(tmp))
        _git(["init", "-q", "-b", "main"], work, env)
        for release in SGLANG_RELEASES:
            for child in work.iterdir():
                if child.name != ".git":
                    shutil.rmtree(child) if child.is_dir() else child.unlink()
            for rel, data in _versioned(files, release.version).items():
                path = work / rel
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(data)
                os.chmod(path, 0o644)
            dated = dict(env, GIT_AUTHOR_DATE=release.date, GIT_COMMITTER_DATE=release.date)
            _git(["add", "-A"], work, dated)
            _git(["commit", "-q", "--no-verify", "-m", release.message], work, dated)
            _git(["tag", "-a", release.tag, "-m", f"SGLang {release.tag}"], work, dated)
            tags[release.tag] = _git(["rev-parse", f"{release.tag}^{{commit}}"], work, env)
        if bare.exists():
            shutil.rmtree(bare)
        bare.parent.mkdir(parents=True, exist_ok=True)
        _git(["clone", "-q", "--bare", "--no-local", str(work), str(bare)], Path(tmp), env)
    env = _clean_env(bare)
    if "origin" in _git(["remote"], bare, env).split():
        _git(["remote", "remove", "origin"], bare, env)
    _git(["symbolic-ref", "HEAD", "refs/heads/main"], bare, env)
    _git(["repack", "-a", "-d", "-q"], bare, env)
    _git(["pack-refs", "--all"], bare, env)
    shutil.rmtree(bare / "hooks", ignore_errors=True)
    (bare / "description").write_text("SGLang (sandbox stand-in)\n")
    _git(["update-server-info"], bare, env)
    return tags
