"""``python -m cuda13_upgrade.cli``: the ``cuda13-upgrade`` command."""

import sys

from cuda13_upgrade.cli import main

sys.exit(main())
