// Engram viewer: keyboard shortcuts, confirmation of destructive forms, live updates by server-sent events.
// No inline script anywhere (the Content-Security-Policy forbids it); nothing here builds HTML from data:
// new timeline rows come rendered (and escaped) by the server.
"use strict";

document.addEventListener("keydown", (event) => {
  const target = event.target;
  const typing = target instanceof HTMLInputElement || target instanceof HTMLTextAreaElement || target instanceof HTMLSelectElement;
  if (event.key === "/" && !typing) {
    event.preventDefault();
    const box = document.getElementById("q") || document.getElementById("quick-q");
    if (box) box.focus();
  }
});

document.addEventListener("submit", (event) => {
  const form = event.target;
  if (form instanceof HTMLFormElement && form.dataset.confirm && !window.confirm(form.dataset.confirm)) {
    event.preventDefault();
  }
});

function say(text) {
  const live = document.getElementById("live");
  if (live) live.textContent = text;
}

async function refreshTimeline(list) {
  const params = new URLSearchParams({m: list.dataset.m, e: list.dataset.e, i: list.dataset.i});
  const answer = await fetch(`/ui/session/${encodeURIComponent(list.dataset.session)}/items?${params}`,
                             {credentials: "same-origin", headers: {Accept: "application/json"}});
  if (!answer.ok) return;
  const data = await answer.json();
  const holder = document.createElement("template");
  holder.innerHTML = data.html;  // server-rendered with autoescaping, like every page
  let added = 0;
  for (const row of Array.from(holder.content.children)) {
    if (row.id && document.getElementById(row.id)) continue;
    row.classList.add("fresh");
    list.appendChild(row);
    added += 1;
  }
  list.dataset.m = data.m; list.dataset.e = data.e; list.dataset.i = data.i;
  if (added) say(`${added} new item${added === 1 ? "" : "s"} in this session`);
}

function live() {
  if (!window.EventSource) return;
  const found = document.getElementById("timeline");
  const list = found && found.dataset.live === "on" ? found : null;  // an earlier page stays as it is
  const source = new EventSource("/ui/events");
  source.addEventListener("change", (event) => {
    const data = JSON.parse(event.data);
    if (list && data.sessions.includes(list.dataset.session)) {
      refreshTimeline(list);
    } else if (!found) {
      const n = data.new;
      say(`new: ${n.messages} messages, ${n.memories} memories, ${n.injections} injections (reload to see them)`);
    }
  });
  source.addEventListener("open", () => document.body.dataset.live = "on");
}

live();
