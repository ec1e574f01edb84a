"""The `claude` backend: Claude Code itself through claude-agent-sdk, with the user's own login.

The child must never become another Engram session (seed 000: recursive spawning cost 40 GB):
- ``setting_sources=[]``: no user/project/local settings, so none of the user's hooks, enabled
  plugins (this very plugin included) or permission rules load;
- ``mcp_servers={}`` + ``strict_mcp_config``: no MCP server from any configuration file;
- ``tools=[]``, every built-in tool disallowed, ``skills=[]``, ``permission_mode="dontAsk"``;
- ``cwd`` = Engram's agent work dir (0700), so the child's transcript lands in
  ``<claude config>/projects/<encoded agent dir>/``, a folder the tailer excludes;
- ``ENGRAM_AGENT_CHILD=1`` in its environment, for any Engram code that does get started in it;
- ``verbatim_prompts``: the transcript text is not expanded (no @file reads, no slash commands).
The answer comes back as JSON-schema structured output (``output_format``), in few turns.
The CLI reports what the call cost; that figure is what the budget counts.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections import deque
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from processor.config import Settings, claude_config_dir, ensure_private_dir
from processor.jobs.backends.base import BackendError, BackendUnavailable, LLMRequest, LLMResponse, OutputError

ENGRAM_CHILD_ENV = "ENGRAM_AGENT_CHILD"
# Structured output is delivered through a tool call, so a turn or two beyond the answer.
MAX_TURNS = 3
CHECK_MAX_TURNS = 12  # the inquisitor's check reads a few files and runs a few git commands first
# Prices are looked up under this name when claude_model is empty (the CLI picks the model);
# a Sonnet is the CLI's default for most accounts, so the pre-call estimate errs high.
DEFAULT_PRICE_MODEL = "claude-sonnet-4-5"
DISALLOWED_TOOLS = (
    "Agent", "Task", "Bash", "BashOutput", "KillShell", "Read", "Write", "Edit", "MultiEdit", "NotebookEdit",
    "NotebookRead", "Glob", "Grep", "LS", "WebFetch", "WebSearch", "TodoWrite", "Skill", "SlashCommand",
    "ExitPlanMode",
)

TransportFactory = Callable[[Any], Any]  # (ClaudeAgentOptions) -> claude_agent_sdk Transport


def claude_login(env: Mapping[str, str] | None = None) -> str | None:
    """How the user is logged in to Claude Code, or None.

    An API key or OAuth token in the environment, Linux's credentials file, or the account Claude
    Code records in .claude.json after `claude login` (macOS keeps the secret in the Keychain).
    """
    env = os.environ if env is None else env
    for name in ("ANTHROPIC_API_KEY", "CLAUDE_CODE_OAUTH_TOKEN"):
        if env.get(name):
            return f"${name} is set"
    config_dir = claude_config_dir(env)
    if (config_dir / ".credentials.json").is_file():
        return f"{config_dir / '.credentials.json'} exists"
    home = Path(env.get("HOME") or Path.home())
    for path in (config_dir / ".claude.json", home / ".claude.json"):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(data, dict) and data.get("oauthAccount"):
            return f"{path} records a logged-in account"
    return None


class ClaudeBackend:
    name = "claude"
    billed = True
    prompt_token_limit: int | None = None  # max_prompt_tokens holds

    def __init__(self, settings: Settings, *, transport_factory: TransportFactory | None = None,
                 cli_path: str | Path | None = None) -> None:
        try:
            import claude_agent_sdk
        except ImportError as exc:  # pragma: no cover - a declared dependency
            raise BackendUnavailable(f"claude-agent-sdk is not installed ({exc}); install Engram's dependencies") \
                from None
        self._sdk = claude_agent_sdk
        self.cli_model = settings.claude_model or None
        self.model = self.cli_model or DEFAULT_PRICE_MODEL
        self.workdir = Path(settings.agent_workdir)
        self.transport_factory = transport_factory
        self.cli_path = cli_path

    def agent_options(self, request: LLMRequest, stderr: Callable[[str], None] | None = None) -> Any:
        """The options the child runs with: no settings, no hooks, no MCP, no tools, in the agent dir."""
        return self._sdk.ClaudeAgentOptions(
            tools=[],
            allowed_tools=[],
            disallowed_tools=list(DISALLOWED_TOOLS),
            setting_sources=[],
            mcp_servers={},
            strict_mcp_config=True,
            plugins=[],
            skills=[],
            hooks=None,
            agents=None,
            permission_mode="dontAsk",
            cwd=str(self.workdir),
            max_turns=MAX_TURNS,
            model=self.cli_model,
            system_prompt=request.system,
            output_format={"type": "json_schema", "schema": request.schema},
            thinking={"type": "disabled"},
            env={ENGRAM_CHILD_ENV: "1"},
            # Transcript text goes in as written: an "@/path" in it must not make the child read a file,
            # and a leading "/" must not run a slash command (ignored by CLIs older than 2.1.248).
            verbatim_prompts=True,
            cli_path=str(self.cli_path) if self.cli_path else None,
            stderr=stderr,
        )

    def read_only_options(self, request: LLMRequest, stderr: Callable[[str], None] | None = None) -> Any:
        """The inquisitor's check: the same isolation, plus Read/Glob/Grep and Bash limited to four git verbs.

        The child still runs in Engram's work dir; the project is added as a readable folder, and every
        Bash command passes ``readonly_tools.can_use_tool`` (which needs the prompt streamed).
        """
        from processor.jobs.backends.readonly_tools import READ_TOOLS, can_use_tool

        options = self.agent_options(request, stderr)
        options.tools = [*READ_TOOLS, "Bash"]
        options.allowed_tools = list(READ_TOOLS)
        options.disallowed_tools = [t for t in DISALLOWED_TOOLS if t not in (*READ_TOOLS, "Bash")]
        options.add_dirs = [request.read_only_root]
        options.permission_mode = "default"
        options.can_use_tool = can_use_tool
        options.max_turns = CHECK_MAX_TURNS
        return options

    def complete(self, request: LLMRequest) -> LLMResponse:
        ensure_private_dir(self.workdir)
        stderr_tail: deque[str] = deque(maxlen=20)
        options = (self.read_only_options(request, stderr=stderr_tail.append) if request.read_only_root
                   else self.agent_options(request, stderr=stderr_tail.append))
        sdk = self._sdk
        try:
            return asyncio.run(asyncio.wait_for(self._run(request, options), request.timeout))
        except TimeoutError:
            raise BackendError(f"claude did not answer within {request.timeout:g} s (llm_timeout_seconds)") from None
        except sdk.CLINotFoundError as exc:
            raise BackendError(f"Claude Code CLI not found ({exc}); install Claude Code or choose another "
                               "extractor") from None
        except sdk.ProcessError as exc:
            detail = " | ".join(stderr_tail) or str(exc)
            raise BackendError(f"the claude CLI failed (exit {exc.exit_code}): {detail[:400]}") from None
        except sdk.ClaudeSDKError as exc:
            raise BackendError(f"claude-agent-sdk failed: {str(exc)[:400]}") from None

    async def _run(self, request: LLMRequest, options: Any) -> LLMResponse:
        sdk = self._sdk
        transport = self.transport_factory(options) if self.transport_factory else None
        result = None
        prompt: Any = request.prompt
        if options.can_use_tool is not None:  # the SDK asks the callback only in streaming mode
            async def stream() -> Any:
                yield {"type": "user", "message": {"role": "user", "content": request.prompt},
                       "parent_tool_use_id": None, "session_id": "default"}
            prompt = stream()
        async for message in sdk.query(prompt=prompt, options=options, transport=transport):
            if isinstance(message, sdk.ResultMessage):
                result = message
        if result is None:
            raise BackendError("the claude CLI ended without a result message")
        usage = result.usage or {}
        tokens_in = sum(int(usage.get(k) or 0) for k in
                        ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens"))
        tokens_out = int(usage.get("output_tokens") or 0)
        model = next(iter(result.model_usage or {}), None) or self.model
        spent = LLMResponse(text="", tokens_in=tokens_in, tokens_out=tokens_out, model=model,
                            cost_usd=result.total_cost_usd)
        if result.is_error:
            detail = "; ".join(result.errors or []) or (result.result or result.subtype)
            error_class = OutputError if "structured_output" in (result.subtype or "") else BackendError
            raise error_class(f"claude answered with an error ({result.subtype}"
                              f"{f', HTTP {result.api_error_status}' if result.api_error_status else ''}): "
                              f"{str(detail)[:400]}", status=result.api_error_status, spent=spent)
        structured = result.structured_output
        text = json.dumps(structured) if structured is not None else (result.result or "")
        return LLMResponse(text=text, tokens_in=tokens_in, tokens_out=tokens_out, model=model,
                           cost_usd=result.total_cost_usd)

    def close(self) -> None:
        pass
