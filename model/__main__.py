"""`python -m model`: the command-line translator (model.cli)."""

import sys

from .cli import main

sys.exit(main())
