// Caravan UI: loads each page's server-rendered fragment with the ACL token from session
// storage, follows links without reloading, and keeps a page live with blocking queries.
"use strict";

const TOKEN_KEY = "caravan.acl.token";
const view = () => document.getElementById("view");
const token = () => sessionStorage.getItem(TOKEN_KEY) || "";
let current = null; // the AbortController of the page being shown
let drawnAt = 0; // when the page was last drawn (ms)
const sortState = {}; // table label -> [column, ascending]
const filterState = {}; // filter name -> text

// The page's fragment, without any index or wait the page's own URL carried (the script
// adds its own).
function fragmentUrl(path) {
  const u = new URL(path, location.origin);
  u.searchParams.delete("index");
  u.searchParams.delete("wait");
  return "/ui/_" + u.pathname.replace(/^\/ui/, "") + u.search;
}

async function load(path) {
  if (current) current.abort();
  const ctrl = new AbortController();
  current = ctrl;
  markSection(path);
  let index = 0;
  let first = true;
  while (!ctrl.signal.aborted) {
    let url = fragmentUrl(path);
    if (index) url += (url.includes("?") ? "&" : "?") + "index=" + index + "&wait=30s";
    let resp;
    try {
      const headers = token() ? { "X-Nomad-Token": token() } : {};
      resp = await fetch(url, { headers, signal: ctrl.signal });
    } catch (e) {
      if (ctrl.signal.aborted) return;
      if (first) view().innerHTML = '<p class="notice">Cannot reach the agent; retrying…</p>';
      await sleep(3000);
      continue;
    }
    let html;
    try {
      html = await resp.text();
    } catch (e) {
      if (ctrl.signal.aborted) return;
      throw e;
    }
    if (ctrl.signal.aborted) return;
    if (!first && resp.status >= 500) {
      // Keep what is shown; say the live updates are paused, and try again.
      banner("Live updates paused: the agent answered " + resp.status + "; retrying…");
      index = 0;
      await sleep(5000);
      continue;
    }
    // A variable being edited is not redrawn under the user (its save is checked-and-set).
    if (!first && view().querySelector("form.varedit[data-dirty='1']")) {
      banner("This page changed on the server while you edit: it is not redrawn until you save or reload.");
    } else {
      show(html, !first);
      document.title = resp.headers.get("X-Caravan-Title") || "Caravan";
    }
    if (first) {
      first = false;
      if (path.endsWith("/settings/tokens")) wireSignin();
      if (path.split("?")[0].endsWith("/jobs/run")) wireRunJob();
    }
    const next = Number(resp.headers.get("X-Nomad-Index") || 0);
    if (!resp.ok || !next) return;
    // An index that did not move means the wait timed out: ask again from the same one.
    if (next < index) index = 0; else index = next;
    if (document.hidden) await visible();
    // On a busy cluster the index moves all the time: redraw at most once a second.
    const since = Date.now() - drawnAt;
    drawnAt = Date.now();
    if (since < 1000) await sleep(1000 - since);
  }
}

// Draws a page; `live`: a new answer for the page shown (what the user opened stays open).
function show(html, live) {
  const v = view();
  const focused = document.activeElement && document.activeElement.id;
  const caret = focused === "filter" ? document.activeElement.selectionStart : null;
  const typed = focused === "filter" ? document.activeElement.value : null;
  // A count being typed into a scale form survives the live update.
  const active = document.activeElement;
  const editing = active && active.closest ? active.closest("form.scale") : null;
  const kept = editing ? { group: editing.dataset.group, value: active.value } : null;
  // Disclosures the user opened stay open.
  const opened = live ? [...v.querySelectorAll("details[open] > summary")].map((s) => s.textContent) : [];
  v.innerHTML = html;
  for (const s of v.querySelectorAll("details > summary")) {
    if (opened.includes(s.textContent)) s.parentElement.open = true;
  }
  if (kept) {
    const f = v.querySelector('form.scale[data-group="' + CSS.escape(kept.group) + '"]');
    if (f) { const i = f.querySelector("input"); i.value = kept.value; i.focus(); }
  }
  // What the last actions answered stays shown when the page is drawn again.
  for (const [key, r] of Object.entries(results)) {
    const el = v.querySelector('[data-result-key="' + CSS.escape(key) + '"]');
    const out = el && (el.querySelector(".actionresult") || el.parentElement.querySelector(".actionresult"));
    if (out) { out.textContent = r.text; out.className = r.cls; }
  }
  relativeTimes(v);
  for (const t of v.querySelectorAll("table.sortable")) wireSort(t);
  const f = v.querySelector("input[data-filter]");
  if (f) {
    f.value = filterState[f.dataset.filter] || "";
    f.addEventListener("input", () => { filterState[f.dataset.filter] = f.value; applyFilter(f); });
    applyFilter(f);
    if (focused === "filter") { f.focus(); if (caret !== null) f.setSelectionRange(caret, caret); }
  }
  // A filter the server applies (a paged list): typing asks for the page again.
  const q = v.querySelector("input[data-search]");
  if (q) {
    if (typed !== null) q.value = typed; // what is being typed wins over the answer's

    q.addEventListener("input", () => search(q));
    if (focused === "filter") { q.focus(); if (caret !== null) q.setSelectionRange(caret, caret); }
  }
  if (focused === "secret") wireSignin();
}

