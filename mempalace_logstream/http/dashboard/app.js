// mempalace-logstream dashboard: plain JS, no build step, nothing fetched from elsewhere.
// Everything it shows comes from the hub's own routes; it writes only as an operator.
"use strict";

const STATES = ["open", "claimed", "working", "blocked", "ready", "completed", "declined",
  "failed", "cancelled"];
const VIEWS = ["agents", "tasks", "events", "thread", "sync"];
const ROW_H = 28;            // px per event row (the list is windowed: only visible rows exist)
const MAX_EVENTS = 20000;    // events kept in memory for the list
const MAX_SEEN = 100000;     // ids remembered to drop duplicates after a reconnect
const PRESENCE_POLL_MS = 5000;
const LEASE_POLL_MS = 5000;  // and at once when a lease event arrives
const FILTERS = ["stream", "room", "writer", "type", "correlation_id"];

const S = {
  session: null,
  view: "events",
  events: [],              // shown in the list, newest first (matching the filters)
  recent: [],              // every live event, newest first (agents' "last event")
  seen: new Set(),
  lastId: null,            // the newest event id received: the stream resumes after it
  pending: [],             // frames received since the last animation frame
  filters: {},
  tasks: new Map(),
  staleTasks: new Set(),
  presence: new Map(),
  wakeable: new Map(),       // agent -> {wakeable, paths, ...} from /v1/presence (issue 20)
  presenceFrames: false,
  leases: [],                // the active file leases from /v1/lease_list (issue 22)
  inbox: new Map(),
  thread: null,
  dirty: new Set(),
  frame: 0,
  es: null,
  stats: { received: 0, rendered: 0, duplicates: 0, frames: 0, reconnects: 0 },
};
window.dashboard = S;        // for the browser tests and the bench

// ------------------------------------------------------------------ small helpers

function h(tag, attrs, ...kids) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else if (k === "class") node.className = v;
    else node.setAttribute(k, v === true ? "" : String(v));
  }
  for (const kid of kids.flat()) {
    if (kid === null || kid === undefined || kid === false) continue;
    node.append(kid instanceof Node ? kid : document.createTextNode(String(kid)));
  }
  return node;
}

const $ = (id) => document.getElementById(id);

async function api(path, body) {
  const init = { credentials: "same-origin", headers: { "X-Logstream-Dashboard": "1" } };
  if (body !== undefined) {
    init.method = "POST";
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const resp = await fetch(path, init);
  if (resp.status === 401) { location.assign("/"); throw new Error("not logged in"); }
  const data = await resp.json().catch(() => ({}));
  if (!resp.ok) throw new Error(data.error || data.detail || `${resp.status} ${path}`);
  return data;
}

function qs(params) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v !== undefined && v !== null && v !== "") q.append(k, v);
  return q.toString();
}

function ago(iso) {
  if (!iso) return "";
  const s = Math.round((Date.now() - Date.parse(iso)) / 1000);
  if (s < 60) return `${Math.max(s, 0)} s ago`;
  if (s < 3600) return `${Math.floor(s / 60)} min ago`;
  return `${Math.floor(s / 3600)} h ago`;
}

function left(iso) {
  if (!iso) return "";
  const s = Math.round((Date.parse(iso) - Date.now()) / 1000);
  if (s <= 0) return "passed";
  const m = Math.floor(s / 60);
  return m ? `${m}:${String(s % 60).padStart(2, "0")} left` : `${s} s left`;
}

function time(iso) { return iso ? iso.slice(11, 19) : ""; }

function operatorName() {
  if (!S.session || !S.session.can_write) return null;
  if (S.session.operator) return S.session.operator;
  if (S.session.token_required) return null;  // a bearer client, not a browser session
  return ($("operator-name").value || "").trim() || null;
}

// ------------------------------------------------------------------ rendering, coalesced

function mark(...views) {
  for (const v of views) S.dirty.add(v);
  if (!S.frame) S.frame = requestAnimationFrame(flush);
}

function flush() {
  S.frame = 0;
  S.stats.frames++;
  if (S.pending.length) drain();
  for (const v of S.dirty) if (v === S.view || v === "header") RENDER[v]();
  S.dirty.clear();
}

