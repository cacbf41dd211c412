// The dashboard page: connects the stream (kv_stream_client.js) to the page's copy of the pool
// (kv_state.js), and draws it once per animation frame when something changed: the block map
// (block_map.js), the request list, the charts and the capacity line (charts.js).
//
// It also measures itself: update latency (wall clock when the server took the view to the
// animation frame that drew it; the same clock only when browser and server share a machine),
// the work per drawn frame, the wait from a frame's arrival to its drawing, and updates per
// second; probeFrames() measures the gaps between animation frames.
// window.kvDashboard exposes these and the state to tests (tests/server/test_dashboard.py).

import {BlockMap, groupName} from './block_map.js';
import {drawOccupancy, renderCapacity, renderHitRates, renderLatency, renderLengths} from './charts.js';
import {KvState} from './kv_state.js';
import {KvStreamClient} from './kv_stream_client.js';
import {Palette} from './palette.js';

const $ = (id) => document.getElementById(id);
const KEY_STORE = 'kvserve-dashboard-key';  // sessionStorage: this tab only, never a URL
const LIST_EVERY_MS = 250;
const MAX_LIST = 400;

class Samples {
  constructor(n = 600) {
    this.n = n;
    this.values = [];
  }
  push(v) {
    this.values.push(v);
    if (this.values.length > this.n) this.values.shift();
  }
  quantile(q) {
    if (!this.values.length) return null;
    const s = [...this.values].sort((a, b) => a - b);
    return s[Math.min(s.length - 1, Math.floor(q * s.length))];
  }
  max() {
    return this.values.length ? Math.max(...this.values) : null;
  }
}

class Perf {
  constructor() {
    this.latency = new Samples();   // ms, view taken -> drawn
    this.work = new Samples();      // ms of our work in a drawn animation frame
    this.apply = new Samples();     // ms to apply one frame to the state
    this.wait = new Samples();      // ms from a frame's arrival to the animation frame drawing it
    this.arrivals = [];             // performance.now() of applied frames (last 5 s)
    this.steps = [];                // the engine's step count in those frames
    this.updates = 0;
    this.longTasks = 0;
    this.firstDraw = null;          // ms after navigation when the first frame was drawn
    try {
      new PerformanceObserver((l) => { this.longTasks += l.getEntries().length; })
          .observe({type: 'longtask', buffered: true});
    } catch (e) { /* not supported */ }
  }
  arrived(now, steps) {
    this.updates++;
    this.arrivals.push(now);
    this.steps.push(steps);
    while (this.arrivals.length && this.arrivals[0] < now - 5000) {
      this.arrivals.shift();
      this.steps.shift();
    }
  }
  rate() {
    const a = this.arrivals;
    return a.length < 2 ? 0 : (a.length - 1) / ((a[a.length - 1] - a[0]) / 1000);
  }
  // Engine steps per second over the same frames: updates are taken between steps, so when a
  // step takes longer than the server's tick, this bounds the update rate.
  stepRate() {
    const a = this.arrivals, s = this.steps;
    return a.length < 2 ? 0 : (s[s.length - 1] - s[0]) / ((a[a.length - 1] - a[0]) / 1000);
  }
  summary() {
    const q = (s) => ({p50: s.quantile(0.5), p99: s.quantile(0.99), max: s.max(), n: s.values.length});
    return {updates: this.updates, updates_per_s: this.rate(), steps_per_s: this.stepRate(),
            latency_ms: q(this.latency),
            work_ms: q(this.work), apply_ms: q(this.apply), arrival_to_draw_ms: q(this.wait),
            long_tasks: this.longTasks, first_draw_ms: this.firstDraw,
            server_cost_us: state.cost};
  }
}

const state = new KvState();
const palette = new Palette();
const perf = new Perf();
const css = getComputedStyle(document.documentElement);
const colors = {
  used: css.getPropertyValue('--used').trim(), cached: css.getPropertyValue('--cached').trim(),
  free: css.getPropertyValue('--free').trim(), preempt: css.getPropertyValue('--preempt').trim(),
  dim: css.getPropertyValue('--dim').trim(), line: css.getPropertyValue('--line').trim(),
};
const map = new BlockMap({canvas: $('map'), overlay: $('map-overlay'), tooltip: $('tooltip'),
                          wrap: $('map-wrap')}, state, palette);
