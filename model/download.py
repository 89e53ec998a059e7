"""`python -m model.download ORG/NAME[@REVISION] ...` (model.hub.download)."""

import sys

from .hub import download

if __name__ == "__main__":
    sys.exit(download())