// The pending ask of a search box.
let searchTimer = null;
function search(input) {
  clearTimeout(searchTimer);
  searchTimer = setTimeout(() => {
    const u = new URL(location.href);
    if (input.value.trim()) u.searchParams.set(input.dataset.search, input.value.trim());
    else u.searchParams.delete(input.dataset.search);
    u.searchParams.delete("page");
    history.replaceState({}, "", u.pathname + u.search);
    load(u.pathname + u.search);
  }, 250);
}

// The answer of each action by its element's key (path, and group for a scale form).
const results = {};
function report(el, out, text, error) {
  const cls = error ? "actionresult error" : "actionresult";
  if (out) { out.textContent = text; out.className = cls; }
  const key = el.dataset.resultKey;
  if (key) results[key] = { text, cls };
}

function banner(text) {
  let b = document.getElementById("banner");
  if (!b) {
    b = document.createElement("p");
    b.id = "banner";
    b.className = "notice";
    b.setAttribute("role", "status");
    view().prepend(b);
  }
  b.textContent = text;
}

function applyFilter(input) {
  const words = input.value.toLowerCase().split(/\s+/).filter(Boolean);
  const table = view().querySelector("table.sortable");
  if (!table) return;
  for (const row of table.tBodies[0].rows) {
    const text = row.textContent.toLowerCase();
    row.hidden = !words.every((w) => text.includes(w));
  }
}

function cellValue(row, i) {
  const cell = row.cells[i];
  if (!cell) return "";
  const time = cell.querySelector("time");
  if (time) return time.getAttribute("datetime");
  return cell.dataset.value || cell.textContent.trim();
}

function sortBy(table, col, asc) {
  const body = table.tBodies[0];
  const rows = Array.from(body.rows);
  const num = rows.every((r) => cellValue(r, col) === "" || !isNaN(Number(cellValue(r, col))));
  rows.sort((a, b) => {
    const x = cellValue(a, col), y = cellValue(b, col);
    const c = num ? Number(x) - Number(y) : x.localeCompare(y, undefined, { numeric: true });
    return asc ? c : -c;
  });
  for (const r of rows) body.appendChild(r);
  table.querySelectorAll("th").forEach((th, i) => {
    if (i === col) th.setAttribute("aria-sort", asc ? "ascending" : "descending");
    else th.removeAttribute("aria-sort");
  });
}

function wireSort(table) {
  const key = table.getAttribute("aria-label") || "";
  table.querySelectorAll("th").forEach((th, i) => {
    const go = () => {
      const [col, asc] = sortState[key] || [-1, true];
      const next = col === i ? !asc : true;
      sortState[key] = [i, next];
      sortBy(table, i, next);
    };
    th.addEventListener("click", go);
    th.addEventListener("keydown", (e) => { if (e.key === "Enter" || e.key === " ") { e.preventDefault(); go(); } });
  });
  if (sortState[key]) sortBy(table, sortState[key][0], sortState[key][1]);
}