function drain() {
  const batch = S.pending;
  S.pending = [];
  const shown = [];
  for (const ev of batch) {
    if (matches(ev)) shown.push(ev);
    if (ev.correlation_id && (ev.type.startsWith("task.") || ev.type.startsWith("patch."))) {
      S.staleTasks.add(ev.correlation_id);
    }
    if (S.thread && ev.correlation_id === S.thread.id) S.thread.stale = true;
  }
  S.recent = batch.slice(-500).reverse().concat(S.recent).slice(0, 2000);
  if (shown.length) {
    S.events = shown.reverse().concat(S.events);
    if (S.events.length > MAX_EVENTS) S.events.length = MAX_EVENTS;
  }
  S.stats.rendered += batch.length;
  S.dirty.add("events").add("agents").add("header");
  if (S.staleTasks.size) refreshTasksSoon();
  if (S.thread && S.thread.stale) loadThreadSoon();
}

function matches(ev) {
  for (const f of FILTERS) {
    const want = S.filters[f];
    if (want && ev[f === "writer" ? "from_agent" : f] !== want) return false;
  }
  return true;
}

function remember(id) {
  S.seen.add(id);
  if (S.seen.size > MAX_SEEN) {
    const drop = S.seen.size - MAX_SEEN;
    let i = 0;
    for (const old of S.seen) { if (i++ >= drop) break; S.seen.delete(old); }
  }
}

// ------------------------------------------------------------------ the live feed

function onEvent(ev) {
  S.stats.received++;
  if (S.seen.has(ev.id)) { S.stats.duplicates++; return; }
  remember(ev.id);
  S.lastId = ev.id;
  S.pending.push(ev);
  if (typeof ev.type === "string" && ev.type.startsWith("lease.")) refreshLeasesSoon();
  mark();
}

async function probePresenceFrames() {
  // A hub that knows `presence=1` opens the stream (200); an older one refuses it (400).
  const ctl = new AbortController();
  try {
    const resp = await fetch("/v1/stream?presence=1", { signal: ctl.signal, credentials: "same-origin" });
    ctl.abort();
    return resp.ok;
  } catch (e) {
    return false;
  }
}

function connect() {
  const params = { since_event_id: S.lastId || undefined, presence: S.presenceFrames ? "1" : undefined };
  const es = new EventSource("/v1/stream?" + qs(params));
  S.es = es;
  es.addEventListener("logstream", (e) => onEvent(JSON.parse(e.data)));
  es.addEventListener("presence", (e) => {
    const p = JSON.parse(e.data);
    if (p.state === "gone") S.presence.delete(p.agent); else S.presence.set(p.agent, p);
    mark("agents");
  });
  const resync = !S.lastId && !Object.keys(S.filters).length;
  es.onopen = () => {
    setConn("live", true);
    // Opened at the tip of an empty list: read once more, so an event appended between the
    // first read and this stream is not missed (ids already held are dropped as duplicates).
    if (resync && S.es === es) resyncEvents().catch(showError);
    // A (re)connected stream starts with one presence frame per current entry.
    if (S.presenceFrames) { S.presence.clear(); mark("agents"); }
  };
  es.onerror = () => {
    setConn("reconnecting", false);
    if (es.readyState === EventSource.CLOSED) {
      // The hub refused the stream (restarting, or at its client cap): open it again after
      // the newest event we hold; the browser resends nothing on its own once CLOSED.
      S.stats.reconnects++;
      setTimeout(() => reopen(es), 1000);
    }
  };
}

function reopen(es) {
  // Ask the hub first: an ended session sends the page to the login form (api() on a 401),
  // a hub still down is asked again a little later.
  if (S.es !== es) return;
  api("/dashboard/session").then(() => { if (S.es === es) connect(); },
    () => setTimeout(() => reopen(es), 2000));
}

function setConn(text, ok) {
  const c = $("conn");
  c.textContent = text;
  c.className = "badge " + (ok ? "live" : "down");
}

