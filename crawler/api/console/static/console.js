// The crawler's web console: reads crawler-api's /v1 with the token the person enters, and draws it.
// Every value from the API may come from a crawled site (URLs, titles, errors): it goes into the page
// as text (textContent), never as markup.
"use strict";

const TOKEN_KEY = "crawler-token";
const EVERY = 3000; // ms between reads of the view shown
const DEAD_EVERY = 10000; // reading the dead queue receives every message and puts it back: less often
const PAGE = 20; // crawls a page
const UNREACHABLE = "Cannot reach the API"; // a failed read's banner starts with it, and goes with the next good read
// States a crawl may still end from, so Cancel is offered (crawler/sink/crawls.py OPEN).
const OPEN = ["running", "interrupted"];
const STATE_TITLES = {
  running: "its work is under way",
  finished: "every page it queued came to an outcome",
  cancelled: "cancelled: no fetch of it starts again",
  interrupted: "stopped before its end (Ctrl-C, a fetch service that refused it, a reset): a later crawl of its leftovers finishes it, or Cancel ends it",
};

const $ = (id) => document.getElementById(id);
let who = null; // {name, scope} of the signed-in token
let crawlsAt = null; // the `before` of the crawls page shown (null: the newest)
let crawlsNext = null;
let timer = null;
let busy = false;
let again = false; // the view changed while a read was under way: read again as soon as it ends
let lastDead = 0;

// fetch itself failed: no answer at all (the API is down, or the network to it).
class Unreachable extends Error {}

class Refused extends Error {
  constructor(status, detail) {
    super(detail);
    this.status = status;
  }
}

// -- the API ---------------------------------------------------------------------------------------

async function api(path, options = {}) {
  const token = sessionStorage.getItem(TOKEN_KEY);
  const headers = { Accept: "application/json", ...(options.headers || {}) };
  if (token) headers.Authorization = `Bearer ${token}`;
  if (options.body !== undefined) headers["Content-Type"] = "application/json";
  let resp;
  try {
    resp = await fetch(path, {
      method: options.method || "GET",
      headers,
      body: options.body === undefined ? undefined : JSON.stringify(options.body),
      cache: "no-store",
      credentials: "omit",
    });
  } catch (_) {
    throw new Unreachable(`the API at ${location.origin} is unreachable`);
  }
  if (resp.status === 204) return null;
  let data = null;
  try {
    data = await resp.json();
  } catch (_) {
    data = null;
  }
  if (!resp.ok) {
    const detail = (data && (data.detail || data.title)) || `HTTP ${resp.status}`;
    throw new Refused(resp.status, detail);
  }
  return data;
}

const isAdmin = () => who !== null && who.scope === "admin";

// -- building the page -----------------------------------------------------------------------------

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value === null || value === undefined || value === false) continue;
    if (key === "class") node.className = value;
    else if (key === "text") node.textContent = value;
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, value === true ? "" : String(value));
  }
  for (const child of children) {
    if (child !== null && child !== undefined) node.append(child);
  }
  return node;
}

const cell = (col, value, extra = {}) => el("td", { "data-col": col, text: value === null || value === undefined ? "–" : String(value), ...extra });
const num = (col, value) => cell(col, value, { class: "n" });
const fixed = (value, digits = 2) => (value === null || value === undefined ? "–" : Number(value).toFixed(digits));

function button(name, onclick, cls = "") {
  return el("button", { type: "button", class: cls, onclick }, name);
}

// A row's buttons, in the column that stays at the table's right edge while it scrolls.
function actionsCell(...buttons) {
  return el("td", { class: "actions" }, el("div", { class: "buttons" }, ...buttons));
}

// Long text cut to its column, whole in its title.
const clipped = (col, value, cls = "clip") => cell(col, value, { class: cls, title: value || null });

// Each wide table's frame shows a shadow on the side it can scroll to.
function cues() {
  for (const scroller of document.querySelectorAll(".scroll")) {
    const frame = scroller.parentElement;
    const rest = scroller.scrollWidth - scroller.clientWidth - scroller.scrollLeft;
    frame.classList.toggle("more-left", scroller.scrollLeft > 1);
    frame.classList.toggle("more-right", rest > 1);
  }
}

