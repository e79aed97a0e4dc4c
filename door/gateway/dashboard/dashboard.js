// The gateway's dashboard: the clients and their policies, the decisions as
// they happen, and buttons that change a client's policy. It talks only to
// the gateway's own API, with the token from the URL fragment (#token=...),
// or the one typed in once; the fragment never reaches the server.
"use strict";

const state = { token: "", clients: [], stream: null, rows: 0 };
const maxRows = 500;
const $ = (id) => document.getElementById(id);

function setStatus(s, text) {
  const el = $("status");
  el.dataset.state = s;
  el.textContent = text;
}

async function api(method, path, body) {
  const opts = { method, headers: { "Authorization": "Bearer " + state.token }, cache: "no-store" };
  if (body !== undefined) {
    opts.headers["Content-Type"] = "application/json";
    opts.body = JSON.stringify(body);
  }
  const r = await fetch(path, opts);
  if (r.status === 401) {
    sessionStorage.removeItem("postern-token");
    showLogin("the token was refused: type the one in the gateway's --api-token-file");
    throw new Error("unauthorized");
  }
  const text = await r.text();
  const data = text ? JSON.parse(text) : null;
  if (!r.ok) throw new Error((data && data.error) || r.statusText);
  return data;
}

function cell(tr, text, cls) {
  const td = document.createElement("td");
  td.textContent = text;
  if (cls) td.className = cls;
  tr.appendChild(td);
  return td;
}

function renderClients() {
  const tbody = $("clients").tBodies[0];
  tbody.replaceChildren();
  const sel = $("filter-client");
  const chosen = sel.value;
  sel.replaceChildren(new Option("all", ""));
  for (const c of state.clients) {
    const p = c.policy;
    const tr = document.createElement("tr");
    tr.dataset.client = c.name;
    cell(tr, c.name);
    cell(tr, c.own_policy ? "its own" : "default");
    cell(tr, p.mode);
    cell(tr, (p.ports || []).join(", "), "list");
    cell(tr, (p.allow || []).join(" "), "list");
    cell(tr, (p.deny || []).join(" "), "list");
    cell(tr, (p.allow_cidrs || []).join(" "), "list");
    tbody.appendChild(tr);
    sel.appendChild(new Option(c.name, c.name));
  }
  sel.value = chosen;
}

async function loadClients() {
  state.clients = await api("GET", "/v1/clients");
  renderClients();
}

// ruleText is a rule as its policy lists it: without the position a policy
// file gives it ("gist.github.com (default.hcl:4:9)").
function ruleText(rule) {
  const i = rule.lastIndexOf(" (");
  return i > 0 && rule.endsWith(")") ? rule.slice(0, i) : rule;
}

function isAddress(host) {
  return /^[0-9.]+$/.test(host) || host.includes(":");
}

// patchFor is the change that allows or denies ev's destination for its client.
function patchFor(ev, verb) {
  const host = ev.host;
  if (verb === "allow") {
    if (isAddress(host)) return { add_cidrs: [host + (host.includes(":") ? "/128" : "/32")] };
    const p = { add_allow: [host] };
    if (ev.reason === "denied by rule" && ev.rule) p.remove_deny = [ruleText(ev.rule)];
    return p;
  }
  const p = { add_deny: [host] };
  return p;
}

async function act(ev, verb, button) {
  button.disabled = true;
  try {
    const c = await api("PATCH", "/v1/clients/" + encodeURIComponent(ev.client) + "/policy", patchFor(ev, verb));
    $("action-result").textContent = `${verb === "allow" ? "allowed" : "denied"} ${ev.host} for ${c.name}: the next connection is judged by the new policy`;
    await loadClients();
  } catch (e) {
    $("action-result").textContent = `could not ${verb} ${ev.host} for ${ev.client}: ${e.message}`;
    button.disabled = false;
  }
}

