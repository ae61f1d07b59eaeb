"""Action cuda13_report_file: write one file of the run's report on the control node.

The run's reports (``reports/<run id>/<host>/result.json``, ``summary.md``)
live on the control node. Written with ``ansible.builtin.copy`` delegated to
localhost, each file costs the copy action's module runs on the control node
(a ``stat``, then ``copy``; with the directory, ``file`` too), about 0.6 s
each on a two-core control node: for a host that is already kept, more than
everything else its re-run does (benchmarks/sandbox_timings.py). This action
writes in the controller's own process instead: the parent directories are
created (mode 0700), the file is replaced atomically (a temporary file in the
same directory, then ``os.replace``), so that a reader never sees half a result,
and its text is redacted first (``cuda13_upgrade.redact``: unit ``Environment=``
values, URL userinfo, ``--api-key`` values) by ``cuda13_upgrade.reportfiles.write_text``.

Options:
  path: the file on the control node (str, required; absolute, or relative
    to the current directory)
  content: the text to write (str, required)
  mode: the file's permissions, an octal string such as "0644", or a number
    (an unquoted 0644 in YAML) taken as the mode itself (default "0600": reports are private)

Returns ``changed`` (whether the file's content or mode differed) and
``path``. In check mode nothing is written and ``changed`` says what would
change. Fails naming the path and the OS error when the file cannot be
written.
"""

from __future__ import annotations

import os

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase

from cuda13_upgrade import reportfiles


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
                "mode": {"type": "raw", "default": "0600"},
            }
        )
        path = os.path.abspath(os.path.expanduser(args["path"]))
        try:
            # As ansible.builtin.file: a number is the mode itself (YAML reads 0644 as octal).
            mode = args["mode"] if isinstance(args["mode"], int) else int(str(args["mode"]), 8)
        except ValueError as exc:
            raise AnsibleActionFail(
                f"cuda13_report_file: mode {args['mode']!r} is not an octal mode such as '0644'"
            ) from exc
        try:
            changed = reportfiles.write_text(path, args["content"], mode, check_mode=self._task.check_mode)
        except OSError as exc:
            raise AnsibleActionFail(f"cuda13_report_file: cannot write {path}: {exc}") from exc
        result.update(changed=changed, path=path)
        return result