function relativeTimes(root) {
  const now = Date.now();
  for (const t of root.querySelectorAll("time[datetime]")) {
    const at = Date.parse(t.getAttribute("datetime"));
    if (isNaN(at)) continue;
    const s = Math.round((now - at) / 1000);
    const abs = Math.abs(s);
    const text = abs < 60 ? abs + "s" : abs < 3600 ? Math.round(abs / 60) + "m"
      : abs < 86400 ? Math.round(abs / 3600) + "h" : Math.round(abs / 86400) + "d";
    t.textContent = s >= 0 ? text + " ago" : "in " + text;
  }
}

function markSection(path) {
  const section = path.replace(/^\/ui\//, "").split(/[/?]/)[0];
  for (const a of document.querySelectorAll("header.top a[data-section]")) {
    if (a.dataset.section === section) a.setAttribute("aria-current", "page");
    else a.removeAttribute("aria-current");
  }
}

function wireSignin() {
  const form = document.getElementById("signin");
  if (!form || form.dataset.wired) return;
  form.dataset.wired = "1";
  form.addEventListener("submit", (e) => {
    e.preventDefault();
    const secret = document.getElementById("secret").value.trim();
    if (secret) sessionStorage.setItem(TOKEN_KEY, secret);
    load(location.pathname);
  });
  document.getElementById("signout").addEventListener("click", () => {
    sessionStorage.removeItem(TOKEN_KEY);
    load(location.pathname);
  });
}

// Calls the /v1 API with the signed-in token; the JSON answer, or throws its error text.
async function callApi(method, path, body) {
  const headers = { "Content-Type": "application/json" };
  if (token()) headers["X-Nomad-Token"] = token();
  const resp = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  const text = await resp.text();
  if (!resp.ok) {
    const err = new Error(text || resp.status + " " + resp.statusText);
    err.status = resp.status;
    throw err;
  }
  try { return JSON.parse(text); } catch (e) { return text; }
}

// Adds an element with text (never HTML) to `parent`.
function add(parent, tag, text, cls) {
  const el = document.createElement(tag);
  if (text !== undefined) el.textContent = text;
  if (cls) el.className = cls;
  parent.appendChild(el);
  return el;
}

function wireRunJob() {
  const form = document.getElementById("runjob");
  if (!form || form.dataset.wired) return;
  form.dataset.wired = "1";
  const out = document.getElementById("planresult");
  const run = document.getElementById("runbutton");
  let planned = null;
  document.getElementById("jobspec").addEventListener("input", () => { planned = null; run.disabled = true; });
  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    out.textContent = "Planning…";
    run.disabled = true;
    try {
      const hcl = document.getElementById("jobspec").value;
      const job = await callApi("POST", "/v1/jobs/parse", { JobHCL: hcl, Canonicalize: true });
      const ns = encodeURIComponent(job.Namespace || "default");
      const plan = await callApi("POST", "/v1/job/" + encodeURIComponent(job.ID) + "/plan?namespace=" + ns,
        { Job: job, Diff: true });
      out.textContent = "";
      const box = add(out, "div", undefined, "plan");
      add(box, "h2", "Plan for " + job.ID + " (" + ((plan.Diff && plan.Diff.Type) || "None").toLowerCase() + ")");
      const list = add(box, "ul");
      const updates = (plan.Annotations && plan.Annotations.DesiredTGUpdates) || {};
      for (const [group, u] of Object.entries(updates)) {
        const parts = [];
        for (const k of ["Place", "Stop", "Migrate", "InPlaceUpdate", "DestructiveUpdate", "Canary", "Ignore"]) {
          if (u[k]) parts.push(u[k] + " " + k.replace(/([a-z])([A-Z])/g, "$1 $2").toLowerCase());
        }
        add(list, "li", group + ": " + (parts.join(", ") || "no change"));
      }
      for (const [group, m] of Object.entries(plan.FailedTGAllocs || {})) {
        add(list, "li", group + ": cannot be placed (" + (m.NodesEvaluated || 0) + " nodes evaluated, "
          + (m.NodesExhausted || 0) + " exhausted)", "error");
      }
      for (const w of (plan.Warnings ? [plan.Warnings] : [])) add(box, "p", w, "notice");
      planned = job;
      run.disabled = false;
    } catch (err) {
      out.textContent = "";
      add(out, "p", err.message, "error");
    }
  });
  run.addEventListener("click", async () => {
    if (!planned) return;
    run.disabled = true;
    try {
      await callApi("POST", "/v1/jobs", { Job: planned });
      const dest = "/ui/jobs/" + encodeURIComponent(planned.ID) + "?namespace=" + encodeURIComponent(planned.Namespace || "default");
      history.pushState({}, "", dest);
      load(dest);
    } catch (err) {
      add(out, "p", err.message, "error");
      run.disabled = false;
    }
  });
}

