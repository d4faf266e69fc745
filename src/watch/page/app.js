// The live page of `ringtrain watch` (its charts: charts.js). Everything it shows comes from the watcher's
// /api/state and /api/history, which hold the job's replies after the watcher checked them;
// the page still writes every value as text (textContent), never as markup.
"use strict";

const POLL_MS = 1000;

const view = {
  generation: null,  // the watcher's history generation the arrays below belong to
  lastSeq: 0,
  steps: [],         // step records, in step order
  evals: [],
  events: [],
  charts: {},
  chartKey: "",      // settings the charts were built for; rebuilt when they change
};

function $(id) { return document.getElementById(id); }

function setText(id, text) {
  const el = $(id);
  if (el.textContent !== text) el.textContent = text;
}

function fmt(v, digits) {
  return typeof v === "number" && isFinite(v) ? v.toFixed(digits) : "–";
}

function fmtBytes(b) {
  if (typeof b !== "number" || !isFinite(b)) return "–";
  const units = ["B", "KB", "MB", "GB", "TB"];
  let i = 0;
  while (b >= 1000 && i < units.length - 1) { b /= 1000; i++; }
  return b.toFixed(i ? 1 : 0) + " " + units[i];
}

function fmtDuration(s) {
  if (typeof s !== "number" || !isFinite(s) || s < 0) return "–";
  s = Math.round(s);
  const d = Math.floor(s / 86400), h = Math.floor(s / 3600) % 24, m = Math.floor(s / 60) % 60;
  if (d) return d + "d " + h + "h";
  if (h) return h + "h " + String(m).padStart(2, "0") + "m";
  if (m) return m + "m " + String(s % 60).padStart(2, "0") + "s";
  return s + "s";
}

// --- the history -------------------------------------------------------------------------

function addRecord(r) {
  if (typeof r !== "object" || r === null || typeof r.step !== "number") return;
  if (typeof r.event === "string") { view.events.push(r); return; }
  if ("val_bpb" in r) { view.evals.push(r); return; }
  // A step done again (a re-formed ring going on from an earlier step): the later ones go.
  while (view.steps.length && view.steps[view.steps.length - 1].step >= r.step) view.steps.pop();
  view.steps.push(r);
}

async function getJson(url) {
  const resp = await fetch(url, { cache: "no-store" });
  if (!resp.ok) throw new Error(url + ": HTTP " + resp.status);
  return resp.json();
}

async function readHistory(generation) {
  if (generation !== view.generation) {
    view.generation = generation;
    view.lastSeq = 0;
    view.steps = []; view.evals = []; view.events = [];
  }
  for (let page = 0; page < 64; page++) {
    const h = await getJson("/api/history?after=" + view.lastSeq);
    if (h.generation !== view.generation) { view.generation = null; return; }  // read again next poll
    for (const e of h.records) { addRecord(e.r); view.lastSeq = e.seq; }
    if (!h.more) return;
  }
}

// --- the charts --------------------------------------------------------------------------

function smoothed(values) {
  // nanochat's smoothing: an exponential moving average with bias correction.
  const beta = 0.9, out = [];
  let ema = 0, n = 0;
  for (const v of values) {
    if (typeof v !== "number" || !isFinite(v)) { out.push(null); continue; }
    ema = beta * ema + (1 - beta) * v;
    n++;
    out.push(ema / (1 - Math.pow(beta, n)));
  }
  return out;
}

function positive(values, logY) {
  return logY ? values.map(v => (typeof v === "number" && v > 0 ? v : null)) : values;
}

function settings() {
  return { x: $("x-axis").value, logX: $("log-x").checked, logY: $("log-y").checked };
}

function xOf(r, s) { return s.x === "tokens" ? r.tokens : r.step; }

function rankIds() {
  const ids = new Set();
  for (const r of view.steps)
    (r.ranks || []).forEach((e, i) => ids.add(typeof e.rank === "number" ? e.rank : i));
  return [...ids].sort((a, b) => a - b);
}