function fill(tbody, rows, empty, columns) {
  tbody.replaceChildren(...rows);
  if (rows.length === 0) {
    tbody.append(el("tr", {}, el("td", { colspan: columns, class: "empty", text: empty })));
  }
}

// dateStyle cannot be combined with timeZoneName: the parts are asked for one by one.
const timeFormat = new Intl.DateTimeFormat(undefined, {
  year: "numeric",
  month: "short",
  day: "numeric",
  hour: "2-digit",
  minute: "2-digit",
  second: "2-digit",
  timeZoneName: "short",
});

// Times are shown in the browser's own zone, with the zone said; the ISO time stays in the markup.
function when(iso) {
  if (!iso) return el("span", { text: "–" });
  const date = new Date(iso);
  if (Number.isNaN(date.getTime())) return el("span", { text: iso });
  return el("time", { datetime: iso, title: iso, text: timeFormat.format(date) });
}

function ago(seconds) {
  if (seconds === null || seconds === undefined) return "gone";
  if (seconds < 90) return `${seconds.toFixed(1)} s ago`;
  if (seconds < 5400) return `${Math.round(seconds / 60)} min ago`;
  return `${Math.round(seconds / 3600)} h ago`;
}

function duration(seconds) {
  if (seconds === null || seconds === undefined) return "–";
  if (seconds < 120) return `${Math.round(seconds)} s`;
  if (seconds < 7200) return `${Math.round(seconds / 60)} min`;
  return `${(seconds / 3600).toFixed(1)} h`;
}

function say(message) {
  const banner = $("banner");
  banner.textContent = message || "";
  banner.hidden = !message;
}

// A crawl's state as a coloured label, its meaning in the title.
function state(value) {
  return el("span", { class: `state state-${value}`, "data-col": "state", title: STATE_TITLES[value] || null, text: value });
}

function sum(counts, kind) {
  return Object.values(counts || {}).reduce((total, c) => total + (c[kind] || 0), 0);
}

// A red marker on a domain whose field coverage raised alerts (docs/quality.md): the fields (or
// expectations) it names, and each alert's message under it.
function coverageMarker(alerts, withCrawl = false) {
  if (!alerts || !alerts.length) return [];
  const subjects = [...new Set(alerts.map((a) => (a.pages === "all" || a.subject.includes("/") ? a.subject : `${a.pages}/${a.subject}`)))];
  const lines = alerts.map((a) => (withCrawl ? `crawl ${a.crawl}: ${a.message}` : a.message));
  return [
    el("span", { class: "badge", "data-col": "coverage", title: lines.join("\n"), text: `coverage alert: ${subjects.join(", ")}` }),
    ...lines.map((line) => el("div", { class: "why", "data-col": "coverage-why", text: line })),
  ];
}

function byDomain(alerts) {
  const out = {};
  for (const a of alerts) (out[a.domain] = out[a.domain] || []).push(a);
  return out;
}

// -- views -----------------------------------------------------------------------------------------

async function showCrawls() {
  const query = new URLSearchParams({ limit: String(PAGE) });
  if (crawlsAt) query.set("before", crawlsAt);
  const data = await api(`/v1/crawls?${query}`);
  crawlsNext = data.next;
  $("older").disabled = !data.next;
  $("newest").disabled = crawlsAt === null;
  const rows = data.crawls.map((c) => {
    const seeds = c.seeds.length > 1 ? `${c.seeds[0]} and ${c.seeds.length - 1} more` : c.seeds[0] || "";
    const link = el("a", { href: `#crawl/${encodeURIComponent(c.id)}`, text: c.label || c.id });
    const actions = actionsCell();
    if (isAdmin() && OPEN.includes(c.state)) actions.firstChild.append(button("Cancel", () => cancel(c.id)));
    return el(
      "tr",
      { "data-id": c.id },
      el("td", {}, state(c.state)),
      el("td", { "data-col": "label" }, link),
      clipped("seeds", seeds, "url"),
      el("td", { "data-col": "started" }, when(c.started)),
      num("ok", sum(c.counts, "ok")),
      num("failed", sum(c.counts, "failed")),
      num("dead", sum(c.counts, "dead")),
      num("skipped", sum(c.counts, "skipped")),
      num("credits", c.credits === null ? "–" : fixed(c.credits)),
      actions,
    );
  });
  fill($("crawls-rows"), rows, "No crawl yet.", 10);
}