async function pollPresence() {
  try {
    // Presence frames carry the entries; the list also says who can be woken, and by what.
    const data = await api("/v1/presence");
    if (!S.presenceFrames) S.presence = new Map(data.agents.map((a) => [a.agent, a]));
    S.wakeable = new Map(data.agents.concat(data.unreachable || []).map((a) => [a.agent, a]));
    mark("agents");
  } catch (e) { /* the next poll tries again */ }
  setTimeout(pollPresence, PRESENCE_POLL_MS);
}

let leaseTimer = null;
async function pollLeases() {
  clearTimeout(leaseTimer);
  try {
    const data = await api("/v1/lease_list", { active: true, limit: 500 });
    S.leases = data.leases;
    mark("agents");
  } catch (e) { /* an older hub has no leases; the next poll tries again */ }
  leaseTimer = setTimeout(pollLeases, LEASE_POLL_MS);
}

function refreshLeasesSoon() {
  clearTimeout(leaseTimer);
  leaseTimer = setTimeout(pollLeases, 100);
}

// ------------------------------------------------------------------ events view

async function loadEvents() {
  const data = await api("/v1/events?" + qs({ ...S.filters, order: "desc", limit: 200 }));
  for (const ev of data.events) remember(ev.id);
  S.events = data.events;
  if (!S.lastId && data.events.length && !Object.keys(S.filters).length) S.lastId = data.events[0].id;
  $("older").hidden = !data.has_more;
  mark("events");
}

async function resyncEvents() {
  const data = await api("/v1/events?" + qs({ order: "desc", limit: 200 }));
  const have = new Set(S.events.map((e) => e.id));
  const extra = data.events.filter((e) => !have.has(e.id));
  for (const ev of extra) remember(ev.id);
  S.events = S.events.concat(extra).sort((a, b) => b.seq - a.seq).slice(0, MAX_EVENTS);
  mark("events");
}

async function loadOlder() {
  const oldest = S.events[S.events.length - 1];
  if (!oldest) return;
  const data = await api("/v1/events?" + qs({ ...S.filters, order: "desc", limit: 200, before_event_id: oldest.id }));
  S.events = S.events.concat(data.events).slice(0, MAX_EVENTS);
  $("older").hidden = !data.has_more;
  mark("events");
}

function renderEvents() {
  const list = $("event-list");
  const spacer = $("event-spacer");
  const n = S.events.length;
  spacer.style.height = `${n * ROW_H}px`;
  const first = Math.max(0, Math.floor(list.scrollTop / ROW_H) - 5);
  const last = Math.min(n, first + Math.ceil(list.clientHeight / ROW_H) + 10);
  const rows = [];
  for (let i = first; i < last; i++) rows.push(eventRow(S.events[i], i));
  spacer.replaceChildren(...rows);
  list.dataset.lastId = S.lastId || "";
  list.dataset.count = String(n);
  $("event-count").textContent = `${n} shown, ${S.stats.received} live`;
}

function eventRow(ev, i) {
  const task = ev.correlation_id;
  return h("div", { class: "row", style: `top:${i * ROW_H}px`, "data-id": ev.id, "data-type": ev.type },
    h("span", { class: "t", title: ev.created_at }, time(ev.created_at)),
    h("span", { class: "type" }, ev.type),
    h("span", null, `${ev.stream} / ${ev.room}`),
    h("span", null, ev.from_agent + (ev.to_agent ? ` → ${ev.to_agent}` : "")),
    task ? h("button", { type: "button", onclick: () => openThread(task) }, task) : null,
    h("span", { class: "body" }, (ev.body || "").slice(0, 200)));
}

// ------------------------------------------------------------------ agents view

function agentNames() {
  const names = new Set([...S.presence.keys(), ...S.wakeable.keys(), ...S.leases.map((l) => l.agent)]);
  for (const ev of S.recent.concat(S.events.slice(0, 500))) {
    names.add(ev.from_agent);
    if (ev.to_agent) names.add(ev.to_agent);
  }
  return [...names].sort().slice(0, 200);
}