// Membership events as dashed vertical lines on every curve.
function eventLines(s) {
  return {
    hooks: {
      draw: [u => {
        const ctx = u.ctx;
        ctx.save();
        ctx.setLineDash([4, 4]);
        ctx.lineWidth = 1;
        for (const ev of view.events) {
          let x = ev.step;
          if (s.x === "tokens") {
            const at = view.steps.find(r => r.step >= ev.step);
            if (!at) continue;
            x = at.tokens;
          }
          const px = u.valToPos(x, "x", true);
          if (!isFinite(px) || px < u.bbox.left || px > u.bbox.left + u.bbox.width) continue;
          ctx.strokeStyle = ev.event === "rank_lost" ? "#c0392b" : "#27ae60";
          ctx.beginPath();
          ctx.moveTo(px, u.bbox.top);
          ctx.lineTo(px, u.bbox.top + u.bbox.height);
          ctx.stroke();
          ctx.fillStyle = ctx.strokeStyle;
          ctx.font = "11px sans-serif";
          ctx.fillText((ev.event === "rank_lost" ? "lost " : "joined ") + ev.rank, px + 3, u.bbox.top + 12);
        }
        ctx.restore();
      }],
    },
  };
}

function buildCharts(s, ranks) {
  for (const c of Object.values(view.charts)) c.destroy();
  view.charts = {
    loss: makeChart("chart-loss", [
      { label: "loss", stroke: "#9bb7d4", width: 1 },
      { label: "smoothed", stroke: COLORS[0], width: 2 }], s, null, [eventLines(s)]),
    bpb: makeChart("chart-bpb", [{ label: "val bpb", stroke: COLORS[1], width: 2, points: { show: true } }], s, null, [eventLines(s)]),
    speed: makeChart("chart-speed", [
      { label: "tok/s", stroke: COLORS[2], width: 2 },
      { label: "MFU %", stroke: COLORS[3], width: 1, scale: "pct" }], s, { pct: { distr: 1 } }, [eventLines(s)]),
    ranks: makeChart("chart-ranks", ranks.flatMap((r, i) => [
      { label: "rank " + r + " step", stroke: COLORS[i % COLORS.length], width: 2 },
      { label: "rank " + r + " network", stroke: COLORS[i % COLORS.length], width: 1, dash: [5, 3] }]), s, null, [eventLines(s)]),
  };
}

function drawCharts() {
  const s = settings(), ranks = rankIds();
  const key = JSON.stringify([s, ranks]);
  if (key !== view.chartKey) { buildCharts(s, ranks); view.chartKey = key; }
  const steps = s.logX ? view.steps.filter(r => xOf(r, s) > 0) : view.steps;
  const xs = steps.map(r => xOf(r, s));
  const loss = steps.map(r => r.loss);
  view.charts.loss.setData([xs, positive(loss, s.logY), positive(smoothed(loss), s.logY)]);
  const evals = view.evals.filter(r => typeof r.val_bpb === "number" && (!s.logX || xOf(r, s) > 0));
  view.charts.bpb.setData([evals.map(r => xOf(r, s)), positive(evals.map(r => r.val_bpb), s.logY)]);
  view.charts.speed.setData([xs, positive(steps.map(r => r.tok_per_s), s.logY),
                             steps.map(r => (typeof r.mfu === "number" ? 100 * r.mfu : null))]);
  const perRank = [xs];
  for (const id of ranks) {
    const stepT = [], commT = [];
    for (const r of steps) {
      const list = r.ranks || [];
      const e = list.find((x, i) => (typeof x.rank === "number" ? x.rank : i) === id);
      stepT.push(e ? e.step_s : null);
      commT.push(e ? e.comm_s : null);
    }
    perRank.push(positive(stepT, s.logY), positive(commT, s.logY));
  }
  view.charts.ranks.setData(perRank);
}

// --- the facts and the ranks ----------------------------------------------------------------

