"""The step ``sglang_build``: SGLang into the new venv, from its ref or wheel (action ``cuda13_sglang``).

By ``sglang_build_method`` (:mod:`cuda13_upgrade.sglang_build`; roles/sglang_build):

* ``source``: the tree must not be the serving stack's (editable installs share
  their tree); ``ansible.builtin.git`` checks the ref out into
  ``sglang_build_src``; SGLang needs a build when the checkout changed, the venv
  has no sglang, or its sglang is not the tree's (``pip show --files``). The build
  checks the toolkit (``CUDA_HOME``'s nvcc runs and is torch's CUDA release:
  :func:`cuda13_upgrade.components.toolkit_skew`), installs the build requirements,
  freezes the venv, writes every installed distribution as a constraint (pip,
  setuptools and wheel aside) and installs the tree editable with ``CUDA_HOME``,
  ``PATH`` (the toolkit's ``bin`` first), ``TMPDIR``, ``TORCH_CUDA_ARCH_LIST`` (the
  compute capabilities) and the operator's ``sglang_build_environment`` over them.
* ``wheel``: the plan from ``pip show`` (:func:`cuda13_upgrade.sglang_build.wheel_plan`);
  what must go first goes (an editable tree of an earlier source build, which pip
  would keep for ``sglang==<version>``); the venv is frozen and constrained as for
  the build; the preflight's resolution of the wheel (the exact file, its hash,
  ``--no-deps``) when it has one, else ``sglang==<version>`` from the indexes.

The step's record on the host (``sglang_build_record``, for the rollback) is
written before anything changes. Both methods end in the same checks (not in
check mode): when this run installed, no wheel of the stack was replaced
(:func:`cuda13_upgrade.stack.freeze_difference`), and sglang imports from where
the method puts it at the right version
(:func:`cuda13_upgrade.sglang_build.import_problems`).
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Mapping, Sequence
from typing import Any

from cuda13_upgrade import components, sglang_build, stack, versions
from cuda13_upgrade import resolve as rules
from cuda13_upgrade.errors import Cuda13Error
from cuda13_upgrade.steps.host import Host, StepFailed, json_text
from cuda13_upgrade.steps.wheels import HIDDEN, pip

#: The PATH of the build after the toolkit's bin.
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def _changed(result: Mapping[str, Any]) -> bool:
    return bool(result.get("changed"))


def _last_line(found: Mapping[str, Any]) -> str:
    """A failed command's last line of stderr, else its exit status."""
    lines = [line for line in str(found.get("stderr") or "").splitlines() if line.strip()]
    return lines[-1].strip() if lines else f"rc {found.get('rc')}"


def _index_args(options: Mapping[str, Any]) -> list[str]:
    return [
        "--index-url",
        str(options.get("sglang_build_index_url") or ""),
        *[f"--extra-index-url={url}" for url in options.get("sglang_build_extra_index_urls") or []],
    ]


def _read(host: Host, args: Mapping[str, Any]) -> dict[str, Any]:
    return host.module("cuda13_venv_read", dict(args), check_mode=False)


def _freeze(host: Host, venv: str) -> list[str]:
    """``pip freeze --all --isolated --exclude-editable`` of ``venv``, as ``stdout_lines``."""
    found = _read(host, {"venv": venv, "freeze": True})["freeze"]
    if found["rc"] != 0:
        raise StepFailed(f"pip freeze in {venv} failed (rc {found['rc']}): {found['stderr'].strip()}")
    return list(found["lines"])


def _constraints(lines: Sequence[str], skip: str) -> str:
    """The constraints file: every frozen line but those that ``skip`` matches, each on a line."""
    pattern = re.compile(skip)
    return "\n".join(line for line in lines if not pattern.match(line)) + "\n"


def _write(host: Host, path: str, content: str) -> bool:
    return _changed(
        host.module("cuda13_record", {"files": [{"path": path, "content": content, "mode": "0644"}]})
    )


