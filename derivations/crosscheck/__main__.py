"""``python -m derivations.crosscheck``: see :mod:`derivations.crosscheck.cli`."""

import sys

from derivations.crosscheck.cli import main

sys.exit(main())
