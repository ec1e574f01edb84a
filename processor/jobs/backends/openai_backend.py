"""The `openai` backend: any OpenAI-compatible chat completions endpoint with JSON-schema output.

``openai_base_url`` points it at OpenAI (empty), Ollama, LM Studio, vLLM or llama.cpp's server;
``openai_model`` picks the model; the API key is read from the environment variable named by
``openai_api_key_env`` and is never logged (error texts are scrubbed of it). The SDK's own
retries are off: the job queue retries durably, with backoff and a circuit breaker.
"""

from __future__ import annotations

import os
import time
from email.utils import parsedate_to_datetime
from typing import Any

from processor.config import Settings
from processor.jobs.backends.base import BackendError, BackendUnavailable, LLMRequest, LLMResponse, OutputError

# Local servers ignore the key but the SDK insists on one.
_LOCAL_PLACEHOLDER_KEY = "not-needed-for-a-local-server"


def api_key_from(settings: Settings, env: dict[str, str] | None = None) -> str | None:
    env = dict(os.environ) if env is None else env
    return env.get(settings.openai_api_key_env) or None


class OpenAIBackend:
    name = "openai"
    billed = True
    prompt_token_limit: int | None = None  # max_prompt_tokens holds

    def __init__(self, settings: Settings, *, api_key: str | None = None, env: dict[str, str] | None = None) -> None:
        self.model = settings.openai_model
        self.base_url = settings.openai_base_url or None
        key = api_key or api_key_from(settings, env)
        if key is None:
            if self.base_url is None:
                raise BackendUnavailable(
                    f"extractor 'openai' needs an API key in ${settings.openai_api_key_env}: export it (or set "
                    "openai_api_key_env to the variable that holds it), or set openai_base_url to a local server")
            key = _LOCAL_PLACEHOLDER_KEY
        self._secret = key
        self._key_env = settings.openai_api_key_env
        try:
            import openai
        except ImportError as exc:  # pragma: no cover - a declared dependency
            raise BackendUnavailable(f"the openai package is not installed ({exc}); install Engram's dependencies") \
                from None
        self._openai = openai
        self._client = openai.OpenAI(api_key=key, base_url=self.base_url, max_retries=0,
                                     timeout=settings.llm_timeout_seconds)

    def _scrub(self, text: str) -> str:
        return text.replace(self._secret, "***") if self._secret else text

    def _where(self) -> str:
        return self.base_url or "the OpenAI API"

    def complete(self, request: LLMRequest) -> LLMResponse:
        openai = self._openai
        try:
            response = self._client.chat.completions.create(
                model=self.model,
                messages=[{"role": "system", "content": request.system},
                          {"role": "user", "content": request.prompt}],
                response_format={"type": "json_schema", "json_schema": {
                    "name": request.schema_name, "schema": request.schema, "strict": True}},
                max_completion_tokens=request.max_output_tokens,
                temperature=0,
                timeout=request.timeout,
            )
        except openai.APITimeoutError:
            raise BackendError(f"{self._where()} did not answer within {request.timeout:g} s "
                               "(llm_timeout_seconds)") from None
        except openai.APIConnectionError as exc:
            raise BackendError(f"cannot reach {self._where()}: {self._scrub(str(exc.__cause__ or exc))}; "
                               "is the server running and openai_base_url right?") from None
        except openai.RateLimitError as exc:
            raise BackendError(f"{self._where()} is rate limiting (429): {self._brief(exc)}",
                               retry_after=_retry_after(exc.response), status=429) from None
        except openai.NotFoundError as exc:
            raise BackendError(
                f"{self._where()} has no model {self.model!r} (404: {self._brief(exc)}); set openai_model to a "
                "model it serves", status=404) from None
        except openai.AuthenticationError as exc:
            raise BackendError(f"{self._where()} refused the API key in ${self._key_env} (401: "
                               f"{self._brief(exc)})", status=401) from None
        except openai.APIStatusError as exc:
            raise BackendError(f"{self._where()} answered HTTP {exc.status_code}: {self._brief(exc)}",
                               retry_after=_retry_after(exc.response), status=exc.status_code) from None
        except openai.APIError as exc:  # e.g. a body that is not the chat completions format
            raise BackendError(f"{self._where()} sent an unusable response: {self._scrub(str(exc))[:300]}") from None
        if not response.choices:
            raise BackendError(f"{self._where()} answered with no choices")
        choice = response.choices[0]
        message = choice.message
        text = message.content or ""
        if not text and getattr(message, "refusal", None):
            raise OutputError(f"{self.model} refused to answer: {self._scrub(str(message.refusal))[:200]}")
        usage = response.usage
        return LLMResponse(
            text=text,
            tokens_in=int(getattr(usage, "prompt_tokens", 0) or 0),
            tokens_out=int(getattr(usage, "completion_tokens", 0) or 0),
            model=str(response.model or self.model),
        )

    def _brief(self, exc: Any) -> str:
        body = getattr(exc, "body", None)
        message = body.get("message") if isinstance(body, dict) else None
        if message is None and isinstance(body, dict) and isinstance(body.get("error"), dict):
            message = body["error"].get("message")
        return self._scrub(str(message or exc))[:300]

    def close(self) -> None:
        self._client.close()


def _retry_after(response: Any) -> float | None:
    """Seconds from a Retry-After (or retry-after-ms) header; None when absent or unreadable."""
    headers = getattr(response, "headers", None)
    if headers is None:
        return None
    raw_ms = headers.get("retry-after-ms")
    if raw_ms:
        try:
            return max(float(raw_ms) / 1000, 0.0)
        except ValueError:
            pass
    raw = headers.get("retry-after")
    if raw:
        try:
            return max(float(raw), 0.0)
        except ValueError:
            try:
                return max(parsedate_to_datetime(raw).timestamp() - time.time(), 0.0)
            except (TypeError, ValueError):
                return None
    return None