function addDecision(ev) {
  if (ev.event !== "decision") return;
  const tr = document.createElement("tr");
  tr.className = ev.decision;
  tr.dataset.seq = ev.seq;
  tr.dataset.client = ev.client || "";
  tr.dataset.host = ev.host;
  cell(tr, new Date(ev.time).toLocaleTimeString());
  cell(tr, ev.client || "(none)");
  cell(tr, ev.kind);
  cell(tr, ev.port ? `${ev.host}:${ev.port}` : ev.host, "list");
  cell(tr, ev.would_deny ? "allow (would deny)" : ev.decision, "decision");
  cell(tr, ev.reason + (ev.rule ? ` (rule ${ev.rule})` : ""));
  const td = cell(tr, "");
  const known = state.clients.some((c) => c.name === ev.client);
  if (known && ev.host && !ev.reason.startsWith("hard floor") && !ev.reason.startsWith("proxy authentication")) {
    const verb = ev.decision === "deny" ? "allow" : "deny";
    if (!(verb === "deny" && isAddress(ev.host))) {
      const b = document.createElement("button");
      b.className = "act";
      b.dataset.verb = verb;
      b.textContent = verb;
      b.title = `${verb} ${ev.host} for ${ev.client}`;
      b.addEventListener("click", () => act(ev, verb, b));
      td.appendChild(b);
    }
  }
  const tbody = $("decisions").tBodies[0];
  tbody.insertBefore(tr, tbody.firstChild);
  while (tbody.rows.length > maxRows) tbody.deleteRow(tbody.rows.length - 1);
  $("count").textContent = `${tbody.rows.length} shown, newest first`;
}

// follow streams the decisions the filters select, as JSON lines.
async function follow() {
  if (state.stream) state.stream.abort();
  const ctl = new AbortController();
  state.stream = ctl;
  $("decisions").tBodies[0].replaceChildren();
  const q = new URLSearchParams({ follow: "1" });
  if ($("filter-client").value) q.set("client", $("filter-client").value);
  if ($("filter-decision").value) q.set("decision", $("filter-decision").value);
  try {
    const r = await fetch("/v1/events?" + q, { headers: { "Authorization": "Bearer " + state.token }, signal: ctl.signal, cache: "no-store" });
    if (!r.ok) throw new Error(r.status === 401 ? "the token was refused" : r.statusText);
    setStatus("live", "live");
    const reader = r.body.pipeThrough(new TextDecoderStream()).getReader();
    let buf = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buf += value;
      let i;
      while ((i = buf.indexOf("\n")) >= 0) {
        const line = buf.slice(0, i).trim();
        buf = buf.slice(i + 1);
        if (!line) continue;
        const ev = JSON.parse(line);
        if (ev.event === "lost") continue;
        if (ev.client && !state.clients.some((c) => c.name === ev.client)) loadClients().catch(() => {});
        addDecision(ev);
      }
    }
    setStatus("down", "the stream ended; reload the page");
  } catch (e) {
    if (ctl.signal.aborted) return;
    setStatus("down", "not connected: " + e.message);
  }
}

function showLogin(msg) {
  $("main").hidden = true;
  $("login").hidden = false;
  $("login-error").textContent = msg || "";
  setStatus("down", "no token");
}

async function start() {
  $("login").hidden = true;
  $("main").hidden = false;
  try {
    await loadClients();
  } catch (e) {
    if (e.message !== "unauthorized") setStatus("down", "cannot reach the API: " + e.message);
    return;
  }
  follow();
  setInterval(() => loadClients().catch(() => {}), 10000);
}

function init() {
  const m = /(?:^|&)token=([^&]+)/.exec(location.hash.slice(1));
  if (m) {
    state.token = decodeURIComponent(m[1]);
    sessionStorage.setItem("postern-token", state.token);
    history.replaceState(null, "", location.pathname + location.search);
  } else {
    state.token = sessionStorage.getItem("postern-token") || "";
  }
  $("login").addEventListener("submit", (e) => {
    e.preventDefault();
    state.token = $("token").value.trim();
    sessionStorage.setItem("postern-token", state.token);
    start();
  });
  $("filter-client").addEventListener("change", follow);
  $("filter-decision").addEventListener("change", follow);
  if (state.token) start(); else showLogin();
}

init();
