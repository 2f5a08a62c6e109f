"""The status page's HTML, CSS and JavaScript, all inline: the page loads nothing from anywhere
but ``status.json`` next to it (its Content-Security-Policy says so to the browser too).

``PAGE`` has one placeholder, ``__STATUS__``: the first status document (JSON, with ``</``
escaped), so the page shows the job before its first refresh. The script then fetches
``status.json`` every ``REFRESH_MS`` and draws it again.
"""

from __future__ import annotations

__all__ = ["PAGE", "REFRESH_MS"]

REFRESH_MS = 2000

_CSS = """
:root { --ok: #1a7f37; --bad: #cf222e; --warn: #9a6700; --muted: #57606a; --line: #d0d7de;
  --bar: #0969da; --moved: #bc4c00; font-family: system-ui, -apple-system, "Segoe UI",
  Helvetica, Arial, sans-serif; font-size: 14px; color: #1f2328; }
body { margin: 0; padding: 16px 24px; background: #f6f8fa; }
h1 { font-size: 20px; margin: 0 0 4px; } h2 { font-size: 15px; margin: 0 0 8px; }
.sub { color: var(--muted); margin-bottom: 12px; }
.grid { display: grid; grid-template-columns: repeat(auto-fit, minmax(150px, 1fr)); gap: 8px; }
.card, section { background: #fff; border: 1px solid var(--line); border-radius: 6px;
  padding: 10px 12px; }
section { margin-top: 12px; }
.card .k { color: var(--muted); font-size: 12px; } .card .v { font-size: 20px; font-weight: 600; }
.DONE { color: var(--ok); } .TIMED_OUT { color: var(--bad); } .NEW { color: var(--warn); }
.tree ul { list-style: none; margin: 0; padding-left: 18px; border-left: 1px dashed var(--line); }
.tree > ul { padding-left: 0; border: 0; }
.tree li { margin: 3px 0; } .loc { font-weight: 600; } .n { color: var(--muted); }
.proc { display: inline-block; border: 1px solid var(--line); border-radius: 4px;
  padding: 1px 6px; margin: 1px 4px 1px 0; background: #f6f8fa; }
.proc.gone { border-color: var(--bad); color: var(--bad); text-decoration: line-through; }
.bars .row { display: flex; align-items: center; gap: 8px; margin: 2px 0; }
.bars .label { width: 130px; overflow: hidden; text-overflow: ellipsis; white-space: nowrap; }
.bars .bar { height: 14px; background: var(--bar); border-radius: 2px; min-width: 1px; }
.bars .bar.moved { background: var(--moved); }
.timeline { display: flex; flex-wrap: wrap; gap: 6px; }
.chip { border: 1px solid var(--line); border-radius: 12px; padding: 2px 10px; background: #fff; }
.chip.DONE { border-color: var(--ok); } .chip.TIMED_OUT { border-color: var(--bad); }
.chip small { color: var(--muted); }
table { border-collapse: collapse; width: 100%; }
th, td { text-align: left; padding: 4px 8px; border-bottom: 1px solid var(--line); }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; }
#error { color: var(--bad); }
td.bad, span.bad { color: var(--bad); font-weight: 600; }
.streaming[hidden] { display: none; }
"""

