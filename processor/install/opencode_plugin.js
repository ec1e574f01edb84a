// Engram's plugin for opencode: what earlier sessions learned, told at opencode's own moments.
// Written into ~/.config/opencode/plugin/ by `engram install --agent opencode`; `engram uninstall` removes it.
//
// opencode has no command hooks, so this in-process plugin runs Engram's hook scripts (recall_hook/, the same
// ones Claude Code, the Codex CLI and the Gemini CLI run: one implementation of what is told, and of the
// once-a-session rule) with an event of opencode's, and puts their answer where opencode lets a plugin reach
// the model (processor/hook_kit/hook_io.py, "each agent's hook events", describes the events):
//   - a session's first prompt in this process (chat.message): the digest, a synthetic part of that message;
//   - after each tool call that returned (tool.execute.after, a shell command that exited non-zero included):
//     the bites of the user's message, what earlier sessions left about the call's file or command, and what
//     fixed the same failure, appended to the call's result (nothing can reach the model before a call);
//   - a tool that threw gets no tool.execute.after: what fixed the same failure is appended to its error in each
//     request's messages (experimental.chat.messages.transform).
// Every failure of its own (no Python, a hook that times out, an answer that is no JSON) leaves opencode as it
// was. No import of @opencode-ai/plugin at run time (opencode would install it from npm first).
import { spawn } from "node:child_process"
import { existsSync } from "node:fs"
import { resolve } from "node:path"

const ENGRAM = null // engram install writes the hook commands here

const MAX_OUTPUT = 512 * 1024 // of a call's output sent to a hook (its stdin is read up to 1 MB)

function runHook(argv, event, timeoutMs, cwd) {
  return new Promise((done) => {
    let child
    try {
      child = spawn(argv[0], argv.slice(1), { cwd, stdio: ["pipe", "pipe", "ignore"] })
    } catch {
      return done(null)
    }
    const chunks = []
    const timer = setTimeout(() => child.kill("SIGKILL"), timeoutMs)
    child.stdout.on("data", (chunk) => chunks.push(chunk))
    child.on("error", () => {
      clearTimeout(timer)
      done(null)
    })
    child.on("close", () => {
      clearTimeout(timer)
      try {
        const text = Buffer.concat(chunks).toString("utf8").trim()
        done(text ? JSON.parse(text) : null)
      } catch {
        done(null)
      }
    })
    child.stdin.on("error", () => {})
    child.stdin.end(JSON.stringify(event))
  })
}

function contextOf(answer) {
  const context = answer?.hookSpecificOutput?.additionalContext
  return typeof context === "string" && context.trim() ? context : null
}

function clip(text) {
  return text.length > MAX_OUTPUT ? text.slice(0, MAX_OUTPUT / 2) + "\n…\n" + text.slice(-MAX_OUTPUT / 2) : text
}

export const EngramMemory = async ({ directory, client }) => {
  if (!ENGRAM) return {}
  const started = new Set() // sessions whose digest this process asked for
  const creating = new Map() // call id → the file it writes did not exist before it ran
  const asked = new Set() // calls that threw, looked at once
  const errors = new Map() // call id → what was told after it threw (re-applied to every request)
  const hook = (name, event) => runHook(ENGRAM.hooks[name], event, ENGRAM.timeouts[name], directory)
  const show = (answer) => {
    // The line a user sees ("Engram: 1 memory — ep_…"), in opencode's log.
    if (typeof answer?.systemMessage !== "string") return
    try {
      Promise.resolve(client?.app?.log?.({ body: { service: "engram", level: "info", message: answer.systemMessage } }))
        .catch(() => {})
    } catch {}
  }

  return {
    "chat.message": async (input, output) => {
      const first = output?.parts?.[0]
      if (!first || typeof input?.sessionID !== "string") return
      const told = []
      if (!started.has(input.sessionID)) {
        started.add(input.sessionID)
        const answer = await hook("sessionStart", { session_id: input.sessionID, cwd: directory,
          hook_event_name: "SessionStart", source: "startup" })
        if (contextOf(answer)) {
          told.push(contextOf(answer))
          show(answer)
        }
      }
      if (ENGRAM.hooks.prompt) {
        const prompt = output.parts.filter((p) => p.type === "text" && !p.synthetic).map((p) => p.text).join("\n")
        const answer = prompt.trim() ? await hook("prompt", { session_id: input.sessionID, cwd: directory,
          hook_event_name: "UserPromptSubmit", prompt }) : null
        if (contextOf(answer)) {
          told.push(contextOf(answer))
          show(answer)
        }
      }
      if (told.length) {
        // A part of the user's message, marked synthetic (Engram's capture leaves it out); its id sorts after
        // the message's first part.
        output.parts.push({ id: first.id + "engram", sessionID: first.sessionID, messageID: first.messageID,
          type: "text", text: told.join("\n\n"), synthetic: true })
      }
    },

    "tool.execute.before": async (input, output) => {
      const path = output?.args?.filePath
      if (input?.tool === "write" && typeof path === "string") creating.set(input.callID, !existsSync(resolve(directory, path)))
    },

    "tool.execute.after": async (input, output) => {
      const created = creating.get(input?.callID) === true
      creating.delete(input?.callID)
      // An MCP tool's result is no text: nothing appended to it would reach the model, so nothing is told.
      if (!output || typeof output.output !== "string" || typeof input?.sessionID !== "string") return
      const metadata = output.metadata ?? {}
      const answer = await hook("afterTool", { session_id: input.sessionID, cwd: directory,
        hook_event_name: "tool.execute.after", tool_name: input.tool, tool_input: input.args ?? {},
        tool_use_id: input.callID,
        tool_response: { output: clip(typeof metadata.output === "string" ? metadata.output : output.output),
          exit: Number.isInteger(metadata.exit) ? metadata.exit : null },
        created })
      const context = contextOf(answer)
      if (context) {
        output.output = output.output + "\n\n" + context
        show(answer)
      }
    },

    "experimental.chat.messages.transform": async (_input, output) => {
      const messages = output?.messages ?? []
      const last = messages.findLast?.((m) => m?.info?.role === "assistant")
      for (const message of messages) {
        for (const part of message?.parts ?? []) {
          if (part?.type !== "tool" || part.state?.status !== "error") continue
          if (message === last && !asked.has(part.callID)) {
            asked.add(part.callID)
            const answer = await hook("toolError", { session_id: part.sessionID ?? message.info?.sessionID,
              cwd: directory, hook_event_name: "experimental.chat.messages.transform", tool_name: part.tool,
              tool_input: part.state.input ?? {}, tool_use_id: part.callID, error: clip(String(part.state.error ?? "")) })
            if (contextOf(answer)) {
              errors.set(part.callID, contextOf(answer))
              show(answer)
            }
          }
          const told = errors.get(part.callID)
          if (told && !String(part.state.error).includes(told)) part.state.error = String(part.state.error) + "\n\n" + told
        }
      }
    },
  }
}