function lastEventOf(agent) {
  return S.recent.find((e) => e.from_agent === agent) || S.events.find((e) => e.from_agent === agent);
}

function renderAgents() {
  const rows = agentNames().map((name) => {
    const p = S.presence.get(name);
    const live = p && Date.parse(p.expires_at) > Date.now() ? p : null;
    const ev = lastEventOf(name);
    const inbox = S.inbox.get(name);
    const w = S.wakeable.get(name);
    const paths = w && w.paths ? w.paths.map((p) => `${p.path} since ${time(p.since)}`).join(", ") : "";
    return h("tr", { "data-agent": name },
      h("td", null, name),
      h("td", { class: live ? `state-${live.state}` : "muted" }, live ? live.state : "away"),
      h("td", { class: w ? `wakeable-${w.wakeable}` : "muted", "data-wakeable": w ? w.wakeable : "" },
        w ? w.wakeable : ""),
      h("td", null, paths, w && w.last_push_at ? h("span", { class: "muted" }, ` (last push ${ago(w.last_push_at)} by ${w.last_push_path})`) : ""),
      h("td", null, live ? [live.task_id || "", live.note ? ` ${live.note}` : ""] : ""),
      h("td", null, live ? left(live.expires_at) : ""),
      h("td", null, ev ? `${ev.type}, ${ago(ev.created_at)}` : ""),
      h("td", null, inbox === undefined ? "…" : inbox),
      h("td", { class: "leases" }, leasesOf(name)));
  });
  $("agents-body").replaceChildren(...rows);
  renderLeases();
}

function activeLeases() {
  return S.leases.filter((l) => Date.parse(l.expires_at) > Date.now());
}

function leasesOf(agent) {
  const mine = activeLeases().filter((l) => l.agent === agent);
  if (!mine.length) return "";
  const globs = [...new Set(mine.flatMap((l) => l.paths))];
  const shown = globs.slice(0, 3).join(", ") + (globs.length > 3 ? `, +${globs.length - 3}` : "");
  return `${mine.length}: ${shown}`;
}