async function showCrawl(id) {
  const [crawl, series, quality] = await Promise.all([
    api(`/v1/crawls/${encodeURIComponent(id)}`),
    api(`/v1/crawls/${encodeURIComponent(id)}/series`),
    api(`/v1/crawls/${encodeURIComponent(id)}/quality`),
  ]);
  const alerts = Object.fromEntries(quality.domains.map((d) => [d.domain, d.alerts]));
  $("crawl-title").textContent = `Crawl ${crawl.label || crawl.id}`;
  const opts = crawl.options;
  const facts = [
    ["State", state(crawl.state)],
    ["Id", crawl.id],
    ["Label", crawl.label || "–"],
    ["Seeds", crawl.seeds.join("\n")],
    ["Options", `max depth ${opts.max_depth ?? "–"}, max pages ${opts.max_pages ?? "–"}, domains ${opts.domains ? opts.domains.join(", ") : "all"}`],
    ["Started", when(crawl.started)],
    ["Finished", when(crawl.finished)],
    ["Credits", crawl.credits === null ? "–" : fixed(crawl.credits)],
  ];
  $("crawl-facts").replaceChildren(
    ...facts.flatMap(([name, value]) => [el("dt", { text: name }), el("dd", {}, value)]),
  );
  const actions = $("crawl-actions");
  actions.replaceChildren();
  if (isAdmin() && OPEN.includes(crawl.state)) actions.append(button("Cancel", () => cancel(crawl.id)));
  const rows = Object.entries(crawl.counts).map(([domain, c]) => {
    const done = c.ok + c.failed + c.dead + c.skipped;
    const total = done + c.pending + c.retrying;
    const bar = el("progress", { max: Math.max(total, 1), value: done, "aria-label": `${domain}: ${done} of ${total} done` });
    const marker = coverageMarker(alerts[domain]);
    return el(
      "tr",
      { "data-id": domain, class: marker.length ? "alerted" : "" },
      el("td", { "data-col": "domain" }, el("span", { text: domain }), ...marker),
      num("ok", c.ok),
      num("failed", c.failed),
      num("retrying", c.retrying),
      num("dead", c.dead),
      num("skipped", c.skipped),
      num("pending", c.pending),
      el("td", { "data-col": "progress" }, bar),
    );
  });
  fill($("crawl-rows"), rows, "Nothing routed yet.", 8);
  $("chart").replaceChildren(chart(series));
}

async function showDomains() {
  const [data, quality] = await Promise.all([api("/v1/domains"), api("/v1/quality/alerts")]);
  const alerts = byDomain(quality.alerts);
  const rows = data.domains.map((d) => {
    const a = d.answers;
    const effective = d.backoff < 1 ? `${fixed(d.effective_rate)} (×${fixed(d.backoff, 3)})` : fixed(d.effective_rate);
    const name = el("td", { "data-col": "domain" }, el("span", { text: d.domain }));
    if (d.refused) {
      name.append(el("span", { class: "badge", "data-col": "refused", text: "refused" }));
      name.append(el("div", { class: "why", text: d.refused_why }));
    }
    const marker = coverageMarker(alerts[d.domain], true);
    name.append(...marker);
    const robots = d.robots.detail ? `${d.robots.state}: ${d.robots.detail}` : d.robots.state;
    const actions = actionsCell();
    if (isAdmin()) {
      actions.firstChild.append(
        d.paused ? button("Resume", () => steer(d.domain, "resume")) : button("Pause", () => steer(d.domain, "pause")),
      );
    }
    return el(
      "tr",
      { "data-id": d.domain, class: [d.refused ? "refused" : d.paused ? "paused" : "", marker.length ? "alerted" : ""].join(" ").trim() },
      name,
      num("depth", d.depth),
      num("unacked", d.unacked === null ? "?" : d.unacked),
      num("rate", fixed(d.rate)),
      num("effective_rate", effective),
      num("pages_per_second", fixed(d.pages_per_second)),
      num("4xx", a["4xx"]),
      num("5xx", a["5xx"]),
      num("network", a.network),
      clipped("robots", robots),
      cell("paused", d.paused ? "yes" : "no"),
      num("workers", d.workers),
      actions,
    );
  });
  fill($("domains-rows"), rows, "No domain in domains.yaml.", 13);
  showHosts(data.discovered);
}

