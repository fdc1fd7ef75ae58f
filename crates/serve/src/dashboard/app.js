// The cicy dashboard (docs/design.md §14): one page, no build step, no other host. Everything the
// server sends is untrusted text: it reaches the page only through textContent.
"use strict";

const KEY = "cicy.token";
const MAX_ENTRIES = 500; // per agent: memory stays bounded however long serve runs
const PAST = 300; // events of an agent's recent past loaded when it is selected
const stats = (window.cicyStats = { events: 0, rendered: 0, lastGseq: 0, reconnects: 0, gaps: 0 });

const $ = (id) => document.getElementById(id);
function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined && text !== null) e.textContent = String(text);
  return e;
}

const S = {
  token: null,
  proved: false, // serve proved it knows the token since the last failure (see ensure)
  checking: false, // a token typed in the form is being proven
  gen: 0, // bumped on log in / log out / 401: late answers of an older session are dropped
  rows: new Map(), // id -> {d: status row, li, dot, title, wake, badge}
  panes: new Map(), // id -> pane (see blankPane)
  sel: null,
  tab: "live",
  lastGseq: 0,
  streamCtl: null,
  opened: false, // the event stream was open once in this session
  added: [], // entries of the shown pane waiting for the next frame
  dirty: new Set(),
  drawn: 0, // events folded into the shown pane since the last frame
  frame: 0,
  shown: null, // the pane whose entries have nodes in #live
  msgs: [], // the messages of agent `msgsOf`, oldest first
  msgsOf: null,
  older: false, // an "Older" page is loading
  sending: false, // a prompt is on its way
  timers: {},
};

const apiError = (message, status) => Object.assign(new Error(message), { status });

function button(text, cls, onClick) {
  const b = el("button", cls, text);
  b.type = "button";
  b.addEventListener("click", onClick);
  return b;
}

function store(f) {
  try {
    return f(window.localStorage);
  } catch (_) {
    return null; // storage off (private mode): the token lives in memory only
  }
}

// ---- login

// A token is printable ASCII: any other character (a pasted zero-width space) cannot go in a
// header, and fetch would throw on it forever.
const printable = (t) => /^[ -~]+$/.test(t);

// The address's `#<agent id>`; a malformed one (`#%E0%A4%A`) names none.
function hashId() {
  try {
    return decodeURIComponent(location.hash.slice(1));
  } catch (_) {
    return "";
  }
}

function boot() {
  const u = new URL(location.href);
  const t = u.searchParams.get("token");
  if (t !== null) {
    // As Jupyter does: the link logs in once, then the token leaves the address bar.
    store((s) => s.setItem(KEY, t.trim()));
    S.token = t.trim();
    u.searchParams.delete("token");
    history.replaceState(null, "", u.pathname + u.search + u.hash);
  }
  S.token = (store((s) => s.getItem(KEY)) || S.token || "").trim();
  wire();
  if (!S.token) showLogin("");
  else if (printable(S.token)) start(false);
  else unauthorized();
}

function showLogin(err) {
  $("app").hidden = true;
  $("login").hidden = false;
  $("login-error").textContent = err;
  $("token").focus();
}

// A 401 anywhere, or "log out": the stored token is forgotten.
function forget(err) {
  stop();
  store((s) => s.removeItem(KEY));
  S.token = null;
  showLogin(err);
}

const unauthorized = () => forget("wrong token");

function stop() {
  S.gen++;
  S.proved = false;
  if (S.streamCtl) S.streamCtl.abort();
  S.streamCtl = null;
}

function logout() {
  S.rows.clear();
  S.sel = null;
  $("agents").replaceChildren();
  $("detail").dataset.id = "";
  document.body.classList.remove("has-sel");
  history.replaceState(null, "", location.pathname);
  $("token").value = "";
  forget("");
}

// The list and panes load once the stream is open (see connect).
function start(proved) {
  $("login").hidden = true;
  $("app").hidden = false;
  stop();
  S.proved = proved;
  S.opened = false;
  S.lastGseq = 0;
  S.panes.clear(); // what a logged-out session kept may be stale
  connect(S.gen);
}

// ---- the proof
// Whatever listens on this port gets the token with the next request: after serve stops,
// another program may. So before the token goes out (at start, after any failed request or
// dropped stream) the server proves it knows it: `/api/health?proof=<nonce>` answers
// HMAC-SHA256(key = the token, "cicy-health-proof:<port>:<nonce>"), asked without the token.
// The port is the one serve listens on, so a program on this port cannot pass the question on
// to a serve on another port and hand back its answer.

const hex = (b) => Array.from(new Uint8Array(b), (x) => x.toString(16).padStart(2, "0")).join("");

