// Engram's extension for pi: what earlier sessions learned, told at pi's own moments, and Engram's memory tools.
// Written into ~/.pi/agent/extensions/ by `engram install --agent pi`; `engram uninstall` removes it.
//
// pi has no command hooks and no MCP, so this extension (loaded by pi itself, no build, no imports beyond Node's)
// runs Engram's hook scripts (recall_hook/, the same ones Claude Code, the Codex CLI and the Gemini CLI run: one
// implementation of what is told, and of the once-a-session rule) with an event of pi's, and puts their answer
// where pi lets an extension reach the model (processor/hook_kit/hook_io.py, "each agent's hook events"):
//   - a session's first prompt in this process (before_agent_start): the digest, as a message of Engram's after
//     the prompt (a custom_message in the session file, which Engram's capture leaves out);
//   - after each tool call, failed or not (tool_result): the bites of the user's message, what earlier sessions
//     left about the call's file or command, and what fixed the same failure, appended to the call's result
//     (pi's tool_call event can only block or patch a call: nothing reaches the model before it).
// Engram's MCP tools (memory_recall, memory_expand, …) are registered as pi tools named engram_<tool>, each call
// sent to Engram's MCP bridge (`python -I -m mcp_tools.bridge`, started on the first call and kept for the
// session). Every failure of its own leaves pi as it was.
import { spawn } from "node:child_process";
import { existsSync } from "node:fs";
import { resolve } from "node:path";

const ENGRAM: any = null; // engram install writes the hook commands and the tools here

const MAX_OUTPUT = 512 * 1024; // of a call's output sent to a hook (its stdin is read up to 1 MB)

function runHook(argv: string[], event: object, timeoutMs: number, cwd: string): Promise<any> {
	return new Promise((done) => {
		let child: any;
		try {
			child = spawn(argv[0], argv.slice(1), { cwd, stdio: ["pipe", "pipe", "ignore"] });
		} catch {
			return done(null);
		}
		const chunks: Buffer[] = [];
		const timer = setTimeout(() => child.kill("SIGKILL"), timeoutMs);
		child.stdout.on("data", (chunk: Buffer) => chunks.push(chunk));
		child.on("error", () => {
			clearTimeout(timer);
			done(null);
		});
		child.on("close", () => {
			clearTimeout(timer);
			try {
				const text = Buffer.concat(chunks).toString("utf8").trim();
				done(text ? JSON.parse(text) : null);
			} catch {
				done(null);
			}
		});
		child.stdin.on("error", () => {});
		child.stdin.end(JSON.stringify(event));
	});
}

function contextOf(answer: any): string | null {
	const context = answer?.hookSpecificOutput?.additionalContext;
	return typeof context === "string" && context.trim() ? context : null;
}

function textOf(content: any): string {
	if (typeof content === "string") return content;
	if (!Array.isArray(content)) return "";
	return content.filter((p: any) => p?.type === "text" && typeof p.text === "string").map((p: any) => p.text).join("\n");
}

function clip(text: string): string {
	return text.length > MAX_OUTPUT ? text.slice(0, MAX_OUTPUT / 2) + "\n…\n" + text.slice(-MAX_OUTPUT / 2) : text;
}

// Engram's MCP tools through its bridge: newline-delimited JSON-RPC on the bridge's stdin and stdout.
class Bridge {
	private child: any;
	private pending = new Map<number, (message: any) => void>();
	private next = 1;
	private buffer = "";
	private ready: Promise<any>;

	constructor(argv: string[], cwd: string) {
		this.child = spawn(argv[0], argv.slice(1), { cwd, stdio: ["pipe", "pipe", "ignore"] });
		this.child.stdout.setEncoding("utf8");
		this.child.stdout.on("data", (chunk: string) => {
			this.buffer += chunk;
			let end: number;
			while ((end = this.buffer.indexOf("\n")) >= 0) {
				const line = this.buffer.slice(0, end);
				this.buffer = this.buffer.slice(end + 1);
				try {
					const message = JSON.parse(line);
					this.pending.get(message.id)?.(message);
					this.pending.delete(message.id);
				} catch {}
			}
		});
		const fail = () => {
			for (const answer of this.pending.values()) answer({ error: { message: "Engram's MCP bridge stopped" } });
			this.pending.clear();
		};
		this.child.on("error", fail);
		this.child.on("close", fail);
		this.child.stdin.on("error", () => {});
		this.ready = this.request("initialize", {
			protocolVersion: ENGRAM.protocolVersion,
			capabilities: {},
			clientInfo: { name: "engram-pi-extension", version: "1" },
		}).then(() => this.send({ jsonrpc: "2.0", method: "notifications/initialized" }));
	}

