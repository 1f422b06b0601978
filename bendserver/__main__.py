"""``python -m bendserver``: the ``bendserver`` command."""

import sys

from .cli import main

sys.exit(main())