def write_record(host: Host, options: Mapping[str, Any]) -> tuple[dict[str, Any], bool]:
    """Write the step's record (``sglang_build_record``) merged with what earlier runs recorded
    (:func:`cuda13_upgrade.sglang_build.install_record`); returns it and whether the file changed.

    A rollback that removes the new stack removes exactly the paths it names (roles/rollback)."""
    path = str(options["sglang_build_record"])
    found = host.module("cuda13_record", {"read": [path]}, check_mode=False)["read"].get(path) or {}
    previous = None
    if found.get("content"):
        try:
            previous = json.loads(found["content"])
        except ValueError:
            previous = None
    record = sglang_build.install_record(
        previous if isinstance(previous, Mapping) else None,
        str(options["sglang_build_method"]),
        str(options["sglang_build_version"]),
        str(options["sglang_build_repo"]),
        str(options["sglang_build_src"]),
        str(options["sglang_build_venv"]),
    )
    written = host.module(
        "cuda13_record", {"files": [{"path": path, "content": json_text(record), "mode": "0644"}]}
    )
    return record, _changed(written)


def check_toolkit(host: Host, options: Mapping[str, Any]) -> dict[str, Any]:
    """Check the toolkit SGLang builds against (``CUDA_HOME``, also what FlashInfer's JIT
    compiles with): it must be the CUDA release torch was built for, since nvcc and the CUDA
    headers of another release make the build or the JIT fail ("CUDA compiler and CUDA toolkit
    headers are incompatible").

    Returns ``{"nvcc": nvcc --version's text, "torch_cuda": str}``.

    Raises:
        StepFailed: nvcc does not run (naming the option), torch does not import, or the
        releases differ (``"<skew>. Option: sglang_build_cuda_home=...; nothing was built."``).
    """
    home = str(options["sglang_build_cuda_home"])
    venv = str(options["sglang_build_venv"])
    nvcc = _read(host, {"nvcc": home})["nvcc"]
    if nvcc["rc"] != 0:
        why = nvcc.get("msg") or nvcc.get("stderr")
        raise StepFailed(
            f"{home}/bin/nvcc does not run ({why}). Option: sglang_build_cuda_home={home}. Install the CUDA "
            f"{options.get('cuda13_toolkit_release')} toolkit (the cuda_toolkit role) or point "
            "sglang_build_cuda_home at one."
        )
    torch = _read(host, {"venv": venv, "torch_cuda": True})["torch_cuda"]
    if torch["rc"] != 0:
        raise StepFailed(f"{venv}/bin/python cannot read torch.version.cuda: {_last_line(torch)}")
    try:
        skew = components.toolkit_skew(nvcc["stdout"], torch["stdout"].strip())
    except Cuda13Error as exc:
        raise StepFailed(f"{exc} Option: sglang_build_cuda_home={home}; nothing was built.") from exc
    if skew:
        raise StepFailed(f"{'; '.join(skew)}. Option: sglang_build_cuda_home={home}; nothing was built.")
    return {"nvcc": nvcc["stdout"], "torch_cuda": torch["stdout"].strip()}


def _environment(options: Mapping[str, Any], base: Mapping[str, str]) -> dict[str, str]:
    operator = {str(k): str(v) for k, v in (options.get("sglang_build_environment") or {}).items()}
    return {**base, **operator}