let dirty = false;
let lastList = 0;
let listDirty = true;
let shownMetrics = null;
let currentKey = null;
let pendingMs = [];  // server times of frames applied but not drawn yet
let firstPendingAt = null;  // performance.now() when the oldest undrawn frame arrived
let rafPending = false;
let listTimer = null;

// Animation frames only when there is something to draw (an idle page costs nothing).
function schedule() {
  if (!rafPending) {
    rafPending = true;
    requestAnimationFrame(tick);
  }
}

function tenantColor(label) {
  const slot = state.slotOf(label);
  return slot < 0 ? colors.dim : palette.tenant(slot).usedCss;
}

function onFrame(frame, receivedAt) {
  const t0 = performance.now();
  if (!state.apply(frame)) return;
  perf.apply.push(performance.now() - t0);
  perf.arrived(receivedAt, frame.occ.steps);
  if (frame.key) pendingMs = [];
  pendingMs.push(frame.ms);
  if (firstPendingAt === null) firstPendingAt = receivedAt;
  dirty = true;
  schedule();
}

function onStatus({state: s, message}) {
  const el = $('status');
  el.dataset.state = s;
  el.textContent = message;
  const auth = $('auth');
  if (s === 'unauthorized') {
    auth.hidden = false;
    $('auth-error').textContent = currentKey ? message : '';
    sessionStorage.removeItem(KEY_STORE);
    currentKey = null;
    $('auth-key').focus();
  } else if (s === 'live') {
    auth.hidden = true;
    if (currentKey) sessionStorage.setItem(KEY_STORE, currentKey);
  }
}

const client = new KvStreamClient('/v1/kv/stream', {onFrame, onStatus});

$('auth').addEventListener('submit', (e) => {
  e.preventDefault();
  const key = $('auth-key').value.trim();
  $('auth-key').value = '';
  $('auth-error').textContent = '';
  currentKey = key || null;
  client.start(currentKey);
});

function applyConfig() {
  const c = state.config;
  $('model').textContent = `${c.model} · ${c.num_blocks.toLocaleString('en-US')} blocks of ` +
                           `${c.block_size} tokens · --max-model-len ${c.max_model_len}`;
  const tiers = c.lower_tiers.length ? c.lower_tiers.join(', ') : 'none';
  $('map-groups').textContent = `${c.layer_groups.length === 1 ? 'one layer group (all layers, ' +
      'full attention)' : c.layer_groups.length + ' layer groups share the pool'} · lower tiers: ${tiers}`;
  renderGroupFilter();
  renderCapacity($('capacity'), c.capacity);
  state.configChanged = false;
  shownMetrics = null;
}

// With several layer groups: one button per group (and "all") that shows only that group's
// blocks, each with its blocks in use and cached-free now.
function renderGroupFilter() {
  const box = $('group-filter');
  const n = state.numGroups;
  if (n <= 1) {
    box.replaceChildren();
    box.hidden = true;
    if (map.group !== null) map.setGroup(null);
    return;
  }
  box.hidden = false;
  if (box.children.length !== n + 1) {
    const buttons = [];
    for (let g = -1; g < n; g++) {
      const b = document.createElement('button');
      b.type = 'button';
      b.dataset.group = g < 0 ? 'all' : String(g);
      b.title = g < 0 ? 'every layer group' : groupName(state.config, g);
      b.addEventListener('click', () => {
        map.setGroup(g < 0 ? null : g);
        renderGroupFilter();
      });
      buttons.push(b);
    }
    box.replaceChildren(...buttons);
  }
  const counts = state.groupCounts();
  for (const b of box.children) {
    const g = b.dataset.group === 'all' ? null : Number(b.dataset.group);
    let text;
    if (g === null) {
      text = 'all groups';
    } else {
      const d = state.config.layer_groups[g];
      text = `g${g} ${d.window ? 'win ' + d.window : 'full'} · ${counts[g].in_use} in use` +
             (counts[g].cached_free ? ` · ${counts[g].cached_free} cached` : '');
    }
    if (b.textContent !== text) b.textContent = text;
    b.classList.toggle('selected', g === map.group);
  }
}

