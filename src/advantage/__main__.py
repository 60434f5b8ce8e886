"""``python -m advantage``: the same as the ``advantage`` command."""

import sys

from advantage.cli import main

sys.exit(main())