def _source(
    host: Host, options: Mapping[str, Any], capabilities: Sequence[str], state: dict[str, Any]
) -> None:
    """The source method: the checkout, the decision, the toolkit's check and the build; ``state``
    gets ``needed``, ``built``, ``before`` (the freeze before the build), ``changed``."""
    src, venv = str(options["sglang_build_src"]), str(options["sglang_build_venv"])
    version, home = str(options["sglang_build_version"]), str(options["sglang_build_cuda_home"])
    checkout = host.module(
        "ansible.builtin.git",
        {"repo": str(options["sglang_build_repo"]), "dest": src, "version": version, "force": False},
    )
    state["changed"] = _changed(checkout) or state["changed"]
    show = _read(host, {"venv": venv, "show": "sglang", "show_files": True})["show"]
    needed = _changed(checkout) or show["rc"] != 0 or f"{src}/python" not in show["stdout"]
    state["needed"] = needed
    if not needed:
        return
    if host.check_mode:
        # In --check the venv and the tree may not exist yet: say what would happen.
        host.tell(f"Would build SGLang {version} from {src} into {venv} against {home}.")
        state["changed"] = True
        return
    state["toolkit"] = check_toolkit(host, options)
    tmpdir = str(options["sglang_build_pip_tmpdir"])
    hidden = bool(options.get("sglang_build_environment"))
    state["changed"] = (
        _changed(host.module("ansible.builtin.file", {"path": tmpdir, "state": "directory", "mode": "0700"}))
        or state["changed"]
    )
    index = _index_args(options)
    build_requirements = [str(r) for r in options.get("sglang_build_build_requirements") or []]
    if build_requirements:
        done = pip(
            host,
            {
                "name": build_requirements,
                "virtualenv": venv,
                "extra_args": shlex.join(["--isolated", *index]),
            },
            # The operator's environment too: it reads the same indexes (a NETRC, a proxy).
            environment=_environment(options, {"TMPDIR": tmpdir}),
            hidden=hidden,
            changed=state["changed"],
        )
        state["changed"] = _changed(done) or state["changed"]
    state["before"] = _freeze(host, venv)
    # The constraints keep every installed distribution (the cu130 torch, the kernel and
    # flashinfer wheels) at its version: SGLang's own dependencies cannot replace them with a
    # PyPI build.
    constraints = f"{venv}/sglang-build-constraints.txt"
    _write(host, constraints, _constraints(state["before"], r"^(pip|setuptools|wheel)=="))
    environment = {"CUDA_HOME": home, "TMPDIR": tmpdir, "PATH": f"{home}/bin:{SYSTEM_PATH}"}
    if capabilities:
        try:
            environment["TORCH_CUDA_ARCH_LIST"] = versions.torch_cuda_arch_list(list(capabilities))
        except Cuda13Error as exc:
            raise StepFailed(f"sglang_build_compute_capabilities: {exc}") from exc
    extra = [str(a) for a in options.get("sglang_build_pip_extra_args") or []]
    pip(
        host,
        {
            "name": f"{src}/python",
            "editable": True,
            "virtualenv": venv,
            "extra_args": shlex.join(["--isolated", *index, "--constraint", constraints, *extra]),
        },
        environment=_environment(options, environment),
        hidden=hidden,
        changed=True,
    )
    state["changed"] = True
    state["built"] = True


