"""The inline CSS and script of the review pages (:mod:`crawler.review.serve.pages`).

One script for both pages (``<body data-page="list|pair">``), vanilla JavaScript, nothing
loaded from elsewhere. Crawled strings reach the DOM only as ``textContent``; a link to the
live site is made only for an http(s) URL. POSTs send JSON with the page's token in
``X-Review-Token``; every answer's ``message`` (or ``error``) is shown in the status line.
"""

from __future__ import annotations

CSS = """
body{font:14px/1.45 system-ui,sans-serif;margin:1.5em auto;max-width:1400px;color:#222;
padding:0 1em}h1{font-size:1.4em}h2{font-size:1.1em;margin-top:1.5em;border-bottom:1px solid #ddd}
h3{font-size:1em;margin:.3em 0}.note{color:#666}.url{color:#666;font-size:.85em;
word-break:break-all;margin:.1em 0}
form#filters{display:flex;flex-wrap:wrap;gap:.5em 1.2em;margin:.5em 0 1em}
table{border-collapse:collapse;width:100%}td,th{padding:.25em .6em;border-bottom:1px solid #eee;
text-align:left;vertical-align:top}th button.sort{font:inherit;font-weight:600;border:0;
background:none;cursor:pointer;padding:0}td.n{text-align:right;font-variant-numeric:tabular-nums}
.arrow{color:#888;margin-left:.2em}.badge{display:inline-block;padding:0 .4em;border-radius:3px;
font-size:.85em}.correct{background:#d9f2dd}.wrong{background:#fbd9d9}.rule{background:#fff0c2}
#actions{display:flex;flex-wrap:wrap;gap:.5em;align-items:center;margin:1em 0 .3em}
#actions button{padding:.3em .8em}#status{min-height:1.4em;font-weight:600}
#status.error{color:#b00020}#facts th{width:7em}
.sides{display:grid;grid-template-columns:1fr 1fr;gap:1em}.side{min-width:0}
.title{font-weight:600;margin:.2em 0}.text{font:12px/1.4 ui-monospace,monospace;
border:1px solid #ddd;padding:.3em;white-space:pre-wrap;word-break:break-word}
.line.only{background:#fff0b3}.line mark{background:#f4a259;color:#000}
.pager button{padding:.2em .8em}
"""

