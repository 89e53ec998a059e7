"""Models named as users download them: Hub repo ids resolved offline from a Hugging Face cache built in the test,
in every weight layout the Hub uses, through Translator, the CLI and the server, against transformers on the same
snapshot; ids that cannot be resolved fail fast with one line."""

import os
import subprocess
import sys
from pathlib import Path

import huggingface_hub.constants
import httpx
import pytest
import torch
from hub_fixtures import OTHER_FRAMEWORKS, add_repo, layout
from server_process import running_server
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

from model import CheckpointError, Translator, load

ROOT = Path(__file__).resolve().parents[2]
MAX_NEW_TOKENS = 20
TEXTS = ["Hello.", "The quick brown fox jumps over the lazy dog."]
# repo id → (the tiny checkpoint it holds, its weight layout: hub_fixtures.layout)
REPOS = {
    "Helsinki-NLP/opus-mt-tiny": ("marian", "pickle"),
    "Helsinki-NLP/opus-mt-tc-tiny": ("marian", "float16"),
    "facebook/nllb-tiny": ("nllb", "pickle-shards"),
    "google/flan-t5-tiny": ("t5_v1_1", "safetensors-shards"),
}


@pytest.fixture(scope="module")
def hub_cache(tmp_path_factory, checkpoint, family_checkpoints, text2text_checkpoints) -> Path:
    sources = {"marian": checkpoint, "nllb": family_checkpoints["nllb"], "t5_v1_1": text2text_checkpoints["t5_v1_1"]}
    cache = tmp_path_factory.mktemp("hf-home") / "hub"
    for repo_id, (source, kind) in REPOS.items():
        add_repo(cache, repo_id, layout(sources[source], kind))
    return cache


@pytest.fixture
def offline(hub_cache, monkeypatch):
    """This process resolves ids as HF_HUB_OFFLINE=1 HF_HUB_CACHE=<the cache> would have it."""
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(hub_cache))
    return hub_cache


def offline_env(hub_cache: Path) -> dict[str, str]:
    return {**os.environ, "HF_HUB_CACHE": str(hub_cache), "HF_HUB_OFFLINE": "1"}


def snapshot_of(hub_cache: Path, repo_id: str) -> Path:
    repo = hub_cache / f"models--{repo_id.replace('/', '--')}"
    return repo / "snapshots" / (repo / "refs" / "main").read_text()


def transformers_translations(snapshot: Path, family: str) -> list[str]:
    tokenizer = AutoTokenizer.from_pretrained(snapshot, **({"src_lang": "eng_Latn"} if family == "nllb" else {}))
    model = AutoModelForSeq2SeqLM.from_pretrained(snapshot, dtype=torch.float32).eval()
    kwargs = {"forced_bos_token_id": tokenizer.convert_tokens_to_ids("fra_Latn")} if family == "nllb" else {}
    with torch.no_grad():
        ids = model.generate(**tokenizer(TEXTS, return_tensors="pt", padding=True), num_beams=1,
                             max_new_tokens=MAX_NEW_TOKENS, **kwargs)
    return tokenizer.batch_decode(ids, skip_special_tokens=True)


def languages(family: str) -> dict:
    return {"source_lang": "eng_Latn", "target_lang": "fra_Latn"} if family == "nllb" else {}


@pytest.mark.parametrize("repo_id", list(REPOS))
def test_translator_by_repo_id_matches_transformers_on_the_snapshot(offline, repo_id):
    family, _ = REPOS[repo_id]
    translator = Translator.from_pretrained(repo_id)
    got = [t.text for t in translator.translate(TEXTS, beam_size=1, max_new_tokens=MAX_NEW_TOKENS,
                                                 **languages(family))]
    assert got == transformers_translations(snapshot_of(offline, repo_id), family)
    assert translator.bundle.name == repo_id


def test_the_weights_read_are_the_preferred_layout(offline):
    """Safetensors before a pickle of the same weights; float16 storage cast to the dtype asked for; other
    frameworks' files never read (they hold no weights here)."""
    snapshot = snapshot_of(offline, "Helsinki-NLP/opus-mt-tc-tiny")
    network = load("Helsinki-NLP/opus-mt-tc-tiny").network
    assert next(network.parameters()).dtype == torch.float32
    assert (snapshot / "model.safetensors").exists() and (snapshot / "pytorch_model.bin").exists()
    assert all((snapshot_of(offline, "Helsinki-NLP/opus-mt-tiny") / name).exists() for name in OTHER_FRAMEWORKS)


def test_a_local_directory_wins_over_a_repo_id_of_the_same_spelling(offline, checkpoint, tmp_path, monkeypatch):
    (tmp_path / "facebook").mkdir()
    (tmp_path / "facebook" / "nllb-tiny").symlink_to(checkpoint)  # a Marian checkpoint under the id's spelling
    monkeypatch.chdir(tmp_path)
    assert load("facebook/nllb-tiny", weights=False).family == "marian"


