"""The extractor backends: one module each, one registry, and how `auto` chooses.

``extractor`` in config.toml names one: ``openai`` | ``claude`` | ``llama`` | ``verbatim``, or
``auto``, which takes the first available in this order:

1. ``llama``   when ``llama_model`` is set: it is only ever set on purpose, and costs nothing;
2. ``openai``  when the variable named by ``openai_api_key_env`` holds a key (or
               ``openai_base_url`` points at a server);
3. ``claude``  when Claude Code is logged in (see ``claude_backend.claude_login``);
4. ``verbatim`` otherwise: no LLM, no extraction jobs; verbatim episodes only.

A new backend is a module with a class implementing ``base.Backend`` plus one ``register`` call.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from processor.config import Settings
from processor.jobs.backends.base import (
    Backend,
    BackendError,
    BackendUnavailable,
    LLMRequest,
    LLMResponse,
    OutputError,
)

Factory = Callable[[Settings], Backend]
Detector = Callable[[Settings, Mapping[str, str]], str | None]  # a reason it is available, or None


@dataclass(frozen=True)
class BackendSpec:
    name: str
    factory: Factory
    detect: Detector


_REGISTRY: dict[str, BackendSpec] = {}


def register(name: str, factory: Factory, detect: Detector) -> None:
    """Add a backend; `auto` tries backends in registration order."""
    _REGISTRY[name] = BackendSpec(name, factory, detect)


def names() -> list[str]:
    return [*_REGISTRY, "verbatim"]


def _openai(settings: Settings) -> Backend:
    from processor.jobs.backends.openai_backend import OpenAIBackend
    return OpenAIBackend(settings)


def _detect_openai(settings: Settings, env: Mapping[str, str]) -> str | None:
    if env.get(settings.openai_api_key_env):
        return f"${settings.openai_api_key_env} is set"
    if settings.openai_base_url:
        return f"openai_base_url is {settings.openai_base_url}"
    return None


def _claude(settings: Settings) -> Backend:
    from processor.jobs.backends.claude_backend import ClaudeBackend
    return ClaudeBackend(settings)


def _detect_claude(settings: Settings, env: Mapping[str, str]) -> str | None:
    from processor.jobs.backends.claude_backend import claude_login
    how = claude_login(env)
    return f"Claude Code is logged in ({how})" if how else None


def _llama(settings: Settings) -> Backend:
    from processor.jobs.backends.llama_backend import LlamaBackend
    return LlamaBackend(settings)


def _detect_llama(settings: Settings, env: Mapping[str, str]) -> str | None:
    return f"llama_model is {settings.llama_model}" if settings.llama_model else None


register("llama", _llama, _detect_llama)
register("openai", _openai, _detect_openai)
register("claude", _claude, _detect_claude)


def choose_backend(settings: Settings, env: Mapping[str, str] | None = None) -> tuple[str, str]:
    """(backend name, why) for the configured extractor; `auto` resolved."""
    env = os.environ if env is None else env
    wanted = (settings.extractor or "auto").strip().lower()
    if wanted == "auto":
        for spec in _REGISTRY.values():
            reason = spec.detect(settings, env)
            if reason:
                return spec.name, f"auto: {reason}"
        return "verbatim", "auto: no LLM configured (no llama_model, no API key, no Claude Code login)"
    if wanted == "verbatim" or wanted in _REGISTRY:
        return wanted, f"extractor = {wanted}"
    raise BackendUnavailable(f"extractor = {wanted!r} is not a backend; choose one of auto, {', '.join(names())}")


def create_backend(settings: Settings, name: str) -> Backend | None:
    """The backend object for a chosen name; None for verbatim. Raises BackendUnavailable with the fix."""
    if name == "verbatim":
        return None
    if name not in _REGISTRY:
        raise BackendUnavailable(f"no extractor backend named {name!r}; choose one of auto, {', '.join(names())}")
    return _REGISTRY[name].factory(settings)


__all__ = ["Backend", "BackendError", "BackendSpec", "BackendUnavailable", "LLMRequest",
           "LLMResponse", "OutputError", "choose_backend", "create_backend", "names", "register"]
