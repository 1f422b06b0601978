"""``python -m bendserver.cli``: the ``bendserver`` command."""

import sys

from . import main

sys.exit(main())
