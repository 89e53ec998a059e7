import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from marian_fixtures import VARIANTS, build_checkpoint  # noqa: E402

@pytest.fixture(scope="session")
def checkpoints(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("checkpoints")
    return {name: build_checkpoint(root / name, **kw) for name, kw in VARIANTS.items()}


@pytest.fixture(scope="session")
def checkpoint(checkpoints) -> Path:
    return checkpoints["shared-swish-safetensors"]
