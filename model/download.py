"""`python -m model.download ORG/NAME[@REVISION] ...` (model.loading.hub.download)."""

import sys

from .loading.hub import download

if __name__ == "__main__":
    sys.exit(download())
