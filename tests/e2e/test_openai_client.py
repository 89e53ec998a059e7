"""OpenAI's API through a real server (python -m server --no-ray, demo model, an API key configured): the official
`openai` client unchanged with base_url=<server>/v1, LangChain's reading of a chat answer, OpenAI's errors."""

import json

import httpx
import openai
import pytest
from num2words import num2words
from server_process import eventually, in_process_client, running_server

from server.settings import Settings

KEY = "openai-test-key"
MODEL = "demo-numbers"


def words(n: int, lang: str = "en") -> str:
    return num2words(n, lang=lang)


@pytest.fixture(scope="module")
def url():
    with running_server("--no-ray", env={"SERVER_API_KEYS": KEY}) as server:
        yield server.url


@pytest.fixture(scope="module")
def client(url):
    return openai.OpenAI(api_key=KEY, base_url=url + "/v1", max_retries=0)


def native_generate(url: str, text: str) -> dict:
    response = httpx.post(url + "/v1/generate", json={"text": text}, headers={"Authorization": f"Bearer {KEY}"})
    assert response.status_code == 200, response.text
    return response.json()


def test_models_list_in_openai_shape_with_the_native_fields(client, url):
    models = client.models.list().data
    assert [(m.id, m.object, m.owned_by) for m in models] == [(MODEL, "model", "seq2seq-serve"),
                                                               ("demo-spoken-numbers", "model", "seq2seq-serve")]
    assert isinstance(models[0].created, int) and models[0].created > 0
    card = httpx.get(url + "/v1/models", headers={"Authorization": f"Bearer {KEY}"}).json()
    assert card["object"] == "list" and card["data"][0]["family"] == "marian"
    assert [lang["code"] for lang in card["data"][0]["target_languages"]] == ["de", "fr", "es", "it"]


def test_one_prompt_with_usage_counting_encoder_and_generated_tokens(client, url):
    prompt = f">>fr<< {words(42)}"
    answer = client.completions.create(model=MODEL, prompt=prompt, max_tokens=32)
    assert answer.object == "text_completion" and answer.model == MODEL and answer.id.startswith("cmpl-")
    [choice] = answer.choices
    assert (choice.index, choice.text, choice.finish_reason, choice.logprobs) == (0, words(42, "fr"), "stop", None)
    native = native_generate(url, prompt)  # the same path: the same text and token counts
    assert native["text"] == choice.text
    assert (answer.usage.prompt_tokens, answer.usage.completion_tokens) == \
        (native["usage"]["input_tokens"], native["usage"]["output_tokens"])
    assert answer.usage.total_tokens == answer.usage.prompt_tokens + answer.usage.completion_tokens


def test_a_list_of_prompts_gives_one_choice_each_in_order(client):
    asks = [(101, "de"), (7, "fr"), (2024, "es"), (999, "it"), (13, "de")]
    answer = client.completions.create(model=MODEL, prompt=[f">>{lang}<< {words(n)}" for n, lang in asks])
    assert [(c.index, c.text) for c in answer.choices] == [(i, words(n, lang)) for i, (n, lang) in enumerate(asks)]
    singles = [client.completions.create(model=MODEL, prompt=f">>{lang}<< {words(n)}").usage for n, lang in asks]
    assert answer.usage.prompt_tokens == sum(u.prompt_tokens for u in singles)
    assert answer.usage.completion_tokens == sum(u.completion_tokens for u in singles)


def test_max_tokens_cuts_with_finish_reason_length(client):
    answer = client.completions.create(model=MODEL, prompt=f">>de<< {words(777777)}", max_tokens=2)
    assert answer.choices[0].finish_reason == "length" and answer.usage.completion_tokens == 2
    assert words(777777, "de").startswith(answer.choices[0].text)


def test_stop_string_cuts_the_text(client):
    full = words(123, "fr")  # cent vingt-trois
    answer = client.completions.create(model=MODEL, prompt=f">>fr<< {words(123)}", stop=["vingt"])
    assert (answer.choices[0].text, answer.choices[0].finish_reason) == (full[:full.index("vingt")], "stop")