// Discovered hosts as one summary and their top ten by URLs queued: never a row per host.
function showHosts(h) {
  const shown = Boolean(h && (h.follow || h.known));
  $("hosts").hidden = !shown;
  if (!shown) return;
  const inFlight = h.shards.unacked === null ? "?" : h.shards.unacked;
  $("hosts-summary").textContent =
    `${h.known} known, ${h.active} active, ${h.waiting} waiting, ${h.parked} parked. ` +
    `Shard queues (${h.shards.name}): ${h.shards.ready} queued, ${inFlight} in flight; ` +
    `wait queues: ${h.waits.ready} waiting.`;
  const rows = h.top.map((t) => el("tr", { "data-id": t.host }, cell("host", t.host), num("queued", t.queued)));
  fill($("hosts-rows"), rows, "No discovered host has URLs queued.", 2);
}

async function showDead(force) {
  if (!force && Date.now() - lastDead < DEAD_EVERY) return;
  lastDead = Date.now();
  const data = await api("/v1/dead/summary");
  $("dead-total").textContent = `${data.total} dead letter${data.total === 1 ? "" : "s"}`;
  const rows = data.groups.map((g) => {
    const filter = new URLSearchParams({ domain: g.domain, reason: g.reason });
    const actions = actionsCell(button("Letters", () => letters(g, filter), "quiet"));
    if (isAdmin()) {
      actions.firstChild.append(button("Replay", () => deadAction("Replayed", "POST", `/v1/dead/replay?${filter}`)));
      actions.firstChild.append(
        button("Delete", () => {
          if (confirm(`Delete ${g.count} dead letter(s) of ${g.domain} (${g.reason}) for good?`)) {
            deadAction("Deleted", "DELETE", `/v1/dead?${filter}`);
          }
        }, "danger"),
      );
    }
    return el(
      "tr",
      { "data-id": `${g.domain}|${g.reason}` },
      cell("domain", g.domain),
      cell("reason", g.reason),
      num("count", g.count),
      clipped("error", g.last_error),
      cell("time", g.last_time),
      actions,
    );
  });
  fill($("dead-rows"), rows, "The dead queue is empty.", 6);
}

async function letters(group, filter) {
  const data = await api(`/v1/dead?${filter}&limit=50`);
  const rows = data.dead.map((d) =>
    el("tr", {}, clipped("url", d.url, "url"), answer(d.status), num("attempts", d.attempts), clipped("error", d.error), cell("time", d.time)),
  );
  const table = el(
    "table",
    { "aria-label": `Dead letters of ${group.domain}, ${group.reason}` },
    el("thead", {}, el("tr", {}, ...["URL", "Status", "Attempts", "Error", "Time"].map((h) => el("th", { text: h })))),
    el("tbody", {}, ...rows),
  );
  $("dead-letters").replaceChildren(
    el("h3", { text: `${group.domain}, ${group.reason} (first ${rows.length})` }),
    el("div", { class: "frame" }, el("div", { class: "scroll" }, table)),
  );
  cues();
}