def _wheel(
    host: Host, options: Mapping[str, Any], resolved: Sequence[Mapping[str, Any]], state: dict[str, Any]
) -> None:
    """The wheel method: the plan, what goes first, the install; ``state`` gets ``plan``,
    ``needed``, ``built``, ``before`` (the freeze before the install), ``wheel_from``, ``changed``."""
    venv, version = str(options["sglang_build_venv"]), str(options["sglang_build_version"])
    show = _read(host, {"venv": venv, "show": "sglang"})["show"]
    try:
        plan = sglang_build.wheel_plan(
            sglang_build.parse_pip_show(show["stdout"] if show["rc"] == 0 else ""), version
        )
        requirement = sglang_build.requirement("wheel", str(options.get("sglang_build_repo") or ""), version)
    except ValueError as exc:
        raise StepFailed(str(exc)) from exc
    wheel = sglang_build.resolved_wheel(list(resolved) or None, version)
    state.update(plan=plan, requirement=requirement, needed=plan["needed"])
    if not plan["needed"]:
        return
    if host.check_mode:
        # In --check the venv may not exist yet: say what would happen.
        where = "the preflight's resolution" if wheel else str(options.get("sglang_build_index_url"))
        host.tell(f"Would install {requirement} ({plan['reason']}) into {venv} from {where}.")
        state["changed"] = True
        return
    tmpdir = str(options["sglang_build_pip_tmpdir"])
    hidden = bool(options.get("sglang_build_environment"))
    state["changed"] = (
        _changed(host.module("ansible.builtin.file", {"path": tmpdir, "state": "directory", "mode": "0700"}))
        or state["changed"]
    )
    if plan["remove_first"]:
        # An editable tree of an earlier source build would satisfy sglang==<version> for
        # pip, and stay.
        pip(
            host,
            {"name": "sglang", "state": "absent", "virtualenv": venv, "extra_args": "--isolated"},
            environment={},
            hidden=False,
            changed=state["changed"],
        )
        state["changed"] = True
        host.tell(f"removed the sglang {venv} held, because {plan['reason']}")
    state["before"] = _freeze(host, venv)
    constraints = f"{venv}/sglang-build-constraints.txt"
    _write(host, constraints, _constraints(state["before"], r"^(pip|setuptools|wheel|sglang)=="))
    index = _index_args(options)
    extra = [str(a) for a in options.get("sglang_build_pip_extra_args") or []]
    environment = _environment(options, {"TMPDIR": tmpdir})
    if wheel:
        dest = f"{venv}/sglang-build-requirement.txt"
        _write(host, dest, rules.resolved_requirements(wheel))
        hashes = ["--require-hashes"] if wheel[0].get("sha256") else []
        args = {
            "requirements": dest,
            "virtualenv": venv,
            "extra_args": shlex.join(["--isolated", "--no-deps", *index, *hashes, *extra]),
        }
        state["wheel_from"] = "resolved"
    else:
        args = {
            "name": requirement,
            "virtualenv": venv,
            "extra_args": shlex.join(["--isolated", *index, "--constraint", constraints, *extra]),
        }
        state["wheel_from"] = "indexes"
    pip(host, args, environment=environment, hidden=hidden, changed=True)
    state["changed"] = True
    state["built"] = True


def check_install(host: Host, options: Mapping[str, Any], before: Sequence[str] | None) -> dict[str, Any]:
    """The checks both methods end in: no wheel of the stack replaced (when this run installed:
    ``before`` is its freeze), and sglang imports from where the method puts it at the right version.

    Returns ``{"imported": {"version", "file", "dist"}, "freeze_difference": {"removed",
    "added"} or None}``.

    Raises:
        StepFailed: ``"Building SGLang replaced <removed> with <added> in <venv>."`` (``Installing
        SGLang's wheel ...`` for the wheel), sglang does not import, or the import's problems,
        joined by ``; `` and ending in a full stop.
    """
    method, venv = str(options["sglang_build_method"]), str(options["sglang_build_venv"])
    difference = None
    if before is not None:
        difference = stack.freeze_difference(list(before), _freeze(host, venv))
        if difference["removed"]:
            what = "Building SGLang" if method == "source" else "Installing SGLang's wheel"
            removed, added = ", ".join(difference["removed"]), ", ".join(difference["added"])
            raise StepFailed(
                f"{what} replaced {removed} with {added} in {venv}.", {"freeze_difference": difference}
            )
    found = _read(host, {"venv": venv, "sglang_import": True})["sglang_import"]
    if found["rc"] != 0 or not isinstance(found.get("record"), Mapping):
        raise StepFailed(
            f"sglang does not import in {venv}: {_last_line(found)}", {"freeze_difference": difference}
        )
    imported = dict(found["record"])
    problems = sglang_build.import_problems(
        imported, method, str(options["sglang_build_version"]), str(options["sglang_build_src"]), venv
    )
    if problems:
        raise StepFailed(f"{'; '.join(problems)}.", {"imported": imported, "freeze_difference": difference})
    return {"imported": imported, "freeze_difference": difference}