// Buttons that act through the API (`data-action`), asked once more before anything is stopped.
document.addEventListener("click", async (e) => {
  const b = e.target.closest("button[data-action]");
  if (!b) return;
  if (b.dataset.action === "drain" || b.dataset.action === "eligibility") {
    const node = b.dataset.node;
    const status = b.parentElement.querySelector(".actionresult");
    let path, body, question;
    if (b.dataset.action === "drain") {
      const on = b.dataset.enable === "true";
      question = on ? "Drain this client? Its allocations move elsewhere within an hour." : null;
      path = "/v1/node/" + encodeURIComponent(node) + "/drain";
      body = on ? { DrainSpec: { Deadline: 3600e9, IgnoreSystemJobs: false }, MarkEligible: false }
                : { DrainSpec: null, MarkEligible: true };
    } else {
      const value = b.dataset.value;
      question = value === "ineligible" ? "Mark this client ineligible? Nothing new is placed on it." : null;
      path = "/v1/node/" + encodeURIComponent(node) + "/eligibility";
      body = { Eligibility: value };
    }
    if (question && !confirm(question)) return;
    b.disabled = true;
    try {
      await callApi("PUT", path, body);
      if (status) { status.textContent = "Done."; status.className = "actionresult"; }
    } catch (err) {
      if (status) { status.textContent = err.message; status.className = "actionresult error"; }
      b.disabled = false;
    }
    return;
  }
  if (b.dataset.action === "api") {
    // A write the page spelled out: method, path, JSON body, and the question to ask first.
    if (b.dataset.confirm && !confirm(b.dataset.confirm)) return;
    const status = b.parentElement.querySelector(".actionresult");
    b.disabled = true;
    try {
      await callApi(b.dataset.method || "POST", b.dataset.path,
        b.dataset.body ? JSON.parse(b.dataset.body) : undefined);
      report(b, status, "Done.", false);
    } catch (err) {
      report(b, status, err.message, true);
      b.disabled = false;
    }
    return;
  }
  if (b.dataset.action === "stop-job") {
    const id = b.dataset.job, ns = b.dataset.namespace || "default";
    if (!confirm("Stop job " + id + "? Its allocations are stopped.")) return;
    const status = b.parentElement.querySelector(".actionresult");
    b.disabled = true;
    try {
      await callApi("DELETE", "/v1/job/" + encodeURIComponent(id) + "?namespace=" + encodeURIComponent(ns));
      if (status) status.textContent = "Stop requested.";
    } catch (err) {
      if (status) { status.textContent = err.message; status.className = "actionresult error"; }
      b.disabled = false;
    }
  }
});

// Scaling a task group: the count typed, through /v1/job/:id/scale.
document.addEventListener("submit", async (e) => {
  const form = e.target.closest("form.scale");
  if (!form) return;
  e.preventDefault();
  const input = form.querySelector("input");
  const status = form.querySelector(".actionresult");
  const button = form.querySelector("button");
  const count = Number(input.value);
  if (!Number.isInteger(count) || count < 0) {
    report(form, status, "The count is a whole number, 0 or more.", true);
    return;
  }
  button.disabled = true;
  try {
    await callApi("POST", form.dataset.path, {
      Count: count, Target: { Group: form.dataset.group }, Message: "Scaled from the web UI",
    });
    report(form, status, "Scaled to " + count + ".", false);
  } catch (err) {
    report(form, status, err.message, true);
  }
  button.disabled = false;
});

