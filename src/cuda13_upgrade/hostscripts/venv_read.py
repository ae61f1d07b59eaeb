"""What a virtual environment on the host holds, read with its own tools (module ``cuda13_venv_read``).

Runs on the managed host, standard library only. Reads only: the steps that
install the new stack (``cuda13_upgrade.steps.wheels``, ``.sglang``) decide from
what this returns. Each read is asked for by its argument and answered under the
same name; a read that was not asked for is None:

* ``python``: an interpreter; ``python_version`` is its ``platform.python_version()``
  (the interpreter that makes the new venv, part of the preflight's resolution key);
* ``freeze``: ``<venv>/bin/python -m pip freeze --all --isolated`` (with
  ``--exclude-editable`` unless ``exclude_editable`` is false): ``{"rc", "lines",
  "stderr"}``, ``lines`` as Ansible's ``stdout_lines`` (``str.splitlines``);
* ``show``: a distribution's name, ``<venv>/bin/python -m pip show [--files] --isolated
  <name>`` (``show_files``): ``{"rc", "stdout", "stderr"}`` (rc 1 when it is not installed);
* ``realpath``: paths; ``{path: os.path.realpath(path)}``;
* ``nvcc``: a CUDA home; ``<home>/bin/nvcc --version``: ``{"rc", "stdout", "stderr",
  "msg"}``, ``msg`` the error when nvcc does not run (``[Errno 2] No such file or
  directory: ...``), ``"non-zero return code"`` when it ran and failed, else ``""``;
* ``torch_cuda``: ``torch.version.cuda`` with the venv's python: ``{"rc", "stdout"
  (stripped, "" for a CPU build), "stderr"}``;
* ``sglang_import``: ``import sglang`` with the venv's python, from ``/`` (so that no
  tree in the working directory shadows it): ``{"rc", "record": {"version":
  sglang.__version__, "file": sglang.__file__, "dist": importlib.metadata.version
  ("sglang") or None} or None, "stderr"}``.

A command that cannot start (a venv that does not exist yet) answers ``rc`` 127
(the shell's "command not found") with the error in ``stderr``; the module itself
fails only on bad arguments.
"""

from __future__ import annotations

import json
import os
import subprocess

# What the import check prints: sglang's version and file, and its distribution's version.
SGLANG_IMPORT = """\
import json, sglang
try:
    from importlib.metadata import version
    dist = version("sglang")
except Exception:
    dist = None
print(json.dumps({"version": sglang.__version__, "file": sglang.__file__, "dist": dist}))
"""

PYTHON_VERSION = "import platform; print(platform.python_version())"
TORCH_CUDA = "import torch; print(torch.version.cuda or '')"


def run(argv: list, cwd=None) -> dict:
    """``{"rc", "stdout", "stderr", "msg"}`` of ``argv``; rc 127 and the error when it cannot start."""
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, cwd=cwd, check=False)
    except OSError as exc:
        return {"rc": 127, "stdout": "", "stderr": str(exc), "msg": str(exc)}
    return {
        "rc": proc.returncode,
        "stdout": proc.stdout,
        "stderr": proc.stderr,
        "msg": "" if proc.returncode == 0 else "non-zero return code",
    }


def venv_python(venv: str) -> str:
    """The venv's interpreter."""
    return os.path.join(venv, "bin", "python")


def read(params: dict) -> dict:
    """Every read ``params`` asks for (see the module docstring)."""
    venv = params.get("venv") or ""
    python = venv_python(venv) if venv else None
    result: dict = {
        "changed": False,
        "python_version": None,
        "freeze": None,
        "show": None,
        "realpath": {},
        "nvcc": None,
        "torch_cuda": None,
        "sglang_import": None,
    }
    needs_venv = (
        params.get("freeze") or params.get("show") or params.get("torch_cuda") or params.get("sglang_import")
    )
    if needs_venv and not venv:
        return {**result, "failed": True, "msg": "freeze, show, torch_cuda and sglang_import need venv"}
    if params.get("python"):
        found = run([params["python"], "-c", PYTHON_VERSION])
        result["python_version"] = found["stdout"].strip() if found["rc"] == 0 else None
        if found["rc"] != 0:
            return {
                **result,
                "failed": True,
                "msg": f"{params['python']} does not run: {found['stderr'].strip()}",
            }
    if params.get("freeze"):
        argv = [python, "-m", "pip", "freeze", "--all", "--isolated"]
        if params.get("exclude_editable", True):
            argv.append("--exclude-editable")
        found = run(argv)
        result["freeze"] = {
            "rc": found["rc"],
            "lines": found["stdout"].splitlines(),
            "stderr": found["stderr"],
        }
    if params.get("show"):
        argv = [python, "-m", "pip", "show"]
        if params.get("show_files"):
            argv.append("--files")
        found = run([*argv, "--isolated", params["show"]])
        result["show"] = {k: found[k] for k in ("rc", "stdout", "stderr")}
    for path in params.get("realpath") or []:
        result["realpath"][path] = os.path.realpath(path)
    if params.get("nvcc"):
        result["nvcc"] = run([os.path.join(params["nvcc"], "bin", "nvcc"), "--version"])
    if params.get("torch_cuda"):
        found = run([python, "-c", TORCH_CUDA], cwd="/")
        result["torch_cuda"] = {
            "rc": found["rc"],
            "stdout": found["stdout"].strip(),
            "stderr": found["stderr"],
        }
    if params.get("sglang_import"):
        found = run([python, "-c", SGLANG_IMPORT], cwd="/")
        record = None
        if found["rc"] == 0:
            try:
                record = json.loads(found["stdout"].strip().splitlines()[-1])
            except (ValueError, IndexError):
                record = None
        result["sglang_import"] = {"rc": found["rc"], "record": record, "stderr": found["stderr"]}
    return result


#: The argument spec of the module cuda13_venv_read.
VENV_READ_SPEC = {
    "venv": {"type": "path"},
    "python": {"type": "str"},
    "freeze": {"type": "bool", "default": False},
    "exclude_editable": {"type": "bool", "default": True},
    "show": {"type": "str"},
    "show_files": {"type": "bool", "default": False},
    "realpath": {"type": "list", "elements": "str", "default": []},
    "nvcc": {"type": "path"},
    "torch_cuda": {"type": "bool", "default": False},
    "sglang_import": {"type": "bool", "default": False},
}


def venv_read_module(params: dict, check_mode: bool) -> dict:
    """The module cuda13_venv_read: :func:`read` (the same in check mode: it only reads)."""
    del check_mode
    return read(params)