def test_streaming_pieces_join_to_the_answer_and_usage_adds_up(client):
    prompt = f">>it<< {words(987654)}"
    whole = client.completions.create(model=MODEL, prompt=prompt)
    chunks = list(client.completions.create(model=MODEL, prompt=prompt, stream=True,
                                            stream_options={"include_usage": True}))
    pieces = [c.choices[0].text for c in chunks if c.choices]
    assert len([p for p in pieces if p]) > 1 and "".join(pieces) == whole.choices[0].text == words(987654, "it")
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
    assert chunks[-1].choices == [] and chunks[-1].usage == whole.usage


def test_n_samples_are_seeded(client):
    ask = dict(model=MODEL, prompt=f">>es<< {words(4321)}", n=3, seed=7, temperature=1.5)
    first, again = client.completions.create(**ask), client.completions.create(**ask)
    assert [c.index for c in first.choices] == [0, 1, 2]
    assert [c.text for c in first.choices] == [c.text for c in again.choices]


def test_translation_targets_as_extra_fields(client):
    answer = client.completions.create(model=MODEL, prompt=words(42), extra_body={"target_lang": "de"})
    assert answer.choices[0].text == words(42, "de")


def test_chat_one_user_message_is_its_text(client):
    messages = [{"role": "user", "content": f">>de<< {words(58)}"}]
    answer = client.chat.completions.create(model=MODEL, messages=messages)
    assert answer.object == "chat.completion" and answer.id.startswith("chatcmpl-")
    [choice] = answer.choices
    assert (choice.message.role, choice.message.content, choice.finish_reason) == ("assistant", words(58, "de"),
                                                                                   "stop")
    earlier_turns = [{"role": "user", "content": "one"}, {"role": "assistant", "content": "eins"}, *messages]
    again = client.chat.completions.create(model=MODEL, messages=earlier_turns)  # only the last user message goes
    assert again.choices[0].message.content == choice.message.content and again.usage == answer.usage


def test_chat_system_messages_go_before_the_last_user_message(client):
    messages = [{"role": "system", "content": ">>fr<<"}, {"role": "user", "content": "one"},
                {"role": "assistant", "content": "un"}, {"role": "user", "content": words(42)}]
    chat = client.chat.completions.create(model=MODEL, messages=messages)
    completion = client.completions.create(model=MODEL, prompt=f">>fr<<\n\n{words(42)}")
    assert chat.choices[0].message.content == completion.choices[0].text == words(42, "fr")
    assert chat.usage == completion.usage


def test_chat_streaming_role_then_pieces_then_finish(client):
    messages = [{"role": "user", "content": [{"type": "text", "text": f">>fr<< {words(71071)}"}]}]
    chunks = list(client.chat.completions.create(model=MODEL, messages=messages, stream=True))
    assert {c.object for c in chunks} == {"chat.completion.chunk"}
    assert chunks[0].choices[0].delta.role == "assistant"
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == words(71071, "fr")
    assert [c.choices[0].finish_reason for c in chunks] == [None] * (len(chunks) - 1) + ["stop"]


def test_langchain_reads_the_chat_answer(url):
    """What ChatOpenAI reads from the raw JSON: choices[].message.role/content, finish_reason, model, usage."""
    body = {"model": MODEL, "messages": [{"role": "system", "content": "Numbers."},
                                         {"role": "user", "content": words(5)}], "stream": False, "n": 1,
            "temperature": 0.0, "target_lang": "it"}
    answer = httpx.post(url + "/v1/chat/completions", json=body, headers={"Authorization": f"Bearer {KEY}"}).json()
    assert isinstance(answer["choices"], list) and answer["model"] == MODEL
    message = answer["choices"][0]["message"]
    assert message["role"] == "assistant" and isinstance(message["content"], str) and message["content"]
    assert answer["choices"][0]["finish_reason"] in ("stop", "length")
    usage = answer["usage"]
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"] > 0


def test_unknown_model_is_not_found(client):
    with pytest.raises(openai.NotFoundError) as raised:
        client.completions.create(model="gpt-4", prompt="hi")
    assert "gpt-4" in raised.value.message and raised.value.body["param"] == "model"


