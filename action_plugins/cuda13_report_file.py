"""Action cuda13_report_file: write one file of the run's report on the control node.

The run's reports (``reports/<run id>/<host>/result.json``, ``summary.md``)
live on the control node. Written with ``ansible.builtin.copy`` delegated to
localhost, each file costs the copy action's module runs on the control node
(a ``stat``, then ``copy``; with the directory, ``file`` too), about 0.6 s
each on a two-core control node: for a host that is already kept, more than
everything else its re-run does (benchmarks/sandbox_timings.py). This action
writes in the controller's own process instead: the parent directories are
created, the file is replaced atomically (a temporary file in the same
directory, then ``os.replace``), so that a reader never sees half a result.

Options:
  path: the file on the control node (str, required; absolute, or relative
    to the current directory)
  content: the text to write (str, required)
  mode: the file's permissions, an octal string such as "0644", or a number
    (an unquoted 0644 in YAML) taken as the mode itself (default "0644")

Returns ``changed`` (whether the file's content or mode differed) and
``path``. In check mode nothing is written and ``changed`` says what would
change. Fails naming the path and the OS error when the file cannot be
written.
"""

from __future__ import annotations

import os
import tempfile

from ansible.errors import AnsibleActionFail
from ansible.module_utils.common.text.converters import to_bytes
from ansible.plugins.action import ActionBase


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _supports_check_mode = True
    _requires_connection = False

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        _, args = self.validate_argument_spec(
            argument_spec={
                "path": {"type": "str", "required": True},
                "content": {"type": "str", "required": True},
                "mode": {"type": "raw", "default": "0644"},
            }
        )
        path = os.path.abspath(os.path.expanduser(args["path"]))
        data = to_bytes(args["content"], errors="surrogate_or_strict")
        try:
            # As ansible.builtin.file: a number is the mode itself (YAML reads 0644 as octal).
            mode = args["mode"] if isinstance(args["mode"], int) else int(str(args["mode"]), 8)
        except ValueError as exc:
            raise AnsibleActionFail(
                f"cuda13_report_file: mode {args['mode']!r} is not an octal mode such as '0644'"
            ) from exc
        try:
            with open(path, "rb") as handle:
                same = handle.read() == data and (os.stat(path).st_mode & 0o7777) == mode
        except OSError:
            same = False
        result.update(changed=not same, path=path)
        if same or self._task.check_mode:
            return result
        directory = os.path.dirname(path)
        try:
            os.makedirs(directory, exist_ok=True)
            fd, scratch = tempfile.mkstemp(prefix=".cuda13-", dir=directory)
            try:
                with os.fdopen(fd, "wb") as handle:
                    handle.write(data)
                os.chmod(scratch, mode)
                os.replace(scratch, path)
            except BaseException:
                os.unlink(scratch)
                raise
        except OSError as exc:
            raise AnsibleActionFail(f"cuda13_report_file: cannot write {path}: {exc}") from exc
        return result
