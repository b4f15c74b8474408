"""``python -m paramcount``: see :mod:`paramcount.count`."""

import sys

from paramcount.count import main

sys.exit(main())