_SCRIPT = """
"use strict";
const REFRESH_MS = __REFRESH__;
let refreshes = 0;
function el(tag, attrs, ...kids) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
  for (const kid of kids) node.append(kid instanceof Node ? kid : String(kid));
  return node;
}
function secs(v) {
  if (v === null || v === undefined) return "-";
  return v < 1 ? Math.round(v * 1000) + " ms" : v.toFixed(1) + " s";
}
function card(key, value, cls, id) {
  return el("div", {class: "card", id: id}, el("div", {class: "k"}, key),
            el("div", {class: "v " + (cls || "")}, value));
}
function treeNode(node, byId) {
  const li = el("li", {}, el("span", {class: "loc"}, node.name), " ",
                el("span", {class: "n"}, node.tasks + " tasks"));
  if (node.processors.length) {
    const procs = el("div", {});
    for (const pid of node.processors) {
      const p = byId[pid];
      procs.append(el("span", {class: "proc" + (p.live ? "" : " gone"), "data-processor": pid},
                      pid + ": " + p.tasks));
    }
    li.append(procs);
  }
  if (node.children.length) {
    const ul = el("ul", {});
    for (const child of node.children) ul.append(treeNode(child, byId));
    li.append(ul);
  }
  return li;
}
function bars(rows, cls, fmt) {
  const max = Math.max(1, ...rows.map(r => r[1]));
  const box = el("div", {class: "bars"});
  for (const [label, value, id] of rows) {
    box.append(el("div", {class: "row", "data-id": id},
      el("span", {class: "label", title: label}, label),
      el("span", {class: "bar " + (cls || ""), style: "width:" + (value / max * 60) + "%"}),
      el("span", {class: "n"}, fmt ? fmt(value) : value)));
  }
  return box;
}
function draw(s) {
  const byId = Object.fromEntries(s.processors.map(p => [p.id, p]));
  document.getElementById("job").textContent = "job " + s.job.name + "-" + s.job.id;
  const me = s.replica ? "this replica: " + s.replica.id + (s.replica.leading ? " (leader)"
                                                                                : " (follower)")
                       : "";
  document.getElementById("who").textContent =
      "leader: " + (s.leader.replica || "none") + " \\u00b7 " + me + " \\u00b7 " + s.job.folder +
      ", run " + s.job.run_id;
  const b = s.barrier;
  const cards = document.getElementById("cards");
  cards.replaceChildren(
    card("version in force", s.version.in_force ?? "-", "", "in-force"),
    card("latest version", s.version.latest ?? "-", "", "latest"),
    card("barrier " + (b ? b.version : ""), b ? b.state : "-", b ? b.state : "", "barrier"),
    card("live processors", s.processors.filter(p => p.live).length, "", "live"),
    card("tasks", s.tasks, "", "tasks"),
    card("warm ratio", s.warm_ratio === null ? "not reported"
                                             : Math.round(s.warm_ratio * 100) + "%", "", "warm"));
  if (b && b.state === "NEW") {
    const waiting = b.expected.filter(p => !b.joined.includes(p));
    cards.append(card("waiting for", waiting.join(", ") || "-", "NEW", "waiting"));
  }
  const tree = el("ul", {});
  for (const child of s.locations.children) tree.append(treeNode(child, byId));
  document.getElementById("tree").replaceChildren(tree);
  document.getElementById("per-processor").replaceChildren(
      bars(s.processors.map(p => [p.id, p.tasks, p.id])));
  const rebalances = s.rebalances.slice().reverse();
  const timeline = el("div", {class: "timeline"});
  for (const r of s.rebalances) {
    timeline.append(el("span", {class: "chip " + r.outcome, "data-version": r.version},
      "v" + r.version + " ", el("b", {class: r.outcome}, r.outcome), " ",
      el("small", {}, r.trigger)));
  }
  document.getElementById("timeline").replaceChildren(timeline);
  document.getElementById("moved").replaceChildren(
      bars(s.rebalances.map(r => ["v" + r.version, r.moved, "v" + r.version]), "moved"));
  const head = el("tr", {},
    ...["version", "decided", "trigger", "outcome"].map(h => el("th", {}, h)),
    ...["moved", "kept local", "debounce", "grouper", "publish", "barrier"].map(
        h => el("th", {class: "num"}, h)));
  const body = rebalances.map(r => el("tr", {"data-version": r.version},
    el("td", {}, r.version), el("td", {}, new Date(r.decided_at * 1000).toLocaleString()),
    el("td", r.note ? {title: r.note} : {}, r.trigger + (r.note ? " *" : "")),
    el("td", {class: r.outcome}, r.outcome),
    el("td", {class: "num moved"}, r.moved),
    el("td", {class: "num"}, r.with_locality ? r.kept_local + "/" + r.with_locality : "-"),
    ...["debounce", "grouper", "publish", "barrier"].map(
        p => el("td", {class: "num"}, secs(r.phases[p])))));
  document.getElementById("rebalances").replaceChildren(el("table", {}, head, ...body));
  drawBatches(s.batches || []);
  document.getElementById("updated").textContent = "updated " + new Date().toLocaleTimeString();
  document.body.setAttribute("data-refreshes", String(refreshes));
}
function size(n) {
  if (n < 1024) return n + " B";
  const units = ["KiB", "MiB", "GiB"];
  let i = 0;
  for (n /= 1024; n >= 1024 && i < units.length - 1; i += 1) n /= 1024;
  return n.toFixed(1) + " " + units[i];
}
function num(value, bad) { return el("td", {class: "num" + (bad ? " bad" : "")}, value); }
function drawBatches(batches) {
  for (const id of ["batch-seconds", "batches-box", "places-box"])
    document.getElementById(id).hidden = batches.length === 0;
  if (!batches.length) return;
  document.getElementById("batch-times").replaceChildren(
      bars(batches.map(b => ["batch " + b.batch, b.seconds, "b" + b.batch]), "", secs));
  const head = el("tr", {}, ...["batch", "seconds", "rows", "warm", "restored", "new",
      "bytes restored", "bytes written", "pinned"].map(h => el("th", {class: "num"}, h)),
      el("th", {}, "lag"));
  const rows = batches.slice().reverse().map(b => el("tr", {"data-batch": b.batch},
    num(b.batch), num(secs(b.seconds)), num(b.rows_in), num(b.warm + "/" + b.tasks),
    num(b.restored, b.restored > 0), num(b.new), num(size(b.bytes_restored)),
    num(size(b.bytes_written)),
    num(b.pinned_ok + "/" + b.pinned_total, b.pinned_ok < b.pinned_total),
    el("td", {}, Object.entries(b.lag).map(([p, n]) => p + ": " + n).join(", ") || "-")));
  document.getElementById("batches").replaceChildren(el("table", {}, head, ...rows));
  const last = batches[batches.length - 1];
  document.getElementById("places-title").textContent = "Tasks of batch " + last.batch;
  const phead = el("tr", {}, ...["task", "executor", "location", "state"].map(
      h => el("th", {}, h)), ...["restored", "written", "rows", "seconds"].map(
      h => el("th", {class: "num"}, h)));
  const prows = last.places.map(p => {
    const off = p.pinned_to !== null && p.executor !== p.pinned_to;
    return el("tr", {"data-task": p.task, "data-off": String(off)}, el("td", {}, p.task),
      el("td", off ? {class: "bad", title: "pinned to " + p.pinned_to} : {},
         (p.executor ?? "-") + (off ? " (pinned to " + p.pinned_to + ")" : "")),
      el("td", {}, p.location ?? "-"),
      el("td", {class: p.source === "restored" ? "bad" : ""}, p.source),
      num(size(p.bytes_restored)), num(size(p.bytes_written)), num(p.rows_in),
      num(secs(p.seconds)));
  });
  document.getElementById("places").replaceChildren(el("table", {}, phead, ...prows));
}
async function refresh() {
  try {
    const answer = await fetch("status.json", {cache: "no-store"});
    if (!answer.ok) throw new Error("status.json: HTTP " + answer.status);
    refreshes += 1;
    draw(await answer.json());
    document.getElementById("error").textContent = "";
  } catch (e) {
    document.getElementById("error").textContent = String(e);
  }
  setTimeout(refresh, REFRESH_MS);
}
draw(JSON.parse(document.getElementById("first").textContent));
setTimeout(refresh, REFRESH_MS);
"""

