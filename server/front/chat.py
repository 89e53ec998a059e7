"""A conversation as one generation job's text: the model's own chat template where its tokenizer_config.json has one
(rendered as transformers renders it, in jinja's sandbox), else the last user message after the system (developer)
messages. OpenAI's chat completions read their messages into (role, text) pairs; this decides what is sent."""

from __future__ import annotations

from functools import lru_cache
from typing import Sequence

from jinja2 import Template, TemplateError
from jinja2.sandbox import ImmutableSandboxedEnvironment

from ..errors import InvalidRequest
from .provider import ModelProvider

SYSTEM_ROLES = ("system", "developer")


def refuse(message: str):
    raise TemplateError(message)


TEMPLATES = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)  # as transformers renders them
TEMPLATES.globals["raise_exception"] = refuse


@lru_cache(maxsize=16)
def compiled(template: str) -> Template:
    return TEMPLATES.from_string(template)


def chat_text(provider: ModelProvider, model: str, messages: Sequence[tuple[str, str]]) -> str:
    """The encoder's input for a conversation of (role, text) messages to `model`: its chat template's rendering
    where it has one; else (these models have none) the last user message as it is, after the system (developer)
    messages' texts, each separated by a blank line. Earlier turns are not sent."""
    template = next((info.chat_template for info in provider.models() if info.id == model), None)
    if template is not None:
        try:
            return compiled(template).render(messages=[{"role": role, "content": text} for role, text in messages],
                                             add_generation_prompt=True)
        except TemplateError as e:
            raise InvalidRequest(f"messages: the model's chat template refused them: {e}", field="messages") from None
    users = [text for role, text in messages if role == "user"]
    if not users:
        raise InvalidRequest("messages: at least one message with role 'user' is required", field="messages")
    return "\n\n".join([text for role, text in messages if role in SYSTEM_ROLES and text] + [users[-1]])