// A letter's HTTP status; 0 means the site never answered (the connection failed or was refused).
function answer(status) {
  if (status) return num("status", status);
  return cell("status", "no answer", { class: "n", title: "no HTTP answer: the connection failed or was refused" });
}

async function showFleet() {
  const data = await api("/v1/fleet");
  const workers = data.workers.map((w) =>
    el(
      "tr",
      { "data-id": w.id, class: `state-${w.state}` },
      cell("host", w.host),
      num("pid", w.pid),
      cell("role", w.role),
      cell("state", w.state),
      num("age", ago(w.age)),
      num("pages", w.pages),
      cell("domains", w.domains.length > 5 ? `${w.domains.slice(0, 5).join(", ")} and ${w.domains.length - 5} more` : w.domains.join(", ")),
    ),
  );
  fill($("workers-rows"), workers, "No worker has a heartbeat.", 7);
  const gateways = data.gateways.map((g) => {
    const count = (state) => g.exits.filter((e) => e.state === state).length;
    const exits = g.exits.map((e) => {
      const again = e.dead_for === null ? "not answered since; the next request tries it" : `tried again in ${duration(e.dead_for)}`;
      const note = e.state === "cooling" ? ` for ${e.cooling.join(", ")}` : e.state === "dead" ? `, ${again}` : "";
      return el("li", { "data-id": e.id, class: `exit-${e.state}`, text: `${e.id}: ${e.state}${note}` });
    });
    const keys = g.keys.map((k) => {
      const spent = k.budget === null ? `${fixed(k.credits)} credits (no budget)` : `${fixed(k.credits)} of ${fixed(k.budget)} credits`;
      const meter = k.budget === null ? null : el("meter", { min: 0, max: k.budget, value: Math.min(k.credits, k.budget), high: k.budget * 0.8, "aria-label": `${k.id}: ${spent}` });
      return el("li", { "data-id": k.id }, `${k.id}: ${spent} `, meter);
    });
    return el(
      "article",
      { class: `gateway state-${g.state}`, "data-id": g.id },
      el("h4", { text: `${g.host} pid ${g.pid}: ${g.state}, reported ${ago(g.age)}` }),
      el("p", { text: `${count("healthy")} healthy, ${count("cooling")} cooling, ${count("dead")} dead` }),
      el("ul", { "aria-label": "Exits" }, ...exits),
      el("ul", { "aria-label": "Keys" }, ...keys),
    );
  });
  $("gateways").replaceChildren(...(gateways.length ? gateways : [el("p", { class: "empty", text: "No crawler-gateway reports." })]));
  const fresh = data.freshness.map((f) =>
    el("tr", { "data-id": f.domain }, cell("domain", f.domain), cell("recrawls", f.recrawls ? "yes" : "no"), num("due", f.due), num("overdue", duration(f.overdue_seconds))),
  );
  fill($("fresh-rows"), fresh, "No domain.", 4);
}

// -- the chart -------------------------------------------------------------------------------------

const SVG = "http://www.w3.org/2000/svg";
const svg = (tag, attrs = {}, text) => {
  const node = document.createElementNS(SVG, tag);
  for (const [key, value] of Object.entries(attrs)) node.setAttribute(key, String(value));
  if (text !== undefined) node.textContent = text;
  return node;
};