const rows = new Map();  // seq id -> its <li>, reused so hover and clicks survive updates

function requestRow(s) {
  let li = rows.get(s.id);
  if (!li) {
    li = document.createElement('li');
    li.dataset.seq = String(s.id);
    li.dataset.request = String(s.request);
    const hue = document.createElement('span');
    hue.className = 'hue';
    const name = document.createElement('span');
    const size = document.createElement('span');
    size.className = 'dim';
    li.append(hue, name, size);
    li.addEventListener('click', () => map.select(s.id === map.selected ? null : s.id));
    rows.set(s.id, li);
  }
  const [hue, name, size] = li.children;
  hue.style.background = tenantColor(s.label);
  const title = `req ${s.request}${s.sample ? '.' + s.sample : ''}  ${s.label}`;
  if (name.textContent !== title) name.textContent = title;
  const text = `${s.tokens} tok · ${KvState.heldBlocks(s)} blk`;
  if (size.textContent !== text) size.textContent = text;
  li.classList.toggle('selected', s.id === map.selected);
  return li;
}

function renderRequests() {
  const seqs = [...state.seqs.values()].sort((a, b) => a.request - b.request || a.sample - b.sample);
  $('requests-count').textContent = `${seqs.length} sequences`;
  for (const id of rows.keys()) if (!state.seqs.has(id)) rows.delete(id);
  const items = seqs.slice(0, MAX_LIST).map(requestRow);
  const list = $('requests');
  const same = items.length === list.children.length && items.every((li, i) => list.children[i] === li);
  if (!same) list.replaceChildren(...items);
  listDirty = false;
  lastList = performance.now();
}

function renderSelection() {
  const out = $('selection');
  const s = map.selected === null ? null : state.seqs.get(map.selected);
  if (!s) {
    out.textContent = map.selected === null ? '' : 'the selected request has finished';
    return;
  }
  const t = map.selectedTable;
  let shared = 0;
  for (const b of t) if ((state.cells[b] >>> 2) & 1) shared++;
  const bs = state.config.block_size;
  const partial = s.tokens % bs;
  const groups = state.numGroups > 1 ? ` of ${state.numGroups} layer groups (one line each)` : '';
  out.textContent = `req ${s.request}${s.sample ? ' sample ' + s.sample : ''} · tenant ${s.label} · ` +
      `${s.tokens} tokens in ${t.length} blocks${groups} (green = first, white = last) · ${shared} ` +
      `shared with other requests${partial ? ` · last block ${partial}/${bs} filled` : ''}`;
}

map.onSelect = () => {
  schedule();
  listDirty = true;
  renderRequests();
  renderSelection();
};

function renderMetrics() {
  const m = state.metrics;
  if (!m || m === shownMetrics) return;
  shownMetrics = m;
  const before = state.metricsAgo(30_000);
  renderHitRates($('hit-tenants'), m.tenants, before && before.tenants, tenantColor);
  renderHitRates($('hit-routes'), m.routes.map((r) => ({label: r.route, ...r})),
                 before && before.routes.map((r) => ({label: r.route, ...r})), () => colors.used);
  renderLatency($('latency'), m);
  renderLengths($('lengths'), $('len-note'), m.length_fraction, state.config.max_model_len);
}

function renderSummary() {
  const o = state.occ;
  const n = state.config.num_blocks;
  const pre = o.preempt_recompute + o.preempt_swap;
  $('map-summary').textContent =
      `${o.in_use} in use · ${o.cached_free} cached-free · ${o.free} free · ` +
      `${o.running} running · ${o.waiting} waiting · ${o.swapped} swapped`;
  $('occ-now').textContent = `${((o.in_use / n) * 100).toFixed(1)}% in use · ` +
                             `${pre} preemptions · ${o.evictions} evictions`;
}

