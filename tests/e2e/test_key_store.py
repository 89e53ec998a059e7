"""The key store through real servers: keys made with `python -m server.keys`, used through the native,
LibreTranslate, DeepL and OpenAI APIs with their own limits, one key's limit exact across two worker processes,
usage kept across a restart, and a damaged or read-only store refused at start."""

import os
import signal
import subprocess
import sys

import httpx
import openai
import pytest
from server_process import ROOT, running_server, within_one_minute

from server.key_store import KeyStore

ENV_KEY = "env-key-of-the-defaults"
TEXT = "forty-two"  # 9 characters


def keys_command(store, *args: str) -> str:
    done = subprocess.run([sys.executable, "-m", "server.keys", "--key-store", str(store), *args],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    path = tmp_path_factory.mktemp("keys") / "keys.sqlite"
    made = {"limited": keys_command(path, "add", "--name", "limited", "--rate-limit-per-minute", "4"),
            "workers": keys_command(path, "add", "--name", "workers", "--rate-limit-per-minute", "6"),
            "quota": keys_command(path, "add", "--name", "quota", "--character-quota", "20")}
    return path, made


@pytest.fixture(scope="module")
def server(store):
    path, _ = store
    with running_server("--no-ray", "--workers", "2", "--rate-limit-per-minute", "1000",
                        env={"SERVER_KEY_STORE": str(path), "SERVER_API_KEYS": ENV_KEY}) as server:
        yield server


def native(url, key):
    return httpx.post(url + "/v1/translate", json={"text": TEXT, "target_lang": "de"},
                      headers={"Authorization": f"Bearer {key}"})


def libretranslate(url, key):
    return httpx.post(url + "/translate", data={"q": TEXT, "source": "en", "target": "de", "api_key": key})


def deepl(url, key):
    return httpx.post(url + "/v2/translate", json={"text": [TEXT], "target_lang": "DE"},
                      headers={"Authorization": f"DeepL-Auth-Key {key}"})


def openai_completion(url, key):
    return httpx.post(url + "/v1/completions", json={"model": "demo-numbers", "prompt": TEXT, "target_lang": "de"},
                      headers={"Authorization": f"Bearer {key}"})


def usage(url, key) -> dict:
    response = httpx.get(url + "/v2/usage", headers={"Authorization": f"DeepL-Auth-Key {key}"})
    assert response.status_code == 200, response.text
    return response.json()


def test_the_command_lists_keys_without_showing_them(store):
    path, made = store
    listed = keys_command(path, "list")
    assert [line.split("\t")[0] for line in listed.splitlines()] == ["limited", "workers", "quota"]
    assert not any(key in listed for key in made.values())
    assert "rate_limit_per_minute=4" in listed and "character_quota=20" in listed


def test_a_keys_own_rate_limit_across_the_four_apis(server, store):
    key = store[1]["limited"]
    within_one_minute()
    assert [call(server.url, key).status_code for call in (native, libretranslate, deepl, openai_completion)] == \
        [200] * 4
    client = openai.OpenAI(api_key=key, base_url=server.url + "/v1", max_retries=0)
    with pytest.raises(openai.RateLimitError) as raised:
        client.completions.create(model="demo-numbers", prompt=TEXT)
    assert 0 < int(raised.value.response.headers["retry-after"]) <= 60
    assert raised.value.body["type"] == "rate_limit_error"
    assert [call(server.url, key).status_code for call in (native, libretranslate, deepl)] == [429] * 3
    assert native(server.url, ENV_KEY).status_code == 200  # SERVER_API_KEYS' key: the server's 1000 a minute
    assert native(server.url, "not-a-key").status_code == 401


def test_one_keys_limit_is_exact_across_two_workers(server, store):
    """6 a minute, 16 requests on fresh connections (spread over both workers by SO_REUSEPORT): 6 admitted."""
    key = store[1]["workers"]
    within_one_minute()
    statuses = [native(server.url, key).status_code for _ in range(16)]
    assert sorted(statuses) == [200] * 6 + [429] * 10


def test_a_keys_own_quota_is_reported_and_enforced(server, store):
    key = store[1]["quota"]
    assert native(server.url, key).status_code == 200 and deepl(server.url, key).status_code == 200
    assert usage(server.url, key) == {"character_count": 18, "character_limit": 20}
    assert deepl(server.url, key).status_code == 456
    over = openai_completion(server.url, key)
    assert over.status_code == 429 and over.json()["error"]["code"] == "quota_exceeded"


def test_usage_survives_a_restart(server, store):
    path, made = store
    assert deepl(server.url, ENV_KEY).status_code == 200
    before = {name: usage(server.url, key)["character_count"] for name, key in {**made, "env": ENV_KEY}.items()}
    assert before["env"] >= len(TEXT) and before["quota"] == 18
    server.proc.send_signal(signal.SIGTERM)
    server.proc.wait(30)
    with running_server("--no-ray", env={"SERVER_KEY_STORE": str(path), "SERVER_API_KEYS": ENV_KEY}) as again:
        after = {name: usage(again.url, key)["character_count"] for name, key in {**made, "env": ENV_KEY}.items()}
    assert after == before
    assert "requests=" in keys_command(path, "usage", "quota")


@pytest.mark.parametrize("damage", ["corrupt", "read-only"])
def test_a_damaged_or_read_only_store_stops_the_start(tmp_path, damage):
    path = tmp_path / "keys.sqlite"
    if damage == "corrupt":
        path.write_bytes(b"not a database " * 100)
    else:
        KeyStore(path).close()
        read_only(path)
    before = path.read_bytes()
    try:
        done = subprocess.run([sys.executable, "-m", "server", "--no-ray", "--port", "0"], cwd=ROOT, text=True,
                              capture_output=True, timeout=60, env={**os.environ, "SERVER_KEY_STORE": str(path)})
    finally:
        subprocess.run(["chattr", "-i", str(path)], capture_output=True)
    assert done.returncode == 1
    assert str(path) in done.stderr and ("not a database" if damage == "corrupt" else "readonly") in done.stderr
    assert path.read_bytes() == before  # never reset


def read_only(path):
    """Read-only even for root (which ignores the mode): immutable where chattr works."""
    path.chmod(0o444)
    if os.geteuid() == 0 and subprocess.run(["chattr", "+i", str(path)], capture_output=True).returncode != 0:
        pytest.skip("running as root without chattr: no way to make a file read-only")