function chart(series) {
  const W = 720, H = 220, L = 48, B = 28, T = 10, R = 10;
  const domains = Object.keys(series.domains);
  const points = domains.length ? series.domains[domains[0]].length : 0;
  const total = Array.from({ length: points }, (_, i) => domains.reduce((s, d) => s + series.domains[d][i], 0));
  const lines = [["all", total], ...domains.map((d) => [d, series.domains[d]])];
  const peak = Math.max(1, ...total) / series.step;
  const x = (i) => L + (points > 1 ? (i * (W - L - R)) / (points - 1) : (W - L - R) / 2);
  const y = (n) => H - B - ((n / series.step) * (H - B - T)) / peak;
  const described = `Pages per second over the crawl, in steps of ${series.step} s; peak ${peak.toFixed(2)}.`;
  const root = svg("svg", { viewBox: `0 0 ${W} ${H}`, role: "img", "aria-label": described, class: "chart" });
  root.append(svg("title", {}, described));
  root.append(svg("line", { x1: L, y1: H - B, x2: W - R, y2: H - B, class: "axis" }));
  root.append(svg("line", { x1: L, y1: T, x2: L, y2: H - B, class: "axis" }));
  for (const f of [0, 0.5, 1]) {
    root.append(svg("text", { x: L - 6, y: y(f * peak * series.step) + 4, "text-anchor": "end", class: "tick" }, (f * peak).toFixed(1)));
  }
  const start = new Date(series.start);
  const clock = new Intl.DateTimeFormat(undefined, { timeStyle: "short" });
  if (points) {
    root.append(svg("text", { x: L, y: H - 8, class: "tick" }, clock.format(start)));
    root.append(svg("text", { x: W - R, y: H - 8, "text-anchor": "end", class: "tick" }, clock.format(new Date(start.getTime() + points * series.step * 1000))));
  }
  const legend = el("ul", { class: "legend" });
  lines.forEach(([name, values], n) => {
    if (!values.length) return;
    const at = values.map((v, i) => `${x(i).toFixed(1)},${y(v).toFixed(1)}`).join(" ");
    root.append(svg("polyline", { points: at, class: `line line-${n % 6}` }));
    legend.append(el("li", { class: `key key-${n % 6}`, text: name }));
  });
  return el("figure", {}, root, legend);
}

// -- actions ---------------------------------------------------------------------------------------

async function act(work) {
  try {
    await work();
  } catch (err) {
    handle(err);
  }
  await refresh(true);
}

function cancel(id) {
  if (!confirm("Cancel this crawl? No new fetch of it starts anywhere; its counts become final.")) return;
  act(() => api(`/v1/crawls/${encodeURIComponent(id)}/cancel`, { method: "POST" }));
}

function steer(domain, verb) {
  act(() => api(`/v1/domains/${encodeURIComponent(domain)}/${verb}`, { method: "POST" }));
}

function deadAction(done, method, path) {
  act(async () => {
    const data = await api(path, { method });
    say(`${done} ${data.count}`);
  });
}

async function startCrawl(event) {
  event.preventDefault();
  const error = $("new-crawl-error");
  error.textContent = "";
  const seeds = $("seeds").value.split(/\s+/).filter(Boolean);
  const body = { seeds };
  const label = $("label").value.trim();
  if (label) body.label = label;
  if ($("max-depth").value !== "") body.max_depth = Number($("max-depth").value);
  if ($("max-pages").value !== "") body.max_pages = Number($("max-pages").value);
  const domains = $("domains-field").value.split(/[\s,]+/).filter(Boolean);
  if (domains.length) body.domains = domains;
  try {
    const crawl = await api("/v1/crawls", { method: "POST", body });
    $("new-crawl").reset();
    location.hash = `#crawl/${encodeURIComponent(crawl.id)}`;
  } catch (err) {
    if (err instanceof Refused && err.status === 401) return handle(err);
    error.textContent = err.message;
  }
}

// -- signing in and out ----------------------------------------------------------------------------

async function signIn(event) {
  event.preventDefault();
  const token = $("token").value.trim();
  $("signin-error").textContent = "";
  if (!token) return;
  sessionStorage.setItem(TOKEN_KEY, token);
  $("token").value = "";
  await start();
}

async function start() {
  try {
    who = await api("/v1/whoami");
  } catch (err) {
    sessionStorage.removeItem(TOKEN_KEY);
    who = null;
    signedOut(
      err instanceof Refused && err.status === 401
        ? "That token was refused: check it against CRAWLER_API_TOKENS (401)."
        : `Cannot sign in: ${err.message}.`,
    );
    return;
  }
  $("whoami").textContent = `${who.name} (${who.scope})`;
  $("who").hidden = false;
  $("nav").hidden = false;
  $("new-crawl").hidden = !isAdmin();
  if (!location.hash || location.hash === "#signin") location.hash = "#crawls";
  route();
}

