"""Bad checkpoints fail with one line naming the file and the key; the CLI handles empty lines."""

import json
import pickle
import shutil

import pytest
import torch
from safetensors.torch import load_file, save_file

from model import CheckpointError, Translator
from model.cli import main as translate_cli


@pytest.fixture
def copy(checkpoint, tmp_path):
    dst = tmp_path / "ckpt"
    shutil.copytree(checkpoint, dst)
    return dst


def expect_error(path, *fragments):
    with pytest.raises(CheckpointError) as info:
        Translator.from_pretrained(path)
    message = str(info.value)
    assert "\n" not in message
    for fragment in fragments:
        assert fragment in message


def test_missing_files(copy):
    (copy / "model.safetensors").unlink()
    expect_error(copy, str(copy), "no weights file")
    (copy / "config.json").unlink()
    expect_error(copy, "config.json", "file not found")


def test_unsupported_model_type(copy):
    config = json.loads((copy / "config.json").read_text())
    (copy / "config.json").write_text(json.dumps({**config, "model_type": "gpt2"}))
    expect_error(copy, "config.json", "'gpt2'", "not supported", "marian", "m2m_100", "mbart")


def test_missing_tokenizer_file(copy):
    (copy / "target.spm").unlink()
    expect_error(copy, "target.spm", "file not found")


def test_wrong_shape_names_the_key(copy):
    weights = load_file(str(copy / "model.safetensors"))
    key = "model.decoder.layers.0.fc1.weight"
    weights[key] = weights[key][:-1]
    save_file(weights, str(copy / "model.safetensors"))
    expect_error(copy, "model.safetensors", key, "expected shape")


def test_missing_and_unexpected_keys(copy):
    weights = load_file(str(copy / "model.safetensors"))
    weights["model.encoder.extra.weight"] = torch.zeros(1)
    save_file(weights, str(copy / "model.safetensors"))
    expect_error(copy, "unexpected key 'model.encoder.extra.weight'")
    del weights["model.encoder.extra.weight"], weights["model.encoder.layers.1.fc2.bias"]
    save_file(weights, str(copy / "model.safetensors"))
    expect_error(copy, "missing key 'model.encoder.layers.1.fc2.bias'")


def test_unknown_activation(copy):
    config = json.loads((copy / "config.json").read_text())
    config["activation_function"] = "sigmoid_x"
    (copy / "config.json").write_text(json.dumps(config))
    expect_error(copy, "config.json", "activation_function", "sigmoid_x")


class Exploit:
    def __reduce__(self):
        return (print, ("this must never run",))


def test_bin_is_never_unpickled_arbitrarily(copy, capsys):
    (copy / "model.safetensors").unlink()
    with open(copy / "pytorch_model.bin", "wb") as f:
        pickle.dump({"x": Exploit()}, f)
    expect_error(copy, "pytorch_model.bin", "cannot read weights")
    assert "this must never run" not in capsys.readouterr().out


def test_cli_reports_one_line_and_exit_code(copy, tmp_path, capsys):
    (copy / "model.safetensors").unlink()
    assert translate_cli(["--model", str(copy), "--input", str(tmp_path / "none.txt")]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("error:") and "\n" not in err


@pytest.mark.slow
def test_cli_keeps_empty_lines_and_order(checkpoint, tmp_path):
    src, out = tmp_path / "in.txt", tmp_path / "out.txt"
    src.write_text("hello world\n\nthe dog\n   \nx\n", encoding="utf-8")
    # a random model rarely says </s>: 16 new tokens bound each line's decoding
    assert translate_cli(["--model", str(checkpoint), "--dtype", "float32", "--max-new-tokens", "16",
                          "--input", str(src), "--output", str(out)]) == 0
    lines = out.read_text(encoding="utf-8").split("\n")[:-1]
    assert len(lines) == 5 and lines[1] == "" and lines[3] == ""
    alone = Translator.from_pretrained(checkpoint).translate(["the dog"], max_new_tokens=16)[0].text
    assert lines[2] == alone


def test_cli_rejects_unknown_target_language(checkpoint, tmp_path, capsys):
    src = tmp_path / "in.txt"
    src.write_text("hello\n")
    assert translate_cli(["--model", str(checkpoint), "--input", str(src), "--target-lang", "xx"]) == 1
    assert "de, fr" in capsys.readouterr().err


def test_random_init_is_skipped_only_while_building_and_restored():
    """load_network builds the network without drawing random values the checkpoint overwrites; torch's random
    initializations work again afterwards, and constant ones (an absent output bias is zero) ran inside."""
    from torch import nn

    from model.loading.checkpoint import RANDOM_INITS, without_random_init

    before = {name: getattr(nn.init, name) for name in RANDOM_INITS}
    with without_random_init():
        layer = nn.Linear(64, 64)
        nn.init.zeros_(layer.bias)
    assert {name: getattr(nn.init, name) for name in RANDOM_INITS} == before
    assert torch.count_nonzero(layer.bias) == 0
    assert torch.count_nonzero(nn.Linear(64, 64).weight) > 0