// true: serve knows `token`; false: a server answered without the proof; throws while no
// server answers (or a proxy in front says it cannot reach one: a 5xx).
async function proven(token) {
  const nonce = hex(crypto.getRandomValues(new Uint8Array(16)));
  // A server that takes the connection and never answers must not hold the page forever.
  const r = await fetch("/api/health?proof=" + nonce, { cache: "no-store", signal: AbortSignal.timeout(10000) });
  if (r.status >= 500) throw new Error("HTTP " + r.status);
  const j = (await r.json().catch(() => 0)) || {};
  const enc = new TextEncoder();
  const key = await crypto.subtle.importKey("raw", enc.encode(token), { name: "HMAC", hash: "SHA-256" }, false, ["sign"]);
  const port = location.port || (location.protocol === "https:" ? "443" : "80");
  const msg = "cicy-health-proof:" + port + ":" + nonce;
  return r.ok && j.proof === hex(await crypto.subtle.sign("HMAC", key, enc.encode(msg)));
}

// Returns once serve has proved it knows the token; a server without the proof gets nothing
// more: the form comes back.
async function ensure() {
  if (S.proved) return;
  const gen = S.gen;
  const ok = await proven(S.token).catch(() => null);
  if (gen !== S.gen) throw apiError("stale", 0);
  if (ok === null) throw new Error("serve does not answer");
  if (!ok) {
    forget("the server on this port does not know this token");
    throw apiError("stale", 0);
  }
  S.proved = true;
}

// fetch with the token, once proven; a failed request makes the next one prove again.
async function authed(path, opt) {
  const gen = S.gen;
  await ensure();
  if (gen !== S.gen) throw apiError("stale", 0);
  opt.headers.Authorization = "Bearer " + S.token;
  opt.cache = "no-store";
  try {
    return await fetch(path, opt);
  } catch (e) {
    if (e.name !== "AbortError") S.proved = false;
    throw e;
  }
}

// ---- HTTP

async function api(method, path, body) {
  const gen = S.gen;
  const opt = { method, headers: {} };
  if (body !== undefined) {
    opt.headers["Content-Type"] = "application/json";
    opt.body = JSON.stringify(body);
  }
  const r = await authed(path, opt);
  if (r.status === 401) {
    if (gen === S.gen) unauthorized();
    throw apiError("wrong token", 401);
  }
  let j = null;
  try {
    j = await r.json();
  } catch (_) {
    j = null;
  }
  if (gen !== S.gen) throw apiError("stale", 0);
  if (!r.ok) throw apiError((j && j.message) || "HTTP " + r.status, r.status);
  return j;
}

const agentPath = (id, rest) => "/api/agents/" + encodeURIComponent(id) + (rest || "");

function notice(text, bad) {
  const n = $("notice");
  n.textContent = text;
  n.classList.toggle("bad", !!bad);
}

function fail(e) {
  if (e && (e.status === 401 || e.status === 0)) return;
  notice(e && e.message ? e.message : String(e), true);
}

// One SSE reader for both streams. Lines end in CR, LF or CRLF; a frame fires at its blank
// line; `onFrame` returning true stops reading.
async function readSse(body, onFrame) {
  const rd = body.getReader();
  const dec = new TextDecoder();
  const eol = /\r\n|\r|\n/g;
  let buf = "";
  let f = { id: null, event: "", data: [] };
  for (;;) {
    const { value, done } = await rd.read();
    if (done) {
      if (buf === "\r" && f.data.length) onFrame(f); // the held CR was a line end after all
      return;
    }
    buf += dec.decode(value, { stream: true });
    let pos = 0;
    let m;
    eol.lastIndex = 0;
    while ((m = eol.exec(buf)) && !(m[0] === "\r" && m.index + 1 === buf.length)) {
      // (a CR that ends the buffer may be half a CRLF: it waits for the next read)
      const line = buf.slice(pos, m.index);
      pos = eol.lastIndex;
      if (line === "") {
        if (f.data.length && onFrame(f)) {
          rd.cancel().catch(() => {});
          return;
        }
        f = { id: null, event: "", data: [] };
      } else if (line[0] !== ":") {
        const c = line.indexOf(":");
        const k = c < 0 ? line : line.slice(0, c);
        let v = c < 0 ? "" : line.slice(c + 1);
        if (v[0] === " ") v = v.slice(1);
        if (k === "data") f.data.push(v);
        else if (k === "event") f.event = v;
        else if (k === "id") f.id = v;
      }
    }
    buf = buf.slice(pos);
  }
}

function parse(f) {
  try {
    return JSON.parse(f.data.join("\n"));
  } catch (_) {
    return null;
  }
}

// ---- the global stream