function signedOut(message) {
  who = null;
  clearTimeout(timer);
  $("who").hidden = true;
  $("nav").hidden = true;
  say("");
  for (const section of document.querySelectorAll("main > section")) section.hidden = section.id !== "signin";
  $("signin-error").textContent = message || "";
  $("token").focus();
}

function signOut() {
  sessionStorage.removeItem(TOKEN_KEY);
  signedOut("");
}

function handle(err) {
  if (err instanceof Refused && err.status === 401) {
    sessionStorage.removeItem(TOKEN_KEY);
    signedOut("That token was refused: check it against CRAWLER_API_TOKENS (401).");
  } else if (err instanceof Refused && err.status === 403) {
    say(`Not allowed: ${err.message}`);
  } else if (err instanceof Unreachable) {
    say(`${UNREACHABLE}: ${err.message}. The numbers below are the last ones read; retrying every ${EVERY / 1000} s.`);
  } else {
    say(`${UNREACHABLE}: ${err.message}; retrying`);
  }
}

// -- routing and the live refresh ------------------------------------------------------------------

function current() {
  const hash = location.hash.slice(1);
  if (hash.startsWith("crawl/")) return ["crawl", decodeURIComponent(hash.slice(6))];
  return [["crawls", "domains", "dead", "fleet"].includes(hash) ? hash : "crawls", null];
}

function route() {
  if (who === null) return;
  const [view] = current();
  if (view === "crawl") {
    // Another crawl's numbers must not show under this one's address while it loads.
    for (const id of ["crawl-facts", "crawl-actions", "crawl-rows", "chart"]) $(id).replaceChildren();
  }
  for (const section of document.querySelectorAll("main > section")) section.hidden = section.id !== view;
  for (const link of document.querySelectorAll("#nav a")) {
    if (link.getAttribute("href") === `#${view}`) link.setAttribute("aria-current", "page");
    else link.removeAttribute("aria-current");
  }
  refresh(true);
}

async function refresh(force = false) {
  clearTimeout(timer);
  if (who === null) return;
  // A hidden tab reads nothing; visibilitychange reads at once when it shows again.
  if (document.visibilityState === "hidden") return;
  if (busy) {
    again = true;
    return;
  }
  busy = true;
  const [view, id] = current();
  try {
    if (view === "crawls") await showCrawls();
    else if (view === "crawl") await showCrawl(id);
    else if (view === "domains") await showDomains();
    else if (view === "dead") await showDead(force);
    else if (view === "fleet") await showFleet();
    // A failed read's banner goes with the next good one; an action's message stays until the next.
    if ($("banner").textContent.startsWith(UNREACHABLE)) say("");
    cues();
    $("updated").textContent = `updated ${new Date().toLocaleTimeString()}`;
  } catch (err) {
    handle(err);
  } finally {
    busy = false;
  }
  if (again) {
    again = false;
    refresh(true);
  } else if (who !== null) {
    timer = setTimeout(refresh, EVERY);
  }
}

// Polling, not server-sent events: EventSource cannot send an Authorization header, and the token
// must never travel in a URL.
document.addEventListener("visibilitychange", () => {
  if (document.visibilityState === "visible") refresh(true);
  else clearTimeout(timer);
});
window.addEventListener("hashchange", route);
window.addEventListener("resize", cues);
// Scroll events do not bubble: caught on their way down instead, from every table's frame.
document.addEventListener("scroll", cues, { capture: true, passive: true });
$("signin-form").addEventListener("submit", signIn);
$("signout").addEventListener("click", signOut);
$("new-crawl").addEventListener("submit", startCrawl);
$("older").addEventListener("click", () => {
  if (!crawlsNext) return;
  crawlsAt = new URLSearchParams(crawlsNext.split("?")[1]).get("before");
  refresh(true);
});
$("newest").addEventListener("click", () => {
  crawlsAt = null;
  refresh(true);
});

if (sessionStorage.getItem(TOKEN_KEY)) start();
else signedOut("");