PAGE = (
    """<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; """
    """script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>affinity status</title>
<style>"""
    + _CSS
    + """</style></head>
<body>
<h1 id="job">job</h1>
<div class="sub"><span id="who"></span> &middot; <span id="updated"></span>
<span id="error"></span></div>
<div class="grid" id="cards"></div>
<section class="streaming" id="batches-box" hidden><h2>Last batches (streaming)</h2>
<div id="batches"></div></section>
<section class="streaming" id="places-box" hidden><h2 id="places-title">Tasks of the last batch</h2>
<div id="places"></div></section>
<section class="streaming" id="batch-seconds" hidden><h2>Seconds per batch</h2>
<div id="batch-times"></div></section>
<section><h2>Processors on the location tree</h2><div class="tree" id="tree"></div></section>
<section><h2>Tasks per processor</h2><div id="per-processor"></div></section>
<section><h2>Version timeline</h2><div id="timeline"></div></section>
<section><h2>Tasks moved per rebalance</h2><div id="moved"></div></section>
<section><h2>Last rebalances</h2><div id="rebalances"></div></section>
<script id="first" type="application/json">__STATUS__</script>
<script>"""
    + _SCRIPT.replace("__REFRESH__", str(REFRESH_MS))
    + """</script>
</body></html>
"""
)
