"""``python -m coordinator.cli``: the ``affinity`` command."""

import sys

from coordinator.cli import main

sys.exit(main())