	private send(message: object): void {
		this.child.stdin.write(JSON.stringify(message) + "\n");
	}

	private request(method: string, params: object): Promise<any> {
		const id = this.next++;
		return new Promise((done) => {
			this.pending.set(id, done);
			this.send({ jsonrpc: "2.0", id, method, params });
		});
	}

	async call(name: string, args: object, sessionId: string | undefined): Promise<any> {
		await this.ready;
		// The session that called, as Claude Code passes it (the tools leave its own memories out of a search).
		return this.request("tools/call", { name, arguments: args, _meta: sessionId ? { "claudecode/sessionId": sessionId } : {} });
	}

	close(): void {
		try {
			this.child.stdin.end();
		} catch {}
	}
}

export default function (pi: any) {
	if (!ENGRAM) return;
	const started = new Set<string>(); // sessions whose digest this process asked for
	const creating = new Map<string, boolean>(); // call id → the file it writes did not exist before it ran
	let session: { id?: string; cwd: string } = { cwd: process.cwd() };
	let bridge: Bridge | null = null;
	const hook = (name: string, event: object) => runHook(ENGRAM.hooks[name], event, ENGRAM.timeouts[name], session.cwd);
	const follow = (ctx: any) => {
		session = { id: ctx?.sessionManager?.getSessionId?.(), cwd: typeof ctx?.cwd === "string" ? ctx.cwd : session.cwd };
	};
	const show = (answer: any, ctx: any) => {
		// The line a user sees ("Engram: 1 memory — ep_…"); a no-op in pi's print mode.
		if (typeof answer?.systemMessage !== "string") return;
		try {
			ctx?.ui?.notify?.(answer.systemMessage, "info");
		} catch {}
	};

	pi.on("before_agent_start", async (event: any, ctx: any) => {
		follow(ctx);
		if (!session.id) return;
		const told: string[] = [];
		if (!started.has(session.id)) {
			started.add(session.id);
			const answer = await hook("sessionStart", { session_id: session.id, cwd: session.cwd, hook_event_name: "SessionStart", source: "startup" });
			if (contextOf(answer)) {
				told.push(contextOf(answer) as string);
				show(answer, ctx);
			}
		}
		if (ENGRAM.hooks.prompt && typeof event?.prompt === "string" && event.prompt.trim()) {
			const answer = await hook("prompt", { session_id: session.id, cwd: session.cwd, hook_event_name: "UserPromptSubmit", prompt: event.prompt });
			if (contextOf(answer)) {
				told.push(contextOf(answer) as string);
				show(answer, ctx);
			}
		}
		if (told.length) return { message: { customType: "engram", content: told.join("\n\n"), display: false } };
	});

	pi.on("tool_call", async (event: any, ctx: any) => {
		const path = event?.input?.path;
		if (event?.toolName === "write" && typeof path === "string") {
			creating.set(event.toolCallId, !existsSync(resolve(ctx?.cwd ?? session.cwd, path)));
		}
	});

	pi.on("tool_result", async (event: any, ctx: any) => {
		follow(ctx);
		const created = creating.get(event?.toolCallId) === true;
		creating.delete(event?.toolCallId);
		if (!session.id || typeof event?.toolName !== "string" || event.toolName.startsWith("engram_")) return;
		const answer = await hook("afterTool", {
			session_id: session.id,
			cwd: session.cwd,
			hook_event_name: "tool_result",
			tool_name: event.toolName,
			tool_input: event.input ?? {},
			tool_use_id: event.toolCallId,
			tool_response: { output: clip(textOf(event.content)), is_error: event.isError === true },
			created,
		});
		const context = contextOf(answer);
		if (!context) return;
		show(answer, ctx);
		return { content: [...(Array.isArray(event.content) ? event.content : []), { type: "text", text: context }] };
	});

	for (const tool of ENGRAM.tools) {
		pi.registerTool({
			name: "engram_" + tool.name,
			label: tool.title ?? tool.name,
			description: tool.description,
			parameters: tool.inputSchema,
			async execute(_toolCallId: string, params: any) {
				bridge ??= new Bridge(ENGRAM.mcp, session.cwd);
				const answer = await bridge.call(tool.name, params ?? {}, session.id);
				const result = answer?.result;
				const text = result ? textOf(result.content) : `Engram: ${answer?.error?.message ?? "no answer"}`;
				return { content: [{ type: "text", text }], details: {}, isError: !result || result.isError === true };
			},
		});
	}

	pi.on("session_shutdown", async () => {
		bridge?.close();
		bridge = null;
	});
}
