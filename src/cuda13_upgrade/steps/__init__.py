"""The steps of a host's life, one module each: what the action plugins run on the control node.

Each step of a host's upgrade is one Ansible task calling an action plugin of
``action_plugins/`` (``cuda13_lock``, ``cuda13_snapshot``, ``cuda13_toolkit``,
...). The plugin is thin: it checks its arguments and calls the step's function
in its module here, handing it a :class:`~cuda13_upgrade.steps.host.Host`,
the one way a step reaches the managed host (a module of ``library/`` run there,
standard library only). What the step decides, loops over and records is plain
Python, tested without Ansible (``tests/fakehost.py`` runs the host modules'
own functions in place of the host).

Every step returns one record (a dict) that the play registers and passes
on; a step that cannot go on raises :class:`~cuda13_upgrade.steps.host.StepFailed`
with the message the operator reads and the record so far.
"""