function setConn(state) {
  const c = $("conn");
  c.dataset.state = state;
  c.textContent = state;
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function connect(gen) {
  let delay = 500;
  while (gen === S.gen) {
    setConn(S.opened ? "reconnecting" : "connecting");
    const ctl = new AbortController();
    S.streamCtl = ctl;
    try {
      const headers = {};
      if (S.lastGseq) headers["Last-Event-ID"] = String(S.lastGseq);
      const r = await authed("/api/events", { headers, signal: ctl.signal });
      if (r.status === 401) {
        if (gen === S.gen) unauthorized();
        return;
      }
      if (!r.ok || !r.body) throw new Error("HTTP " + r.status);
      if (gen !== S.gen) return;
      setConn("live");
      // The first time, and without an id to resume from: what happened before is unknown.
      if (!S.opened || !S.lastGseq) refreshAll();
      S.opened = true;
      delay = 500;
      await readSse(r.body, (f) => {
        if (gen !== S.gen) return true;
        onGlobal(f);
        return false;
      });
    } catch (_) {
      // a dropped connection or a refused one: both retry below
    }
    if (gen !== S.gen) return;
    S.proved = false; // whoever answers next proves it knows the token first
    stats.reconnects++;
    setConn("reconnecting");
    await sleep(delay);
    delay = Math.min(delay * 2, 5000);
  }
}

function onGlobal(f) {
  stats.events++;
  if (f.id) {
    const n = Number(f.id);
    if (Number.isSafeInteger(n)) S.lastGseq = stats.lastGseq = n;
  }
  const ev = parse(f);
  if (!ev) return;
  if (f.event === "gap" || ev.type === "gap") stats.gaps++;
  if (!ev.agent_id) {
    if (f.event === "gap") refreshAll();
    return;
  }
  const row = S.rows.get(ev.agent_id);
  if (!row) {
    later("agents", 300, () => loadAgents().catch(fail));
  } else {
    if (ev.seq > row.d.last_seq) row.d.last_seq = ev.seq;
    if (ev.type === "state") {
      row.d.state = ev.state;
      row.d.busy = ev.state !== "idle";
      paintRow(row);
      if (ev.agent_id === S.sel) paintHead();
    }
  }
  // Fields the list computes on the server (next wake, pending, unanswered).
  if (/^(todo_change|wake|message_in|message_out|queued|flush|done)$/.test(ev.type)) {
    later("agents", 1000, () => loadAgents().catch(fail));
  }
  const p = pane(ev.agent_id);
  if (p.loading) p.queue.push(ev);
  else if (!ev.seq || ev.seq > p.maxSeq) fold(p, ev);
  if (ev.agent_id === S.sel && TAB_OF[ev.type] === S.tab) later("tab", 300, loadTab);
}

// The tab an event changes, re-read when it is shown.
const TAB_OF = { todo_change: "todos", message_in: "messages", message_out: "messages", autonomy: "autonomy" };

function later(name, ms, f) {
  if (S.timers[name]) return;
  S.timers[name] = setTimeout(() => {
    S.timers[name] = 0;
    f();
  }, ms);
}

// At start, and after a gap: what the page shows may be stale. The list first: its last_seq
// bounds the past the shown agent's pane loads again.
async function refreshAll() {
  S.panes.clear();
  await loadAgents().catch(fail);
  const want = hashId();
  if (S.sel) {
    showPane();
    loadTab();
  } else if (S.rows.has(want)) select(want);
}

// ---- the agent list

const num = (id) => Number((/(\d+)$/.exec(id) || [0, 0])[1]);

async function loadAgents() {
  const list = await api("GET", "/api/agents");
  const seen = new Set();
  const ul = $("agents");
  list.sort((a, b) => num(a.id) - num(b.id) || (a.id < b.id ? -1 : 1));
  let fresh = false;
  for (const d of list) {
    seen.add(d.id);
    let row = S.rows.get(d.id);
    if (!row) {
      row = makeRow(d);
      S.rows.set(d.id, row);
      fresh = true;
    } else {
      // The stream may be ahead of this answer.
      d.last_seq = Math.max(d.last_seq, row.d.last_seq);
    }
    row.d = d;
    paintRow(row);
  }
  for (const [id, row] of S.rows) {
    if (!seen.has(id)) {
      row.li.remove();
      S.rows.delete(id);
    }
  }
  if (fresh) ul.replaceChildren(...list.map((d) => S.rows.get(d.id).li));
  $("agent-count").textContent = String(S.rows.size);
  filter();
  if (S.sel) paintHead();
}

function makeRow(d) {
  const li = el("li", "agent");
  li.dataset.id = d.id;
  li.tabIndex = 0;
  const dot = el("span", "dot");
  const title = el("span", "title");
  const id = el("span", "id", d.id);
  const badge = el("span", "badge");
  const wake = el("span", "wake");
  li.append(dot, title, id, badge, wake);
  li.addEventListener("click", () => select(d.id));
  li.addEventListener("keydown", (e) => {
    if (e.key === "Enter" || e.key === " ") {
      e.preventDefault();
      select(d.id);
    }
  });
  return { d, li, dot, title, wake, badge };
}

// Local `YYYY-MM-DDTHH:MM[:SS]` → `HH:MM` when it is today, else `YYYY-MM-DD HH:MM`.
function shortTime(t) {
  const s = String(t || "").replace("T", " ").slice(0, 16);
  const now = new Date();
  const today = new Date(now - now.getTimezoneOffset() * 60000).toISOString().slice(0, 10);
  return s.startsWith(today + " ") ? s.slice(11) : s;
}

// Writes only what changed: a list refresh during 100 busy agents touches few nodes.
function put(node, key, v) {
  if (node[key] !== v) node[key] = v;
}

function paintRow(row) {
  const d = row.d;
  if (row.dot.dataset.state !== d.state) row.dot.dataset.state = d.state;
  put(row.dot, "title", d.state);
  put(row.title, "textContent", d.title || d.id);
  put(row.wake, "textContent", d.wake_at ? "wakes " + shortTime(d.wake_at) : "");
  put(row.wake, "title", d.wake_at ? "next wake " + d.wake_at : "");
  const bits = [];
  if (d.pending) bits.push(d.pending + " queued");
  if (d.unanswered) bits.push(d.unanswered + " unanswered");
  const p = S.panes.get(d.id);
  if (p && p.open.size) bits.push("question");
  put(row.badge, "textContent", bits.join(" · "));
  row.li.classList.toggle("sel", d.id === S.sel);
}

function filter() {
  const q = $("filter").value.trim().toLowerCase();
  for (const row of S.rows.values()) {
    row.li.hidden = !!q && !(row.d.title || "").toLowerCase().includes(q) && !row.d.id.toLowerCase().includes(q);
  }
}

// ---- selection and tabs

function select(id) {
  if (S.sel === id) return;
  const old = S.rows.get(S.sel);
  S.sel = id;
  if (old) paintRow(old);
  const row = S.rows.get(id);
  if (row) paintRow(row);
  $("detail").dataset.id = id;
  document.body.classList.add("has-sel");
  history.replaceState(null, "", location.pathname + location.search + "#" + encodeURIComponent(id));
  notice("");
  paintHead();
  showPane();
  loadTab();
}

function paintHead() {
  const row = S.rows.get(S.sel);
  if (!row) return;
  const d = row.d;
  $("d-dot").dataset.state = d.state;
  $("d-title").textContent = d.title || d.id;
  const meta = [d.id, d.role, d.state.replace("_", " ")];
  if (d.master_id) meta.push("master " + d.master_id);
  if (d.pending) meta.push(d.pending + " queued");
  if (d.steering) meta.push(d.steering + " steering");
  if (d.wake_at) meta.push("wakes " + shortTime(d.wake_at));
  if (d.unanswered) meta.push(d.unanswered + " unanswered");
  $("d-meta").textContent = meta.join(" · ");
}

function setTab(tab) {
  S.tab = tab;
  for (const b of document.querySelectorAll("#tabs button")) b.setAttribute("aria-selected", String(b.dataset.tab === tab));
  for (const t of ["live", "todos", "messages", "autonomy"]) $("pane-" + t).hidden = t !== tab;
  loadTab();
}

function loadTab() {
  const id = S.sel;
  if (!id) return;
  if (S.tab === "live") {
    const p = pane(id);
    if (!p.past && !p.loading) loadPast(p);
  } else if (S.tab === "todos") loadTodos(id).catch(fail);
  else if (S.tab === "messages") loadMessages(id, false).catch(fail);
  else if (S.tab === "autonomy") loadAutonomy(id).catch(fail);
}

// ---- the live pane
// A pane holds entries, not DOM: only the shown agent's entries have nodes. An entry is one
// streamed text block, one tool call (started + finished) or one line for any other event.

// An agent's entries and what folding needs; the pane loadPast folds into is never registered.
const blankPane = (id) => ({ id, entries: [], cur: null, tools: new Map(), open: new Set(), maxSeq: 0, minSeq: 0, past: false, loading: false, queue: [] });

function pane(id) {
  let p = S.panes.get(id);
  if (!p) S.panes.set(id, (p = blankPane(id)));
  return p;
}

function add(p, e) {
  p.entries.push(e);
  if (p.entries.length > MAX_ENTRIES) {
    const gone = p.entries.splice(0, p.entries.length - MAX_ENTRIES);
    for (const g of gone) {
      g.gone = true;
      if (g.node) g.node.remove();
      if (g.toolId) p.tools.delete(g.toolId);
      p.open.delete(g);
    }
  }
  if (p.id === S.sel) S.added.push(e);
  return e;
}

function touch(p, e) {
  if (p.id === S.sel && e.node) S.dirty.add(e);
}

const json = (v) => {
  const s = typeof v === "string" ? v : JSON.stringify(v);
  return s && s.length > 2000 ? s.slice(0, 2000) + "…" : s || "";
};

// One line for each event that is not streamed text or a tool call.
function line(ev) {
  switch (ev.type) {
    case "turn_started": return "turn started";
    case "round_started": return "round " + (ev.round + 1);
    case "usage": return "tokens in " + ev.input + " · out " + ev.output + " · cache read " + ev.cache_read + " · cache write " + ev.cache_creation;
    case "aux_usage": return ev.aux + " tokens in " + ev.input + " · out " + ev.output;
    case "error": return "error " + ev.kind + ": " + ev.message;
    case "turn_ended": return "turn " + ev.outcome;
    case "queued": case "flush": case "system": return ev.text;
    case "done": return "done";
    case "no_answer_text": return "(no answer text)";
    case "wake": return "wake " + ev.n + " (" + ev.reason + ")" + (ev.todos && ev.todos.length ? " · claimed todo " + ev.todos.join(", ") : "") + (ev.messages && ev.messages.length ? " · " + ev.messages.length + " message(s)" : "");
    case "message_in": return "message in from " + ev.from + ": " + ev.subject;
    case "message_out": return "message to " + ev.to + ": " + ev.text;
    case "todo_change": return "todo " + ev.action + " · " + ev.line;
    case "autonomy": return "autonomy " + ev.job + " " + ev.status + (ev.detail ? ": " + ev.detail : "");
    case "ask_user": return "question: " + ev.question;
    case "compacted": return "compacted " + ev.before + " → " + ev.after + " messages";
    case "retry": return "retry " + ev.attempt + " in " + ev.delay_ms + " ms: " + ev.reason;
    case "steered": return "steer " + ev.status;
    case "subagent_start": return "sub-agent " + ev.id + " started (" + ev.subagent_type + "): " + ev.description;
    case "subagent_end": return "sub-agent " + ev.id + " " + ev.outcome + ": " + ev.result;
    case "hook": return "hook " + ev.name + " `" + ev.command + "` → " + ev.action + (ev.reason ? ": " + ev.reason : "") + " (" + ev.duration_ms + " ms)";
    case "plan_change": return "plan: " + (ev.todos || []).map((t) => (t.status === "completed" ? "✓ " : t.status === "in_progress" ? "▸ " : "· ") + t.content).join("  ");
    case "gap": return "events " + ev.from + "–" + ev.to + " are missing (no longer kept)";
    default: return ev.type;
  }
}

function fold(p, ev) {
  if (ev.seq) {
    if (ev.seq > p.maxSeq) p.maxSeq = ev.seq;
    if (!p.minSeq || ev.seq < p.minSeq) p.minSeq = ev.seq;
  }
  if (p.id === S.sel) S.drawn++;
  const seq = ev.seq || 0;
  const t = ev.type;
  if (t === "text_delta" || t === "thinking_delta") {
    const kind = t === "text_delta" ? "text" : "thinking";
    if (p.cur && p.cur.kind === kind) {
      p.cur.text += ev.text;
      touch(p, p.cur);
    } else p.cur = add(p, { seq, type: t, kind, text: ev.text });
  } else if (t === "text_end") {
    p.cur = null;
  } else if (t === "state") {
    // the list's dot shows it
  } else if (t === "prompt") {
    p.cur = null;
    // The bubble this page showed when it sent the text becomes the event's: none twice. A
    // prompt from elsewhere (the CLI, another tab, a steer) gets a bubble of its own.
    const mine = p.entries.find((e) => e.kind === "you" && !e.seq && sameText(e.text, ev.text));
    if (mine) {
      mine.seq = seq;
      if (mine.node) Object.assign(mine.node.dataset, { seq: String(seq), type: t });
    } else add(p, { seq, type: t, kind: "you", text: ev.text });
  } else if (t === "tool_started") {
    p.cur = null;
    const e = add(p, { seq, type: t, kind: "tool", toolId: ev.id, name: ev.name, input: json(ev.input), result: null });
    p.tools.set(ev.id, e);
  } else if (t === "tool_finished") {
    p.cur = null;
    let e = p.tools.get(ev.id);
    if (!e) e = add(p, { seq, type: t, kind: "tool", name: ev.name, input: "", result: null });
    p.tools.delete(ev.id);
    e.result = ev.result;
    e.err = ev.is_error;
    e.ms = ev.duration_ms;
    touch(p, e);
    // Its question is closed: answered, timed out or cancelled.
    const q = e.ask || (ev.name === "ask_user" && p.open.values().next().value);
    if (q) closeAsk(p, q);
  } else {
    if (t !== "usage" && t !== "round_started") p.cur = null;
    const e = add(p, { seq, type: t, kind: "line", text: line(ev) });
    if (t === "ask_user") {
      e.q = ev;
      // The question belongs to the ask_user call running (the event names no tool id).
      let tool = null;
      for (const x of p.tools.values()) if (x.name === "ask_user" && !x.ask) tool = x;
      if (tool) tool.ask = e;
      p.open.add(e);
      repaint(p.id);
    }
    if (t === "error" || (t === "turn_ended" && ev.outcome !== "completed")) e.bad = true;
  }
  schedule();
}

function schedule() {
  if (!S.frame && (S.added.length || S.dirty.size || S.drawn)) S.frame = requestAnimationFrame(flush);
}

// Every change of one frame lands in one DOM pass: a streamed answer costs one layout per
// frame, not one per delta.
function flush() {
  S.frame = 0;
  const live = $("live");
  const stick = live.scrollHeight - live.scrollTop - live.clientHeight < 60;
  for (const e of S.dirty) paint(e);
  S.dirty.clear();
  if (S.added.length) {
    const frag = document.createDocumentFragment();
    for (const e of S.added) if (!e.node && !e.gone) frag.append(node(e));
    live.append(frag);
    S.added = [];
  }
  stats.rendered += S.drawn;
  S.drawn = 0;
  if (stick) live.scrollTop = live.scrollHeight;
}

// Whether a prompt event's text (cut to 2000 characters, `…` marking the cut) is `sent`.
function sameText(sent, text) {
  return sent === text || (text.endsWith("…") && [...text].length === 2001 && sent.startsWith(text.slice(0, -1)));
}

function node(e) {
  const n = el("div", e.kind === "you" ? "you" : "ev " + e.kind);
  // A bubble the page drew before its event came has no seq yet (`fold` sets it).
  if (e.kind !== "you" || e.seq) {
    n.dataset.seq = String(e.seq);
    n.dataset.type = e.type;
  }
  e.node = n;
  if (e.kind === "tool") {
    const h = el("div", "tool-head");
    h.append(el("span", "name", e.name), el("span", "ms"));
    n.append(h, el("pre", "input", e.input));
  } else if (e.q) {
    n.append(el("span", "", e.text));
    const opts = e.q.options || [];
    for (const o of opts) n.append(button(o.label, "opt", () => answer(e, o.label)));
    if (!opts.length) {
      const f = el("form", "row answer");
      const i = el("input");
      i.setAttribute("aria-label", "answer");
      f.append(i, el("button", "opt", "Answer"));
      f.addEventListener("submit", (ev) => {
        ev.preventDefault();
        if (i.value.trim()) answer(e, i.value);
      });
      n.append(f);
    }
    n.append(el("span", "answered"));
  }
  if (e.bad) n.classList.add("bad");
  paint(e);
  return n;
}

function paint(e) {
  const n = e.node;
  if (!n) return;
  if (e.kind === "tool") {
    if (e.result === null) return;
    let r = n.querySelector(".result");
    if (!r) n.append((r = el("pre", "result")));
    r.textContent = e.result;
    r.classList.toggle("error", !!e.err);
    n.querySelector(".ms").textContent = e.ms + " ms" + (e.err ? " · error" : "");
  } else if (e.q) {
    // An answered question takes no second answer (serve would say 404).
    for (const c of n.querySelectorAll("button, input")) c.disabled = !!e.done;
    n.querySelector(".answered").textContent = e.done ? "answered" : "";
  } else n.textContent = e.text;
}

// The selected agent's entries, drawn at once.
function showPane() {
  const live = $("live");
  S.added = [];
  S.dirty.clear();
  const p = pane(S.sel);
  // Nodes live only while their pane is shown.
  if (S.shown && S.shown !== p) for (const e of S.shown.entries) e.node = null;
  S.shown = p;
  live.replaceChildren(...p.entries.map(node));
  stats.rendered += p.entries.length;
  live.scrollTop = live.scrollHeight;
}

// The agent's recent past, merged in front of what the stream brought (by seq: none twice).
async function loadPast(p) {
  const row = S.rows.get(p.id);
  const last = row ? row.d.last_seq : 0;
  if (!last) {
    p.past = true;
    return;
  }
  p.loading = true;
  const gen = S.gen;
  const tmp = blankPane("");
  const ctl = new AbortController();
  const timer = setTimeout(() => ctl.abort(), 10000);
  try {
    // A count, not `last - PAST`: seqs jump after a crash, so a seq range can hold almost none.
    const r = await authed(agentPath(p.id, "/events?last=" + PAST), { headers: {}, signal: ctl.signal });
    if (r.status === 401) {
      if (gen === S.gen) unauthorized();
      return;
    }
    if (!r.ok || !r.body) throw apiError("cannot load the past events: HTTP " + r.status, r.status);
    await readSse(r.body, (f) => {
      const ev = parse(f);
      if (!ev) return false;
      if (ev.seq && ev.seq >= last) {
        if (ev.seq === last) fold(tmp, ev);
        return true;
      }
      fold(tmp, ev);
      return false;
    });
  } catch (e) {
    if (e.name !== "AbortError") fail(e);
    if (e.status === 0) return; // another session's (the next one loads it again)
  } finally {
    clearTimeout(timer);
    ctl.abort();
  }
  if (gen !== S.gen || S.panes.get(p.id) !== p) return;
  // Past events the stream also brought are dropped; then the stream's events that came while
  // loading, in order.
  const cut = p.minSeq || Infinity;
  const older = tmp.entries.filter((e) => !e.seq || e.seq < cut);
  for (const e of older) {
    e.node = null;
    // Calls and questions still open go on in the pane: their end may come live.
    if (tmp.open.has(e)) p.open.add(e);
    if (e.toolId && tmp.tools.has(e.toolId) && !p.tools.has(e.toolId)) p.tools.set(e.toolId, e);
  }
  p.entries = older.concat(p.entries).slice(-MAX_ENTRIES);
  p.maxSeq = Math.max(p.maxSeq, tmp.maxSeq);
  p.loading = false;
  p.past = true;
  const queued = p.queue;
  p.queue = [];
  if (p.id === S.sel) showPane();
  repaint(p.id);
  for (const ev of queued) if (!ev.seq || ev.seq > p.maxSeq) fold(p, ev);
}

function repaint(id) {
  const row = S.rows.get(id);
  if (row) paintRow(row);
}

function closeAsk(p, e) {
  e.done = true;
  p.open.delete(e);
  touch(p, e);
  schedule();
  repaint(p.id);
}

const answer = (e, text) =>
  act(async (id) => {
    const p = pane(id);
    try {
      await api("POST", agentPath(id, "/respond"), { ref: e.q.ref, response: text });
    } catch (err) {
      if (err.status === 404) closeAsk(p, e); // no longer open: it takes no other answer
      throw err;
    }
    closeAsk(p, e);
    return "Answered: " + text;
  });

// ---- actions

// Runs an action on the selected agent; `#notice` shows what it says, or its error.
async function act(f) {
  if (!S.sel) return notice("Select an agent first.", true);
  try {
    notice(await f(S.sel));
  } catch (e) {
    fail(e);
  }
}

async function sendChat(ev) {
  ev.preventDefault();
  const box = $("chat-text");
  const text = box.value;
  // One send at a time: Enter pressed again while it is on its way sends nothing more.
  if (!text.trim() || S.sending) return;
  S.sending = true;
  await act(async (id) => {
    // The bubble shows at once (the `prompt` event comes once the turn starts, later when the
    // agent is busy) and is no .ev: a bubble's seq, once its event came, is not an event line.
    const p = pane(id);
    p.cur = null;
    const e = add(p, { seq: 0, type: "prompt", kind: "you", text });
    schedule();
    let r;
    try {
      r = await api("POST", agentPath(id, "/prompt"), { text });
    } catch (err) {
      e.bad = true;
      if (e.node) e.node.classList.add("bad");
      throw err;
    }
    if (box.value === text) box.value = ""; // what was typed meanwhile stays
    if (!(r && r.queued)) return "Sent.";
    await loadAgents(); // its row shows the queue
    return "Queued: it runs after the current reply.";
  });
  S.sending = false;
}

const agentCall = (path, say) => () =>
  act(async (id) => say(await api("POST", "/api/cicy/" + path, { agent_id: id })));

// ---- todos

async function loadTodos(id) {
  const r = await api("GET", agentPath(id, "/todos"));
  if (id !== S.sel) return;
  const box = $("todos");
  const rows = (r.todos || []).map((t) => {
    const d = el("div", "todo");
    d.dataset.id = String(t.id);
    d.dataset.status = t.status;
    d.append(el("span", "at", shortTime(t.at_local)), el("span", "text", t.text), el("span", "status", t.status));
    if (t.status === "pending") {
      const call = (method, rest, said) => () =>
        act(async () => {
          await api(method, agentPath(id, "/todos/" + t.id + rest));
          await loadTodos(id);
          return "Todo " + t.id + " " + said + ".";
        });
      d.append(button("done", "small", call("POST", "/done", "done")), button("remove", "small", call("DELETE", "", "removed")));
    }
    return d;
  });
  box.replaceChildren(...(rows.length ? rows : [el("p", "empty", "No todos.")]));
}

function addTodo(ev) {
  ev.preventDefault();
  act(async (id) => {
    const r = await api("POST", agentPath(id, "/todos"), { text: $("todo-text").value, at: $("todo-at").value.trim() });
    $("todo-text").value = "";
    await loadTodos(id);
    return r.existed ? "That todo exists already." : "Todo " + r.todo.id + " added for " + r.todo.at_local.replace("T", " ") + ".";
  });
}

// ---- messages

const PAGE = 50;

// `older`: the page before the first shown. Else the newest page, merged into what is shown
// (the user may have paged back): the view stays where the user reads unless at the bottom.
async function loadMessages(id, older) {
  if (older && (S.older || S.msgsOf !== id)) return; // one "Older" page at a time
  let q = "?limit=" + PAGE;
  if (older && S.msgs.length) q += "&before=" + encodeURIComponent(S.msgs[0].cursor);
  S.older ||= older;
  let r;
  try {
    r = await api("GET", agentPath(id, "/messages" + q));
  } finally {
    if (older) S.older = false;
  }
  if (id !== S.sel) return;
  const page = r.messages || [];
  const same = S.msgsOf === id;
  const seen = new Set();
  S.msgs = (older ? page.concat(S.msgs) : same ? S.msgs.concat(page) : page).filter((m) => !seen.has(m.cursor) && seen.add(m.cursor));
  S.msgsOf = id;
  if (older || !same) $("messages-older").disabled = page.length < PAGE;
  const box = $("messages");
  const top = box.scrollTop;
  const fromEnd = box.scrollHeight - top;
  const stick = !same || fromEnd - box.clientHeight < 60;
  box.replaceChildren(...(S.msgs.length ? S.msgs.map(msgRow) : [el("p", "empty", "No messages.")]));
  box.scrollTop = older ? box.scrollHeight - fromEnd : stick ? box.scrollHeight : top;
}

function msgRow(m) {
  const d = el("div", "msg");
  d.dataset.box = m.box;
  const who = m.box === "outbox" ? "to " + ((m.meta && m.meta.to) || "?") : "from " + m.from;
  const h = el("div", "msg-head");
  h.append(el("span", "who", who), el("span", "subject", m.subject), el("span", "time", String(m.timestamp || "").replace("T", " ")));
  if (m.question) h.append(el("span", "q", "question"));
  d.append(h, el("div", "body", m.body));
  return d;
}

function sendMsg(ev) {
  ev.preventDefault();
  const text = $("msg-text").value;
  if (!text.trim()) return;
  act(async (id) => {
    await api("POST", agentPath(id, "/messages"), { text, from: "human" });
    $("msg-text").value = "";
    await loadMessages(id, false);
    return "Message sent.";
  });
}

// ---- autonomy

async function loadAutonomy(id) {
  const r = await api("GET", agentPath(id, "/autonomy"));
  if (id !== S.sel) return;
  const box = $("autonomy");
  const out = [];
  const kv = (k, v) => {
    const p = el("p", "kv");
    p.append(el("b", "", k + " "), el("span", "", v));
    out.push(p);
  };
  kv("autonomy", r.enabled ? "on · tick every " + r.tick_secs + " s" : "off" + (r.off_reason ? ": " + r.off_reason : ""));
  if (r.lease) kv("running", r.lease.job + " (priority " + r.lease.priority + ", since " + r.lease.started_at + ")");
  kv("now", r.now || "nothing");
  const list = (title, items, text) => {
    out.push(el("h3", "", title));
    if (!items || !items.length) out.push(el("p", "empty", "none"));
    for (const i of items || []) out.push(el("p", "item", text(i)));
  };
  list("own intents (" + (r.mine_total || 0) + ")", r.mine, (m) => m.id + " · p" + m.priority + " · " + m.status + (m.needs !== "none" ? " · needs " + m.needs : "") + " · " + m.what);
  list("waiting", r.waiting, (w) => w.id + " · " + w.label + " · " + w.what);
  list("squeezed", r.squeezed, (s) => s.id + " · preempted " + s.preempted_count + "×" + (s.preempted_by ? " by " + s.preempted_by : "") + (s.hours != null ? " · " + s.hours + " h" : "") + " · " + s.what);
  if (r.skipped && r.skipped.length) list("unreadable ledger lines", r.skipped, (s) => "line " + s.line + ": " + s.why);
  out.push(el("h3", "", "intents"));
  const intents = r.intents || [];
  if (!intents.length) out.push(el("p", "empty", "none"));
  for (const i of intents) {
    const d = el("div", "intent");
    d.dataset.id = i.id;
    d.dataset.status = i.status;
    d.append(el("span", "status", i.status), el("span", "what", i.what));
    const meta = [i.id, "p" + i.priority, "by " + i.by, i.at];
    if (i.needs && i.needs !== "none") meta.push("needs " + i.needs);
    if (i.result) meta.push(i.result);
    d.append(el("span", "meta", meta.join(" · ")));
    out.push(d);
  }
  box.replaceChildren(...out);
}

// ---- wiring

function wire() {
  $("login").addEventListener("submit", async (e) => {
    e.preventDefault();
    const t = $("token").value.trim();
    if (!t) return showLogin("enter the token");
    // The token goes out only to a server that proves it knows it.
    if (S.checking) return;
    let ok = printable(t);
    S.checking = true;
    $("login-go").disabled = true;
    $("login-error").textContent = "checking…";
    try {
      ok = ok && (await proven(t));
    } catch (_) {
      return showLogin("serve does not answer");
    } finally {
      S.checking = false;
      $("login-go").disabled = false;
    }
    if (!ok) return showLogin("wrong token");
    S.token = t;
    store((s) => s.setItem(KEY, t));
    start(true);
  });
  // Queued inputs raise no event: the list (its `pending`) is re-read while the tab is seen.
  setInterval(() => S.proved && document.visibilityState === "visible" && loadAgents().catch(fail), 15000);
  $("logout").addEventListener("click", logout);
  window.addEventListener("hashchange", () => {
    const id = hashId();
    if (S.rows.has(id)) select(id);
  });
  $("filter").addEventListener("input", filter);
  for (const b of document.querySelectorAll("#tabs button")) b.addEventListener("click", () => setTab(b.dataset.tab));
  $("chat").addEventListener("submit", sendChat);
  $("chat-text").addEventListener("keydown", (e) => {
    if (e.key === "Enter" && !e.shiftKey && !e.isComposing) sendChat(e);
  });
  $("cancel").addEventListener("click", () => {
    // serve's cancel also drops the queued inputs (from any client): it says how many.
    agentCall("cancel", (r) => {
      const n = r.dropped || 0;
      later("agents", 300, () => loadAgents().catch(fail));
      return (r.canceled ? "Cancelled" : "Nothing to cancel") + (n ? "; the " + (n > 1 ? n + " queued inputs were" : "queued input was") + " dropped." : ".");
    })();
  });
  $("clear").addEventListener("click", agentCall("clear", (r) => "Cleared: a new conversation" + (r.canceled ? " (the running turn was cancelled)." : ".")));
  $("compact").addEventListener("click", agentCall("compact", (r) => "Compacted: " + r.before + " → " + r.after + " messages."));
  $("todo-form").addEventListener("submit", addTodo);
  $("msg-form").addEventListener("submit", sendMsg);
  $("messages-older").addEventListener("click", () => S.sel && loadMessages(S.sel, true).catch(fail));
}

boot();