@pytest.mark.parametrize("extra, param", [({"temperature": 5}, "temperature"), ({"echo": True}, "echo"),
                                          ({"logprobs": 2}, "logprobs"), ({"max_tokens": 100000}, "max_tokens"),
                                          ({"n": 2, "temperature": 0}, "n"), ({"prompt": []}, "prompt"),
                                          ({"stop": ["x"] * 17}, "stop")])
def test_bad_parameter_is_a_bad_request_naming_it(client, extra, param):
    with pytest.raises(openai.BadRequestError) as raised:
        client.completions.create(**{"model": MODEL, "prompt": words(1), **extra})
    assert raised.value.body["param"] == param and raised.value.body["type"] == "invalid_request_error"
    assert param in raised.value.message


def test_chat_without_a_user_message_names_messages(client):
    with pytest.raises(openai.BadRequestError) as raised:
        client.chat.completions.create(model=MODEL, messages=[{"role": "system", "content": "hi"}])
    assert raised.value.body["param"] == "messages"


def test_wrong_key_is_an_authentication_error(url):
    wrong = openai.OpenAI(api_key="wrong", base_url=url + "/v1", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        wrong.completions.create(model=MODEL, prompt=words(1))
    with pytest.raises(openai.AuthenticationError):
        wrong.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": words(1)}])
    with pytest.raises(openai.AuthenticationError) as raised:
        wrong.models.list()
    assert raised.value.body["type"] == "authentication_error"


@pytest.fixture(scope="module")
def chatty_app(tmp_path_factory):
    """In this process: "chatty", the demo model with a chat template in its tokenizer_config.json (it names the
    target language and sends every user turn; it refuses system messages), and a queue of 2 behind 2 rows."""
    from model import demo_model_dir

    chatty = tmp_path_factory.mktemp("models") / "chatty"
    chatty.mkdir()
    for source in demo_model_dir().iterdir():
        if source.name != "tokenizer_config.json":
            (chatty / source.name).symlink_to(source)
    config = json.loads((demo_model_dir() / "tokenizer_config.json").read_text())
    template = ("{% if messages[0]['role'] == 'system' %}{{ raise_exception('no system messages') }}{% endif %}"
                ">>it<< {% for m in messages if m['role'] == 'user' %}{{ m['content'] }}{% endfor %}")
    (chatty / "tokenizer_config.json").write_text(json.dumps({**config, "chat_template": template}))
    settings = Settings(dtype="float32", max_batch_rows=2, max_waiting_sequences=2, engine_process=False)
    with in_process_client(settings, [str(chatty)]) as app:
        yield app


def test_a_full_queue_is_a_503_with_retry_after_in_openai_shape(chatty_app):
    """More choices than the batch rows and the queue hold: 503 with Retry-After (the client retries it), the
    choices already queued leave the batch."""
    response = chatty_app.post("/v1/completions", json={"model": "chatty", "prompt": [words(n) for n in range(1, 9)]})
    assert response.status_code == 503 and response.headers["retry-after"] == "1"
    assert response.json()["error"]["type"] == "server_error"

    def served() -> bool:
        return chatty_app.post("/v1/completions", json={"model": "chatty", "prompt": words(3)}).status_code == 200

    assert eventually(served, timeout=10, interval=0.1)  # once the engine has let the cancelled ones go


def test_a_models_own_chat_template_makes_its_input(chatty_app):
    messages = [{"role": "user", "content": "six hundred "}, {"role": "assistant", "content": "?"},
                {"role": "user", "content": "and five"}]
    answer = chatty_app.post("/v1/chat/completions", json={"model": "chatty", "messages": messages}).json()
    assert answer["choices"][0]["message"]["content"] == words(605, "it")
    refused = chatty_app.post("/v1/chat/completions", json={"model": "chatty", "messages": [
        {"role": "system", "content": "x"}, *messages]})
    assert refused.status_code == 400 and refused.json()["error"]["param"] == "messages"
    assert "no system messages" in refused.json()["error"]["message"]
