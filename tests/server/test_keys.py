"""Keys, per-key rate limits and character quotas: the counter on a fake clock, and one set shared by the native,
LibreTranslate and DeepL APIs (in-process app, demo model), each API answering in its own shape and status."""

import asyncio
import time

import pytest
from server_process import in_process_client, within_one_minute

from server.front.access import Keys, QuotaExceeded, RateLimited
from server.key_store import KeyStore, key_id
from server.settings import Settings

FORTY_TWO = "forty-two"  # 9 characters


class Clock:
    def __init__(self):
        self.now = 60_000.0  # the start of a clock minute

    def __call__(self) -> float:
        return self.now


def keys_of(clock=time.time, **settings) -> Keys:
    return Keys(Settings(**settings), KeyStore("keys.sqlite"), clock)  # in this test's own folder


def test_rate_limit_per_caller_per_clock_minute_with_retry_after():
    clock = Clock()
    keys = keys_of(clock, api_keys=("a", "b"), rate_limit_per_minute=2)
    a, b = keys.caller("a", None), keys.caller("b", None)

    def admit(caller):
        asyncio.run(keys.admit(caller))

    admit(a)
    clock.now += 20
    admit(a)
    with pytest.raises(RateLimited) as raised:
        admit(a)
    assert raised.value.retry_after_s == 40 and raised.value.message == "Slowdown: 2 per 1 minute"
    admit(b)  # another key has its own count
    clock.now += 40
    admit(a)  # a new minute


def test_callers_are_keys_when_configured_else_addresses():
    keyed = keys_of(api_keys=("a",))
    assert keyed.caller("a", "1.2.3.4") == key_id("a")
    assert (keyed.caller("x", "1.2.3.4"), keyed.caller(None, "1.2.3.4")) == (None, None)
    open_ = Keys(Settings(), KeyStore("open.sqlite"))
    assert open_.caller("anything", "1.2.3.4") == open_.caller(None, "1.2.3.4") != open_.caller(None, "5.6.7.8")


def test_quota_charged_refunded_on_failure_and_reported():
    keys = keys_of(api_keys=("a",), character_quota=10)
    a = keys.caller("a", None)

    async def spend():
        async with keys.spending(a, 6):
            pass
        with pytest.raises(RuntimeError):
            async with keys.spending(a, 4):
                raise RuntimeError("the translation failed")
        assert await keys.usage(a) == (6, 10)
        with pytest.raises(QuotaExceeded):
            async with keys.spending(a, 5):
                pass
        assert await Keys(Settings(), KeyStore("open.sqlite")).usage("anyone") == (0, None)

    asyncio.run(spend())


def test_a_keys_own_limits_over_the_servers_and_counts_shared_by_two_processes_stores():
    """Two Keys over one file (two processes' connections): one key's limit of 3 admits 3 requests in all."""
    store = KeyStore("keys.sqlite")
    own = store.add("own", rate_limit_per_minute=3, character_quota=0)
    first, second = (keys_of(api_keys=("env-key",), rate_limit_per_minute=1, character_quota=5) for _ in range(2))
    caller = first.caller(own, None)
    assert first.limits(caller) == (3, 0) and first.limits(first.caller("env-key", None)) == (1, 5)
    admitted = 0
    for keys in (first, second, first, second, first):
        try:
            asyncio.run(keys.admit(caller))
            admitted += 1
        except RateLimited:
            pass
    assert admitted == 3 and store.usage(caller) == (0, 3)


@pytest.fixture
def app_client(request):
    with in_process_client(Settings(**request.param)) as client:
        yield client


def native(client, key):
    return client.post("/v1/translate", json={"text": FORTY_TWO, "target_lang": "de"},
                       headers={"Authorization": f"Bearer {key}"})


def libretranslate(client, key):
    return client.post("/translate", data={"q": FORTY_TWO, "source": "en", "target": "de", "api_key": key})


def deepl(client, key):
    return client.post("/v2/translate", json={"text": [FORTY_TWO], "target_lang": "DE"},
                       headers={"Authorization": f"DeepL-Auth-Key {key}"})


@pytest.mark.parametrize("app_client", [dict(api_keys=("k1",))], indirect=True)
def test_a_wrong_key_in_each_apis_shape(app_client):
    assert native(app_client, "nope").status_code == 401
    assert (libretranslate(app_client, "nope").status_code, libretranslate(app_client, "nope").json()) == \
        (403, {"error": "Invalid API key"})
    r = app_client.post("/translate", json={"q": FORTY_TWO, "source": "en", "target": "de", "api_key": ""})
    assert r.status_code == 403  # an empty key is no key
    assert deepl(app_client, "nope").status_code == 403 and set(deepl(app_client, "nope").json()) == {"message"}
    assert [call(app_client, "k1").status_code for call in (native, libretranslate, deepl)] == [200, 200, 200]


@pytest.mark.slow
@pytest.mark.parametrize("app_client", [dict(api_keys=("k1", "k2"), rate_limit_per_minute=3)], indirect=True)
def test_one_rate_limit_across_the_three_apis(app_client):
    within_one_minute()
    assert [call(app_client, "k1").status_code for call in (native, libretranslate, deepl)] == [200, 200, 200]
    limited = {"native": native(app_client, "k1"), "libretranslate": libretranslate(app_client, "k1"),
               "deepl": deepl(app_client, "k1")}
    assert {name: r.status_code for name, r in limited.items()} == dict.fromkeys(limited, 429)
    assert all(0 < int(r.headers["retry-after"]) <= 60 for r in limited.values())
    assert limited["libretranslate"].json() == {"error": "Slowdown: 3 per 1 minute"}
    assert limited["deepl"].json() == {"message": "Slowdown: 3 per 1 minute"}
    assert limited["native"].json()["error"]["code"] == "rate_limited"
    assert deepl(app_client, "k2").status_code == 200  # per key
    usage = app_client.get("/v2/usage", headers={"Authorization": "DeepL-Auth-Key k1"})
    assert usage.status_code == 200  # reading usage is not work


@pytest.mark.parametrize("app_client", [dict(api_keys=("k1",), character_quota=30)], indirect=True)
def test_one_character_quota_across_the_three_apis(app_client):
    assert [call(app_client, "k1").status_code for call in (native, libretranslate, deepl)] == [200, 200, 200]
    usage = app_client.get("/v2/usage", headers={"Authorization": "DeepL-Auth-Key k1"}).json()
    assert usage == {"character_count": 27, "character_limit": 30}
    over = deepl(app_client, "k1")
    assert over.status_code == 456 and set(over.json()) == {"message"}
    assert libretranslate(app_client, "k1").status_code == 403 and "error" in libretranslate(app_client, "k1").json()
    assert native(app_client, "k1").json()["error"]["code"] == "quota_exceeded"
    invalid = app_client.post("/v2/translate", json={"text": ["ab"], "target_lang": "XX"},
                              headers={"Authorization": "DeepL-Auth-Key k1"})
    assert invalid.status_code == 400  # a failed request costs nothing: 27 + 2 still fits
    assert app_client.post("/v2/translate", json={"text": ["ab"], "target_lang": "DE"},
                           headers={"Authorization": "DeepL-Auth-Key k1"}).status_code == 200


def test_nothing_is_counted_for_an_open_unlimited_server():
    keys = keys_of()

    async def spend():
        async with keys.spending(keys.caller(None, "1.2.3.4"), 100):
            pass

    asyncio.run(spend())
    assert keys.store.usage("address:1.2.3.4") == (0, 0)