def test_an_id_that_cannot_be_resolved_fails_with_one_line(offline):
    with pytest.raises(CheckpointError, match=r"^facebook/nllb-missing: not in the Hugging Face cache"):
        load("facebook/nllb-missing")
    with pytest.raises(CheckpointError, match=r"^facebook/nllb-tiny@v2: not in the Hugging Face cache"):
        load("facebook/nllb-tiny@v2")
    with pytest.raises(CheckpointError, match="not a model directory, nor a Hugging Face Hub repo id"):
        load("no/such/thing")


def test_a_shard_named_by_the_index_but_missing_is_named(offline, tmp_path):
    snapshot = snapshot_of(offline, "google/flan-t5-tiny")
    broken = tmp_path / "flan-t5-tiny"
    broken.mkdir()
    for file in snapshot.iterdir():
        if file.name != "model-00002-of-00003.safetensors":
            (broken / file.name).symlink_to(file.resolve())
    with pytest.raises(CheckpointError, match=r"model.safetensors.index.json: names the shard "
                                              r"model-00002-of-00003.safetensors, which is not there"):
        load(broken)


def test_cli_by_repo_id(hub_cache):
    expected = transformers_translations(snapshot_of(hub_cache, "Helsinki-NLP/opus-mt-tiny"), "marian")
    done = subprocess.run([sys.executable, "-m", "model", "--model", "Helsinki-NLP/opus-mt-tiny", "--dtype", "float32",
                           "--beam-size", "1", "--max-new-tokens", str(MAX_NEW_TOKENS)], input="\n".join(TEXTS) + "\n", cwd=ROOT,
                          capture_output=True, text=True, env=offline_env(hub_cache), timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == expected
    missing = subprocess.run([sys.executable, "-m", "model", "--model", "Helsinki-NLP/opus-mt-missing"], input="x\n",
                             cwd=ROOT, capture_output=True, text=True, env=offline_env(hub_cache), timeout=120)
    assert missing.returncode == 1
    assert missing.stderr.strip().splitlines() == ["error: Helsinki-NLP/opus-mt-missing: not in the Hugging Face "
                                                   "cache, and the Hub cannot be reached (offline: HF_HUB_OFFLINE, "
                                                   "no network)"]


def test_download_prints_the_snapshot_or_fails(hub_cache):
    done = subprocess.run([sys.executable, "-m", "model.download", "google/flan-t5-tiny"], cwd=ROOT,
                          capture_output=True, text=True, env=offline_env(hub_cache), timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"google/flan-t5-tiny\t{snapshot_of(hub_cache, 'google/flan-t5-tiny')}\n"
    missing = subprocess.run([sys.executable, "-m", "model.download", "google/missing"], cwd=ROOT,
                             capture_output=True, text=True, env=offline_env(hub_cache), timeout=120)
    assert missing.returncode == 1 and "google/missing: not in the Hugging Face cache" in missing.stderr


def test_server_by_repo_ids(hub_cache, monkeypatch):
    for key, value in offline_env(hub_cache).items():
        monkeypatch.setenv(key, value)
    expected = transformers_translations(snapshot_of(hub_cache, "facebook/nllb-tiny"), "nllb")
    with running_server("--no-ray", "--model", "facebook/nllb-tiny", "--model", "google/flan-t5-tiny") as server:
        models = httpx.get(server.url + "/v1/models").json()["data"]
        assert [m["id"] for m in models] == ["facebook/nllb-tiny", "google/flan-t5-tiny"]
        body = {"text": TEXTS, "model": "facebook/nllb-tiny", "source_lang": "eng_Latn", "target_lang": "fra_Latn",
                "beam_size": 1, "max_new_tokens": MAX_NEW_TOKENS, "split_sentences": "0"}
        answer = httpx.post(server.url + "/v1/translate", json=body, timeout=60).json()
        assert [t["text"] for t in answer["translations"]] == expected
        generated = httpx.post(server.url + "/v1/generate", json={"model": "google/flan-t5-tiny", "text": TEXTS[1],
                                                                   "num_beams": 1, "max_new_tokens": MAX_NEW_TOKENS},
                               timeout=60).json()
        assert generated["text"] == Translator(load(snapshot_of(hub_cache, "google/flan-t5-tiny"))).translate(
            [TEXTS[1]], beam_size=1, max_new_tokens=MAX_NEW_TOKENS)[0].text


def test_server_refuses_to_start_on_an_id_it_cannot_resolve(hub_cache):
    done = subprocess.run([sys.executable, "-m", "server", "--no-ray", "--port", "0", "--model", "facebook/nllb-tiny",
                           "--model", "facebook/nllb-missing"], cwd=ROOT, capture_output=True, text=True,
                          env=offline_env(hub_cache), timeout=120)
    assert done.returncode == 1
    assert done.stderr.strip().splitlines()[-1] == ("python -m server: facebook/nllb-missing: not in the Hugging Face "
                                                    "cache, and the Hub cannot be reached (offline: HF_HUB_OFFLINE, "
                                                    "no network)")