function renderLeases() {
  const rows = activeLeases().map((l) => h("tr", { "data-lease": l.lease_id },
    h("td", null, l.agent),
    h("td", { class: "paths" }, l.paths.join(", ")),
    h("td", null, l.exclusive ? "exclusive" : "shared"),
    h("td", { title: l.expires_at }, left(l.expires_at)),
    h("td", null, l.task_id || ""),
    h("td", null, l.reason || ""),
    h("td", null, String(l.fence)),
    h("td", null, l.project.replace(/^project\//, ""))));
  if (!rows.length) rows.push(h("tr", null, h("td", { colspan: "8", class: "muted" }, "No active file leases.")));
  $("leases-body").replaceChildren(...rows);
}

async function refreshInbox() {
  // Unacked inbox: the newest 200 events addressed to an agent that its acks do not name.
  if (S.view === "agents") {
    for (const name of agentNames().slice(0, 30)) {
      try {
        const mail = await api("/v1/events?" + qs({ to_agent: name, order: "desc", limit: 200, slim: "true" }));
        const acks = await api("/v1/events?" + qs({ type: "event.ack", writer: name, order: "desc", limit: 500 }));
        const acked = new Set(acks.events.map((a) => (a.metadata || {}).ack_of));
        const open = mail.events.filter((e) => e.type !== "event.ack" && !acked.has(e.id)).length;
        S.inbox.set(name, mail.has_more ? `${open}+` : String(open));
      } catch (e) { S.inbox.set(name, "?"); }
    }
    mark("agents");
  }
  setTimeout(refreshInbox, 10000);
}

// ------------------------------------------------------------------ task board

async function loadTasks() {
  let cursor = null;
  for (let page = 0; page < 10; page++) {
    const data = await api("/v1/task_list", cursor ? { limit: 200, cursor } : { limit: 200 });
    for (const t of data.tasks) S.tasks.set(t.task_id, t);
    if (!data.has_more) break;
    cursor = data.cursor;
  }
  mark("tasks");
}

let taskTimer = 0;
function refreshTasksSoon() {
  if (taskTimer) return;
  taskTimer = setTimeout(async () => {
    taskTimer = 0;
    const ids = [...S.staleTasks].slice(0, 50);
    for (const id of ids) {
      S.staleTasks.delete(id);
      try {
        const data = await api(`/v1/tasks/${encodeURIComponent(id)}`);
        S.tasks.set(id, data.task);
      } catch (e) { /* not a task (a plain correlation id) */ }
    }
    mark("tasks");
    if (S.staleTasks.size) refreshTasksSoon();
  }, 200);
}

function renderTasks() {
  const byState = new Map(STATES.map((s) => [s, []]));
  const children = new Map();
  for (const t of S.tasks.values()) {
    if (t.parent_task_id) children.set(t.parent_task_id, (children.get(t.parent_task_id) || 0) + 1);
  }
  for (const t of S.tasks.values()) {
    const state = t.lease_expires_at && Date.parse(t.lease_expires_at) <= Date.now() ? "open" : t.state;
    (byState.get(state) || byState.get("open")).push(t);
  }
  const columns = STATES.map((state) => h("div", { class: "column", "data-state": state },
    h("h2", null, `${state} (${byState.get(state).length})`),
    byState.get(state).slice(0, 100).map((t) => taskCard(t, children.get(t.task_id) || 0))));
  $("board").replaceChildren(...columns);
}

// Progress is a percentage (0-100, RFC 0007). A value off the scale (history an older version
// or a foreign peer wrote) is shown as it is but drawn clamped: the bar never leaves its card.
function percent(p) { return Math.min(100, Math.max(0, Number(p) || 0)); }

function progressBar(p) {
  return h("div", { class: "progress", title: `progress ${p} %` },
    h("div", { style: `width:${percent(p)}%` }));
}

// Leases lost: those the hub reported, and the current one if it passed since (nobody moves
// a task when its lease runs out; the board is the first to notice).
function lostLeases(t) {
  const lost = [...(t.lost || [])];
  if (t.lease_expires_at && Date.parse(t.lease_expires_at) <= Date.now()) {
    lost.push({ attempt: t.attempt, assignee: t.assignee, expired_at: t.lease_expires_at });
  }
  return lost.map((x) => h("div", { class: "lost flag" },
    `lost lease: attempt ${x.attempt} (${x.assignee}), expired ${x.expired_at}`));
}

function taskCard(t, kids) {
  const conflict = (t.conflicts || []).length > 0;
  const op = operatorName();
  const cancellable = op && !["completed", "declined", "failed", "cancelled"].includes(t.state);
  return h("div", { class: "card" + (conflict ? " conflict" : ""), "data-task": t.task_id },
    h("button", { type: "button", onclick: () => openThread(t.task_id) }, t.task_id),
    t.goal ? h("div", { class: "goal" }, t.goal) : null,
    t.done ? h("div", { class: "done" }, `done: ${t.done}`) : null,
    h("div", null, `${t.requester} → ${t.assignee || t.to_agent || "anyone"}`),
    t.question ? h("div", { class: "question" }, `question: ${t.question}`) : null,
    t.progress !== null && t.progress !== undefined ? progressBar(t.progress) : null,
    t.lease_expires_at ? h("div", { class: "lease" }, `lease ${left(t.lease_expires_at)}`) : null,
    lostLeases(t),
    t.parent_task_id ? h("div", null, "parent ",
      h("button", { type: "button", onclick: () => openThread(t.parent_task_id) }, t.parent_task_id)) : null,
    kids ? h("div", null, `${kids} child task${kids > 1 ? "s" : ""}`) : null,
    conflict ? h("div", { class: "flag" }, `conflict: ${t.conflicts.length} competing claim(s)`) : null,
    cancellable ? h("button", { type: "button", class: "cancel", onclick: () => cancelTask(t.task_id) }, "Cancel") : null);
}

async function cancelTask(id) {
  const op = operatorName();
  if (!op || !confirm(`Cancel ${id} as ${op}?`)) return;
  try {
    await api("/v1/task_update", { task_id: id, action: "cancel", from_agent: op, body: `cancelled by ${op} from the dashboard` });
  } catch (e) { alert(e.message); }
}

// ------------------------------------------------------------------ task thread

function openThread(id) {
  document.forms["thread-form"].task.value = id;
  S.thread = { id, stale: true };
  select("thread");
  loadThreadSoon();
}

let threadTimer = 0;
function loadThreadSoon() {
  if (threadTimer) return;
  threadTimer = setTimeout(async () => {
    threadTimer = 0;
    if (!S.thread) return;
    S.thread.stale = false;
    await loadThread(S.thread.id).catch((e) => { $("thread").replaceChildren(h("p", { class: "error" }, e.message)); });
  }, 150);
}

async function loadThread(id) {
  const [status, events] = await Promise.all([
    api(`/v1/tasks/${encodeURIComponent(id)}`).catch(() => null),
    api("/v1/events?" + qs({ correlation_id: id, order: "asc", limit: 500 })),
  ]);
  const artifacts = new Map();
  const ids = new Set(status ? status.task.artifacts : []);
  for (const ev of events.events) for (const a of ev.artifact_ids || []) ids.add(a);
  await Promise.all([...ids].map(async (a) => artifacts.set(a, (await api(`/v1/artifacts/${encodeURIComponent(a)}`)).artifact)));
  const shown = new Set();
  const ledger = await deliveriesOf(events.events, status);
  const items = events.events.map((ev) => h("div", { class: "ev", "data-id": ev.id },
    h("div", null, h("strong", null, ev.type), ` ${ev.from_agent}`, ev.to_agent ? ` → ${ev.to_agent}` : "",
      h("span", { class: "muted" }, `  ${ev.created_at}`)),
    ledger.has(ev.id) ? deliveryView(ledger.get(ev.id)) : null,
    ev.body ? h("pre", null, ev.body) : null,
    (ev.artifact_ids || []).map((a) => { shown.add(a); return artifacts.has(a) ? artifactView(artifacts.get(a)) : null; })));
  const rest = [...artifacts.values()].filter((a) => !shown.has(a.id)).map(artifactView);
  const t = status ? status.task : null;
  const head = t ? h("p", null, h("strong", null, id), ` is ${t.state}`, t.assignee ? `, held by ${t.assignee}` : "",
    t.progress !== null ? `, progress ${t.progress} %` : "",
    t.children && t.children.length ? `, children: ${t.children.map((c) => `${c.task_id} (${c.state})`).join(", ")}` : "") : h("p", null, h("strong", null, id));
  $("thread").replaceChildren(h("div", { class: "thread" }, head, items, rest));
}

async function deliveriesOf(events, status) {
  // The delivery ledger (issue 20) of the thread's addressed events: the request's comes with
  // the task's status, the others are asked for (the first 50).
  const out = new Map();
  if (status && status.task.events.length) out.set(status.task.events[0], status.task.delivery || []);
  const asked = events.filter((ev) => ev.to_agent && !out.has(ev.id)).slice(0, 50);
  await Promise.all(asked.map(async (ev) => {
    try { out.set(ev.id, (await api("/v1/delivery_status", { event_id: ev.id })).recipients); } catch (e) { /* an older hub */ }
  }));
  return out;
}

function deliveryView(rows) {
  if (!rows.length) return h("div", { class: "delivery muted" }, "delivery: nothing recorded yet");
  return h("div", { class: "delivery" }, rows.map((r) => h("div", { "data-recipient": r.recipient },
    `${r.recipient}: `,
    r.pushed_at ? `pushed ${time(r.pushed_at)} (${r.pushed_path}), ` : "not pushed, ",
    r.seen_at ? `seen ${time(r.seen_at)}` : "not seen",
    r.acked_at ? `, acked ${time(r.acked_at)}` : "")));
}

function artifactView(a) {
  const meta = h("div", { class: "muted" }, `${a.kind} ${a.id}, ${a.size_bytes} bytes, sha256 ${a.sha256}`);
  if (a.encoding === "base64") {
    const bytes = Uint8Array.from(atob(a.content || ""), (c) => c.charCodeAt(0));
    const url = URL.createObjectURL(new Blob([bytes], { type: "application/octet-stream" }));
    return h("div", { class: "artifact" }, meta, h("a", { href: url, download: a.id }, "Download"));
  }
  const text = a.content || "";
  if (a.kind === "patch" || /^(diff --git|--- |\+\+\+ |@@ )/m.test(text)) {
    return h("div", { class: "artifact" }, meta, diffView(text));
  }
  return h("div", { class: "artifact" }, meta, h("pre", null, text));
}

function diffView(text) {
  const lines = text.replace(/\n$/, "").split("\n").map((line) => {
    let cls = null;
    if (/^(diff --git|--- |\+\+\+ |index )/.test(line)) cls = "file";
    else if (line.startsWith("@@")) cls = "hunk";
    else if (line.startsWith("+")) cls = "add";
    else if (line.startsWith("-")) cls = "del";
    return h("span", { class: cls }, line || " ");
  });
  return h("pre", { class: "diff" }, lines);
}

// ------------------------------------------------------------------ sync estate

async function loadSync() {
  try {
    const [peers, stats] = await Promise.all([api("/sync/peers"), api("/v1/stats")]);
    S.sync = { peers, stats };
  } catch (e) { S.sync = { error: e.message }; }
  mark("sync");
}

function renderSync() {
  const box = $("sync");
  if (!S.sync) { box.replaceChildren(h("p", null, "loading…")); return; }
  if (S.sync.error) { box.replaceChildren(h("p", { class: "error" }, S.sync.error)); return; }
  const estate = S.sync.stats.estate || {};
  const rows = Array.isArray(S.sync.peers.peers) ? S.sync.peers.peers : (estate.peers || []);
  const counts = ["conflicts", "rejections", "sequence_anomalies", "deferred", "clock_anomalies"];
  const head = ["peer", "replica", "reachable", "last success", "last error", "last round", "pulled in all", "rounds"];
  const cell = (text, cls) => h("td", { class: cls }, text === null || text === undefined ? "" : text);
  box.replaceChildren(
    h("p", null, `replica ${S.sync.stats.replica_id}, ${S.sync.stats.events} events. `,
      counts.map((k) => h("span", { class: estate[k] ? "flag" : null }, `${k.replace("_", " ")} ${estate[k] || 0}; `))),
    rows.length ? h("table", { class: "grid sync" },
      h("thead", null, h("tr", null, head.map((k) => h("th", null, k)))),
      h("tbody", null, rows.map((r) => h("tr", { "data-peer": r.name },
        cell([h("strong", null, r.name), r.url && r.url !== r.name ? h("div", { class: "muted" }, r.url) : null]),
        cell(r.replica_id),
        cell(r.reachable === null ? "not tried" : r.reachable ? "yes" : "no", r.reachable === false ? "error" : null),
        cell(r.last_success_at ? `${ago(r.last_success_at)} (${r.last_success_at})` : "never"),
        cell(r.last_error ? `${r.last_error} (${ago(r.last_error_at)})` : "", "error"),
        cell(`pulled ${r.last_pulled_events || 0} events, ${r.last_pulled_artifacts || 0} artifacts; pushed ${r.last_pushed_events || 0}`),
        cell(r.total_pulled_events), cell(r.rounds))))) :
      h("p", { class: "muted" }, "No peers: this hub syncs with no one. List them in ", h("code", null, "peers.json"),
        " in the hub's palace (", h("code", null, '{"peers": [{"name", "url", "token"}]}'),
        ", read again every round), or pull from one now on the hub's host with ",
        h("code", null, "logstream sync --peer URL"), "; ", h("code", null, "logstream peers"), " shows the estate."));
}

// ------------------------------------------------------------------ header, tabs, forms

function renderHeader() {
  const s = S.session;
  if (!s) return;
  $("hub").textContent = `${s.version} · ${s.replica_id}`;
  const op = operatorName();
  $("who").textContent = op ? `operator: ${op}` : "read-only";
  $("logout").hidden = !s.cookie_session;
  $("operator-bar").hidden = !(s.can_write && !s.token_required);
  const compose = $("compose");
  compose.hidden = !op;
  $("compose-as").textContent = op || "";
}

const RENDER = { events: renderEvents, agents: renderAgents, tasks: renderTasks, thread() {}, sync: renderSync, header: renderHeader };

function select(view, focus) {
  S.view = view;
  for (const v of VIEWS) {
    const on = v === view;
    $(`view-${v}`).hidden = !on;
    const tab = $(`tab-${v}`);
    tab.setAttribute("aria-selected", String(on));
    tab.tabIndex = on ? 0 : -1;
    if (on && focus) tab.focus();
  }
  if (view === "sync") loadSync();
  if (view === "agents") S.inbox.size || refreshInboxOnce();
  if (location.hash !== `#${view}`) history.replaceState(null, "", `#${view}`);
  mark(view, "header");
}

let inboxStarted = false;
function refreshInboxOnce() { if (!inboxStarted) { inboxStarted = true; refreshInbox(); } }

function wire() {
  for (const v of VIEWS) $(`tab-${v}`).addEventListener("click", () => select(v));
  document.querySelector("nav").addEventListener("keydown", (e) => {
    const i = VIEWS.indexOf(S.view);
    if (e.key === "ArrowRight") select(VIEWS[(i + 1) % VIEWS.length], true);
    else if (e.key === "ArrowLeft") select(VIEWS[(i + VIEWS.length - 1) % VIEWS.length], true);
  });
  document.addEventListener("keydown", (e) => {
    const tag = (e.target.tagName || "").toLowerCase();
    if (tag === "input" || e.altKey || e.ctrlKey || e.metaKey) return;
    const n = Number(e.key);
    if (n >= 1 && n <= VIEWS.length) select(VIEWS[n - 1], true);
  });
  $("event-list").addEventListener("scroll", () => mark("events"), { passive: true });
  document.forms.filters.addEventListener("submit", (e) => {
    e.preventDefault();
    const f = new FormData(e.target);
    S.filters = {};
    for (const k of FILTERS) { const v = String(f.get(k) || "").trim(); if (v) S.filters[k] = v; }
    loadEvents().catch(showError);
  });
  $("clear-filters").addEventListener("click", () => {
    document.forms.filters.reset();
    S.filters = {};
    loadEvents().catch(showError);
  });
  $("older").addEventListener("click", () => loadOlder().catch(showError));
  document.forms["thread-form"].addEventListener("submit", (e) => {
    e.preventDefault();
    const id = String(new FormData(e.target).get("task") || "").trim();
    if (id) openThread(id);
  });
  document.forms.compose.addEventListener("submit", async (e) => {
    e.preventDefault();
    const f = new FormData(e.target);
    const op = operatorName();
    try {
      await api("/v1/event_append", { type: "message", stream: f.get("stream"), room: f.get("room"), from_agent: op, body: f.get("body") });
      $("compose-note").textContent = "posted";
      e.target.body.value = "";
    } catch (err) { $("compose-note").textContent = err.message; }
  });
  $("operator-name").value = localStorage.getItem("logstream-operator") || "";
  $("operator-name").addEventListener("input", (e) => {
    localStorage.setItem("logstream-operator", e.target.value.trim());
    mark("header", "tasks");
  });
  $("logout").addEventListener("click", async () => {
    await fetch("/dashboard/logout", { method: "POST", credentials: "same-origin", headers: { "X-Logstream-Dashboard": "1" } });
    location.assign("/");
  });
  setInterval(() => mark(S.view === "tasks" ? "tasks" : "agents"), 1000);  // countdowns
}

function showError(e) { $("event-count").textContent = e.message; }

async function start() {
  wire();
  const hash = location.hash.slice(1);
  select(VIEWS.includes(hash) ? hash : "events");
  const [session, frames] = await Promise.all([
    api("/dashboard/session"), probePresenceFrames(), loadEvents(), loadTasks()]);
  S.session = session;
  S.presenceFrames = frames;
  connect();
  pollPresence();
  pollLeases();
  mark("header", S.view);
}

start().catch(showError);