def build(
    host: Host,
    options: Mapping[str, Any],
    *,
    resolved: Sequence[Mapping[str, Any]] = (),
    compute_capabilities: Sequence[str] = (),
) -> dict[str, Any]:
    """SGLang into ``sglang_build_venv`` by ``sglang_build_method`` (see the module docstring).

    Args:
        host: the host.
        options: the options record (``sglang_build_*``, ``cuda13_old_sglang_src``,
            ``cuda13_toolkit_release``).
        resolved: the preflight's resolved set (the wheel method installs its sglang wheel
            exactly when it holds the release's); empty for none.
        compute_capabilities: the GPUs' (the preflight's); ``sglang_build_compute_capabilities``
            wins when non-empty; empty leaves ``TORCH_CUDA_ARCH_LIST`` unset.

    Returns:
        ``{"method", "version", "src" (None for the wheel), "venv", "requirement", "built": this
        run built or installed sglang, "needed": it had to, "plan": the wheel method's plan or
        None, "wheel_from": where the wheel came from, ``"resolved"`` (the preflight's resolution)
        or ``"indexes"``, None when no wheel was installed, "record": what was written to
        sglang_build_record (None in check mode), "imported": {"version", "file", "dist"} or None
        (check mode), "freeze_difference": {"removed", "added"} or None (nothing installed),
        "changed": bool}``.

    Raises:
        StepFailed: the tree is the serving one, the toolkit or torch's CUDA is wrong, pip
        failed, a wheel was replaced, or sglang imports from elsewhere or another version.
    """
    method = str(options.get("sglang_build_method") or "source")
    if method not in sglang_build.METHODS:
        raise StepFailed(f"sglang_build_method must be one of {list(sglang_build.METHODS)}, got {method!r}")
    src, venv = str(options["sglang_build_src"]), str(options["sglang_build_venv"])
    version = str(options["sglang_build_version"])
    capabilities = [str(c) for c in options.get("sglang_build_compute_capabilities") or []] or [
        str(c) for c in compute_capabilities or []
    ]
    if method == "source":
        old = str(options.get("cuda13_old_sglang_src") or "")
        paths = _read(host, {"realpath": [src, old]})["realpath"]
        if paths.get(src) == paths.get(old):
            raise StepFailed(
                f"sglang_build_src={src} is the serving stack's tree (cuda13_old_sglang_src={old}): editable "
                "installs share their tree, so the new stack needs its own clone."
            )
    try:
        requirement = sglang_build.requirement(method, str(options.get("sglang_build_repo") or ""), version)
    except ValueError as exc:
        raise StepFailed(str(exc)) from exc
    state: dict[str, Any] = {
        "changed": False,
        "built": False,
        "needed": False,
        "before": None,
        "plan": None,
        "wheel_from": None,
    }
    record = {
        "method": method,
        "version": version,
        "src": src if method == "source" else None,
        "venv": venv,
        "requirement": requirement,
        "built": False,
        "needed": False,
        "plan": None,
        "wheel_from": None,
        "record": None,
        "imported": None,
        "freeze_difference": None,
        "changed": False,
    }

    def failed(exc: StepFailed) -> StepFailed:
        exc.record = {
            **record,
            "built": state["built"],
            "needed": state["needed"],
            "plan": state["plan"],
            "wheel_from": state["wheel_from"],
            **exc.record,
            "changed": state["changed"] or bool(exc.record.get("changed")),
        }
        if exc.msg == HIDDEN:
            exc.record.pop("module_result", None)
        return exc

    try:
        if not host.check_mode:
            # What this step installs, kept on the host before anything changes.
            record["record"], state["changed"] = write_record(host, options)
        if method == "source":
            _source(host, options, capabilities, state)
        else:
            _wheel(host, options, resolved, state)
        checked = {"imported": None, "freeze_difference": None}
        if not host.check_mode:
            checked = check_install(host, options, state["before"])
    except StepFailed as exc:
        raise failed(exc)  # noqa: B904 - the same exception, its record completed
    return {
        **record,
        "built": state["built"],
        "needed": state["needed"],
        "plan": state["plan"],
        "wheel_from": state["wheel_from"],
        **checked,
        "changed": state["changed"],
    }
