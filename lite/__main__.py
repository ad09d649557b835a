"""``python -m lite``: the ``lite`` command, for environments whose scripts folder is not on PATH."""

import sys

from lite.cli import main

sys.exit(main())