// Variables: key/value rows written with check-and-set (a change made meanwhile is refused).
function varPath(path) { return path.split("/").map(encodeURIComponent).join("/"); }
function varUrl(path, ns, cas) {
  return "/v1/var/" + varPath(path) + "?namespace=" + encodeURIComponent(ns) + "&cas=" + cas;
}
function itemRow(tbody) {
  const tr = add(tbody, "tr");
  for (const name of ["key", "value"]) {
    const input = add(add(tr, "td"), "input");
    input.name = name;
    input.spellcheck = false;
    input.setAttribute("aria-label", name === "key" ? "Key" : "Value");
  }
  const rm = add(add(tr, "td"), "button", "Remove");
  rm.type = "button";
  rm.dataset.removeItem = "";
  return tr;
}
document.addEventListener("input", (e) => {
  const f = e.target.closest && e.target.closest("form.varedit");
  if (f) f.dataset.dirty = "1";
});
document.addEventListener("click", async (e) => {
  const addBtn = e.target.closest("button[data-add-item]");
  if (addBtn) {
    const row = itemRow(addBtn.closest("form").querySelector("table.items tbody"));
    row.querySelector("input").focus();
    return;
  }
  const rm = e.target.closest("button[data-remove-item]");
  if (rm) {
    const form = rm.closest("form");
    rm.closest("tr").remove();
    form.dataset.dirty = "1";
    return;
  }
  const del = e.target.closest("button[data-delete-var]");
  if (!del) return;
  const form = del.closest("form");
  const out = form.querySelector(".actionresult");
  if (!confirm("Delete variable " + form.dataset.path + "?")) return;
  // The page's live read would answer 404 once it is gone: stop it first.
  if (current) current.abort();
  try {
    await callApi("DELETE", varUrl(form.dataset.path, form.dataset.namespace, form.dataset.cas));
    form.dataset.dirty = "";
    history.pushState({}, "", "/ui/variables");
    load("/ui/variables");
  } catch (err) {
    report(form, out, err.status === 409
      ? "It changed since you opened it: reload to see the change before deleting."
      : err.message, true);
    banner("Live updates paused by the delete: reload to see the variable as it is now.");
  }
});
document.addEventListener("submit", async (e) => {
  const form = e.target.closest("form.varedit");
  if (!form) return;
  e.preventDefault();
  const out = form.querySelector(".actionresult");
  const field = (name) => { const i = form.querySelector("input[name=" + name + "]"); return i ? i.value.trim() : ""; };
  const path = form.dataset.path || field("path");
  const ns = form.dataset.namespace || field("namespace") || "default";
  const items = {};
  for (const row of form.querySelectorAll("table.items tbody tr")) {
    const k = row.querySelector("input[name=key]").value.trim();
    const v = row.querySelector("input[name=value]").value;
    if (!k && !v) continue;
    if (!k) { report(form, out, "Every value needs a key.", true); return; }
    if (Object.prototype.hasOwnProperty.call(items, k)) {
      report(form, out, "The key " + k + " is given twice.", true);
      return;
    }
    items[k] = v;
  }
  if (!path) { report(form, out, "The variable needs a path.", true); return; }
  if (!Object.keys(items).length) { report(form, out, "A variable needs at least one item.", true); return; }
  try {
    await callApi("PUT", varUrl(path, ns, form.dataset.cas), { Namespace: ns, Path: path, Items: items });
    form.dataset.dirty = "";
    const dest = "/ui/variables/" + varPath(path) + "?namespace=" + encodeURIComponent(ns);
    history.pushState({}, "", dest);
    load(dest);
  } catch (err) {
    if (err.status === 409) {
      report(form, out, form.dataset.cas === "0"
        ? "A variable already exists at " + path + ": open it to edit it."
        : "It changed since you opened it (someone else saved first): reload to see their change, then edit again.", true);
    } else {
      report(form, out, err.message, true);
    }
  }
});

function sleep(ms) { return new Promise((r) => setTimeout(r, ms)); }
function visible() {
  return new Promise((r) => {
    const on = () => { if (!document.hidden) { document.removeEventListener("visibilitychange", on); r(); } };
    document.addEventListener("visibilitychange", on);
  });
}

document.addEventListener("click", (e) => {
  const a = e.target.closest("a");
  if (!a || a.origin !== location.origin || !a.pathname.startsWith("/ui/") || a.target
      || a.hasAttribute("download") || e.ctrlKey || e.metaKey || e.shiftKey || e.button !== 0) return;
  e.preventDefault();
  history.pushState({}, "", a.pathname + a.search);
  load(a.pathname + a.search);
  view().focus();
});
window.addEventListener("popstate", () => load(location.pathname + location.search));
document.addEventListener("DOMContentLoaded", () => load(location.pathname + location.search));
setInterval(() => relativeTimes(view()), 15000);
