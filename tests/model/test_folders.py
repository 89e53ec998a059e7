"""model/'s folders by job: each imports only the folders below it, and the text layer imports no torch."""

import subprocess
import sys
from pathlib import Path

from tests.server.test_layering import imports

ROOT = Path(__file__).resolve().parents[2]
MODEL = ROOT / "model"
# Bottom to top; a folder may import the modules of the folders before it (and model.errors), never after.
FOLDERS = ("text", "audio", "network", "kernels", "decoding", "loading")
SHARED = {"errors"}


def part(path: Path) -> str:
    """A module's folder, or "top" for model/'s own modules (the uses of a loaded model) and demo/."""
    first = path.relative_to(MODEL).parts[0]
    return first if first in FOLDERS else "top"


def test_each_folder_imports_only_the_folders_below_it():
    for path in MODEL.rglob("*.py"):
        mine = part(path)
        if mine == "top":
            continue
        below = set(FOLDERS[:FOLDERS.index(mine)]) | SHARED | {mine}
        reached = {name.split(".")[1] for name in imports(path) if name.startswith("model.")}
        assert reached <= below, (path, reached - below)


def test_the_text_layer_imports_no_torch():
    check = ("import sys, model.text, model.text.languages; "
             "model.text.read_file; import model; model.detect_language; model.iso_code; "
             "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", check], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False", out.stdout + out.stderr


def test_audio_decoding_imports_no_torch():
    """The HTTP side decodes uploads before any model is involved."""
    check = "import sys, model; model.read_audio; model.BadAudio; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", check], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False", out.stdout + out.stderr


def test_the_package_surface_names_resolve():
    import model
    assert all(getattr(model, name) is not None for name in model.__all__)