function showState(st) {
  const conn = $("connection");
  conn.dataset.reachable = st.reachable ? "true" : "false";
  setText("connection", st.message);
  const s = st.status || {};
  setText("step", typeof s.step === "number" ? String(s.step) : "–");
  setText("steps", typeof s.steps === "number" ? String(s.steps) : "–");
  setText("last-loss", fmt(s.loss, 4));
  $("last-loss").dataset.value = typeof s.loss === "number" ? String(s.loss) : "";
  $("step").dataset.value = typeof s.step === "number" ? String(s.step) : "";
  setText("val-bpb", fmt(s.val_bpb, 4));
  setText("eta", fmtDuration(s.eta_s));
  setText("tokps", fmt(s.tok_per_s, 0));
  setText("mfu", typeof s.mfu === "number" ? (100 * s.mfu).toFixed(1) + "%" : "–");
  setText("lr", fmt(s.lr_mult, 3));
  setText("bytes", fmtBytes(s.bytes_sent));
  setText("epoch", typeof s.epoch === "number" ? String(s.epoch) : "–");
  const cp = s.last_checkpoint;
  setText("checkpoint", cp && typeof cp.step === "number" ? "step " + cp.step + (cp.dir ? " (" + cp.dir + ")" : "") : "–");
  setText("history-note", st.stride > 1 ? "long run: the watcher keeps every " + st.stride + "th step" : "");
  showRanks(s, st.reachable);
  showEvents();
}

function showRanks(s, reachable) {
  const addresses = s.addresses || [];
  const members = s.members || [];
  const times = {};
  (s.ranks || []).forEach((e, i) => { times[typeof e.rank === "number" ? e.rank : i] = e; });
  const n = Math.max(addresses.length, members.length, (s.ranks || []).length);
  const body = $("ranks");
  const rows = [];
  for (let r = 0; r < n; r++) {
    const m = members.find(x => x.rank === r);
    let state = m ? m.state : (times[r] ? "live" : "?");
    if (!reachable) state = "unknown";
    const t = times[r] || {};
    const tr = document.createElement("tr");
    const cells = [String(r), addresses[r] || "?", state, fmt(t.step_s, 2), fmt(t.comm_s, 2)];
    cells.forEach((text, i) => {
      const td = document.createElement("td");
      td.textContent = text;
      if (i === 2) { td.id = "rank-state-" + r; td.className = "state-" + state; }
      tr.appendChild(td);
    });
    rows.push(tr);
  }
  body.replaceChildren(...rows);
}

function showEvents() {
  const items = view.events.slice(-50).map(ev => {
    const li = document.createElement("li");
    li.textContent = "step " + ev.step + ": rank " + ev.rank + (ev.event === "rank_lost" ? " lost" : " joined") +
                     (typeof ev.world === "number" ? " (" + ev.world + " ranks)" : "");
    return li;
  });
  $("events").replaceChildren(...items);
}

// --- the loop and the stop button --------------------------------------------------------

async function poll() {
  try {
    const st = await getJson("/api/state");
    await readHistory(st.generation);
    showState(st);
    drawCharts();
    document.body.dataset.updated = String(Date.now());
  } catch (e) {
    $("connection").dataset.reachable = "false";
    setText("connection", "the watcher does not answer (" + e.message + "); is ringtrain watch still running?");
  }
  setTimeout(poll, POLL_MS);
}

$("stop").addEventListener("click", async () => {
  if (!confirm("Stop the job? Every rank saves a checkpoint and exits; --resume goes on from there.")) return;
  const button = $("stop");
  button.disabled = true;
  try {
    // The custom header makes a browser refuse to send this from any other site's page.
    const resp = await fetch("/api/stop", { method: "POST", headers: { "X-Ringtrain-Stop": "yes" } });
    setText("connection", "stop: " + (await resp.text()));
  } catch (e) {
    setText("connection", "stop failed: " + e.message);
  }
  button.disabled = false;
});

for (const id of ["x-axis", "log-x", "log-y"]) $(id).addEventListener("change", drawCharts);
poll();
