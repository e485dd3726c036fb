"""``python -m flexrt.cli``."""

import sys

from flexrt.cli import main

sys.exit(main())