function renderPerf() {
  const p = perf.summary();
  const f = (v) => (v === null ? '–' : v.toFixed(1));
  const cost = state.cost ? ` · server ${state.cost.view + state.cost.encode} µs/upd` : '';
  $('perf').textContent = `${p.updates_per_s.toFixed(1)} upd/s (engine ${p.steps_per_s.toFixed(1)} ` +
                          `steps/s) · latency p50 ${f(p.latency_ms.p50)} ms · ` +
                          `draw p99 ${f(p.work_ms.p99)} ms${cost}`;
}

function tick(now) {
  rafPending = false;
  if ((dirty || map.animating) && state.ready) {
    const t0 = performance.now();
    const fresh = dirty;
    dirty = false;
    if (state.configChanged) applyConfig();
    map.draw();
    if (state.seqsChanged) {
      state.seqsChanged = false;
      map.refreshSelection();
      listDirty = true;
    }
    if (map.animating) map.drawOverlay();
    if (fresh) {
      if (listDirty && now - lastList > LIST_EVERY_MS) renderRequests();
      renderSelection();
      renderSummary();
      if (state.numGroups > 1) renderGroupFilter();
      drawOccupancy($('occupancy'), state, colors);
      renderMetrics();
      const drawnAt = Date.now();
      for (const ms of pendingMs) perf.latency.push(drawnAt - ms);
      pendingMs = [];
      if (firstPendingAt !== null) perf.wait.push(t0 - firstPendingAt);
      firstPendingAt = null;
    }
    perf.work.push(performance.now() - t0);
    if (perf.firstDraw === null) perf.firstDraw = performance.now();
  }
  if (map.animating) schedule();
  if (listDirty && state.ready && listTimer === null) {
    // The list is throttled: draw it a little later even if no frame comes.
    listTimer = setTimeout(() => {
      listTimer = null;
      if (listDirty) renderRequests();
    }, LIST_EVERY_MS);
  }
}

setInterval(renderPerf, 500);

// Frame times while the page runs as usual: requests animation frames back to back for `ms`
// and reports the gaps between them (16.7 ms at 60 Hz when nothing blocks the main thread).
function probeFrames(ms) {
  return new Promise((resolve) => {
    const gaps = new Samples(100000);
    let last = 0;
    const end = performance.now() + ms;
    const step = (t) => {
      if (last) gaps.push(t - last);
      last = t;
      if (t < end) {
        requestAnimationFrame(step);
      } else {
        resolve({n: gaps.values.length, p50: gaps.quantile(0.5), p99: gaps.quantile(0.99),
                 max: gaps.max()});
      }
    };
    requestAnimationFrame(step);
  });
}

let resizeTimer = null;
window.addEventListener('resize', () => {
  clearTimeout(resizeTimer);
  resizeTimer = setTimeout(() => {
    state.fullRepaint = true;
    dirty = true;
    schedule();
  }, 150);
});

// For tests and the curious (read-only views and the selection).
window.kvDashboard = {
  state,
  map,
  ready: () => state.ready,
  perf: () => perf.summary(),
  probeFrames,
  highlighted: () => [...map.selectedTable],
  highlightedByGroup: () => map.selectedTables.map((t) => [...t]),
  groupCounts: () => state.groupCounts(),
  select: (seq) => map.select(seq),
  cellRect: (i) => map.cellRect(i),
  // [r, g, b] of the bottom-right pixel of a cell (the filled part of an in-use cell).
  cellPixel: (i) => {
    const r = map.cellRect(i);
    const d = map.ctx.getImageData(r.x + r.size - 1, r.y + r.size - 1, 1, 1).data;
    return [d[0], d[1], d[2]];
  },
};

async function connect() {
  currentKey = sessionStorage.getItem(KEY_STORE);
  let keyRequired = false;
  try {
    const res = await fetch('/dashboard/auth.json', {cache: 'no-store'});
    keyRequired = res.ok && (await res.json()).key_required === true;
  } catch (e) { /* the stream will report the server as unreachable */ }
  if (keyRequired && !currentKey) {
    onStatus({state: 'unauthorized', message: 'API key required'});
    return;
  }
  client.start(currentKey);
}

connect();