SCRIPT = r"""
"use strict";
const TOKEN = document.querySelector('meta[name="review-token"]').content;

async function api(path, body) {
  const options = body === undefined ? {} : {
    method: "POST", body: JSON.stringify(body),
    headers: {"Content-Type": "application/json", "X-Review-Token": TOKEN}};
  const response = await fetch(path, options);
  const data = await response.json();
  if (!response.ok) throw new Error(data.error || response.statusText);
  return data;
}

function el(tag, text, className) {
  const node = document.createElement(tag);
  if (text !== undefined && text !== null) node.textContent = String(text);
  if (className) node.className = className;
  return node;
}

function liveLink(url, text) {
  let scheme = "";
  try { scheme = new URL(url).protocol; } catch (e) { scheme = ""; }
  if (scheme !== "http:" && scheme !== "https:") return el("span", text || url);
  const a = el("a", text || url);
  a.href = url;
  a.rel = "noopener noreferrer nofollow";
  return a;
}

function pairHref(url, other) {
  return "/pair?" + new URLSearchParams({url: url, other: other}).toString();
}

function reviewBadge(review) {
  if (!review) return el("span", "not reviewed", "note");
  const badge = el("span", review.verdict, "badge " + review.verdict);
  badge.title = (review.reviewed_at || "") + (review.note ? ": " + review.note : "");
  return badge;
}

// --- the drop list ---------------------------------------------------------------------------

const list = {sort: "distance", order: "desc", offset: 0, limit: 100, total: 0, timer: 0};

function listParams() {
  const params = new URLSearchParams(new FormData(document.getElementById("filters")));
  for (const key of ["sort", "order", "offset", "limit"]) params.set(key, list[key]);
  return params;
}

function dropRow(row) {
  const tr = el("tr");
  tr.dataset.url = row.url;
  tr.dataset.reason = row.reason;
  tr.dataset.distance = row.distance === null ? "" : row.distance;
  tr.append(el("td", row.distance === null ? "-" : row.distance, "n"), el("td", row.reason));
  const dropped = el("td");
  const open = el("a", row.title || "(no title)");
  open.href = pairHref(row.url, row.kept);
  open.className = "open";
  dropped.append(open, el("div", row.url, "url"));
  const kept = el("td");
  kept.append(el("div", row.kept_title || "(no title)"), el("div", "", "url"));
  kept.lastChild.append(liveLink(row.kept));
  const override = el("td");
  if (row.override) override.append(el("span", row.override, "badge rule"));
  const review = el("td");
  review.append(reviewBadge(row.review));
  tr.append(dropped, kept, el("td", row.time.replace("T", " ").slice(0, 19)), review, override);
  return tr;
}

function showList(data) {
  list.total = data.total;
  const body = document.querySelector("#drops tbody");
  body.replaceChildren(...data.rows.map(dropRow));
  const first = data.total ? data.offset + 1 : 0;
  const all = `(${data.all} dropped in all)`;
  document.getElementById("summary").textContent = data.total
    ? `rows ${first} to ${data.offset + data.rows.length} of ${data.total} matching ${all}`
    : `no drop matches ${all}`;
  document.getElementById("prev").disabled = data.offset === 0;
  document.getElementById("next").disabled = data.offset + data.rows.length >= data.total;
  for (const button of document.querySelectorAll("button.sort")) {
    const on = button.dataset.sort === list.sort;
    button.querySelector(".arrow").textContent = on ? (list.order === "asc" ? "▲" : "▼") : "";
    button.parentElement.setAttribute("aria-sort",
      on ? (list.order === "asc" ? "ascending" : "descending") : "none");
  }
}

async function loadList() {
  try {
    showList(await api("/api/drops?" + listParams().toString()));
  } catch (error) {
    const summary = document.getElementById("summary");
    summary.textContent = "error: " + error.message;
  }
}

function startList() {
  const form = document.getElementById("filters");
  form.addEventListener("submit", (event) => event.preventDefault());
  form.addEventListener("input", () => {
    clearTimeout(list.timer);
    list.timer = setTimeout(() => { list.offset = 0; loadList(); }, 250);
  });
  for (const button of document.querySelectorAll("button.sort")) {
    button.addEventListener("click", () => {
      const key = button.dataset.sort;
      list.order = key === list.sort && list.order === "desc" ? "asc" : "desc";
      list.sort = key;
      list.offset = 0;
      loadList();
    });
  }
  document.getElementById("prev").addEventListener("click", () => {
    list.offset = Math.max(0, list.offset - list.limit);
    loadList();
  });
  document.getElementById("next").addEventListener("click", () => {
    list.offset += list.limit;
    loadList();
  });
  loadList();
}

// --- one pair --------------------------------------------------------------------------------

const pair = {rules: []};

function status(text, isError) {
  const line = document.getElementById("status");
  line.textContent = text;
  line.className = isError ? "error" : "";
}

async function loadHistory() {
  const main = document.getElementById("pair");
  const data = await api("/api/history?" + new URLSearchParams(
    {url: main.dataset.url, other: main.dataset.other}).toString());
  pair.rules = data.overrides;
  const items = [];
  for (const rule of data.overrides) items.push(el("li", "override: " + rule.describe));
  for (const review of data.reviews) {
    const item = el("li");
    item.append(reviewBadge(review), el("span", ` ${review.decision} page marked ` +
      `${review.verdict} on ${review.reviewed_at.slice(0, 10)}` +
      (review.note ? `: ${review.note}` : "")));
    items.push(item);
  }
  if (!items.length) items.push(el("li", "not reviewed, no override", "note"));
  document.getElementById("history").replaceChildren(...items);
  document.querySelector('button[data-kind="remove"]').disabled = !pair.rules.length;
}

function actionBody(kind, value, url, other, note) {
  if (kind === "review") {
    return ["/api/review", {url: url, other: other, verdict: value, note: note}];
  }
  if (kind === "override") {
    const body = {action: value, target: url, note: note};
    if (value === "distinct") body.other = other;
    return ["/api/override", body];
  }
  const rule = pair.rules[0];
  return ["/api/override", {remove: true, target: rule.target, other: rule.other}];
}

async function act(button) {
  const main = document.getElementById("pair");
  const note = document.getElementById("note").value;
  const [path, body] = actionBody(button.dataset.kind, button.dataset.value,
                                  main.dataset.url, main.dataset.other, note);
  const buttons = document.querySelectorAll("#actions button");
  for (const b of buttons) b.disabled = true;
  try {
    const outcome = await api(path, body);
    status(outcome.message, false);
  } catch (error) {
    status(error.message, true);
  }
  for (const b of buttons) b.disabled = false;
  await loadHistory().catch((error) => status(error.message, true));
}

function startPair() {
  for (const button of document.querySelectorAll("#actions button")) {
    button.addEventListener("click", () => act(button));
  }
  loadHistory().catch((error) => status(error.message, true));
}

if (document.body.dataset.page === "list") startList(); else startPair();
"""
