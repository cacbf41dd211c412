// KvState: the page's copy of the KV pool, kept up to date by the frames of /v1/kv/stream
// (src/server/kv_frame.h has the format). A key frame replaces everything; a delta frame applies
// the runs of changed cells, the changed sequences and tenant labels, and the counters.
//
// Cell (32 bits): state = bits 0-1 (0 free, 1 cached-free, 2 in use, 3 loading), shared = bit 2,
// fill = bits 3-11, tenant slot = bits 12-31.

export const FREE = 0, CACHED = 1, IN_USE = 2, LOADING = 3;
export const STATE_NAMES = ['free', 'cached-free', 'in use', 'loading'];

export const cellState = (c) => c & 3;
export const cellShared = (c) => (c >>> 2) & 1;
export const cellFill = (c) => (c >>> 3) & 511;
export const cellTenant = (c) => c >>> 12;

const HISTORY_MS = 120_000;  // the occupancy chart's window
const METRICS_HISTORY_MS = 60_000;

export class KvState {
  constructor() {
    this.config = null;
    this.cells = null;
    this.seqs = new Map();     // seq id -> {id, request, sample, tokens, label, ranges}
    this.tenants = new Map();  // slot -> label
    this.occ = null;
    this.history = [];         // {t, free, cached_free, in_use}
    this.preemptions = [];     // {t, count}
    this.metrics = null;
    this.metricsHistory = [];  // {t, metrics}
    this.frame = 0;
    this.frameMs = 0;
    this.cost = null;          // {view, encode} microseconds the server spent on the last frame
    this.dirtyRuns = [];       // [first, count, ...] cells to repaint
    this.fullRepaint = true;
    this.seqsChanged = true;
    this.configChanged = false;
  }

  get ready() {
    return this.cells !== null;
  }

  // Applies one frame. Returns false (and ignores it) when it is a delta before any key frame.
  apply(f) {
    if (f.key) {
      this.config = f.config;
      this.cells = new Uint32Array(f.config.num_blocks);
      this.seqs.clear();
      this.tenants.clear();
      this.history = [];
      this.preemptions = [];
      this.fullRepaint = true;
      this.configChanged = true;
      this.dirtyRuns = [];
    } else if (!this.cells) {
      return false;
    }
    const cells = this.cells;
    const runs = f.cells;
    for (let k = 0; k + 2 < runs.length; k += 3) {
      const first = runs[k], count = runs[k + 1];
      if (first + count > cells.length) continue;  // never from a correct server
      cells.fill(runs[k + 2], first, first + count);
      if (!this.fullRepaint) this.dirtyRuns.push(first, count);
    }
    for (const [slot, label] of f.tenants) this.tenants.set(slot, label);
    for (const [id, request, sample, tokens, label, ranges] of f.seqs) {
      const old = this.seqs.get(id);
      this.seqs.set(id, {id, request, sample, tokens, label, ranges: ranges ?? (old ? old.ranges : [])});
    }
    for (const id of f.gone) this.seqs.delete(id);
    if (f.seqs.length || f.gone.length || f.key) this.seqsChanged = true;
    this.recordOccupancy(f);
    if (f.metrics) {
      this.metrics = f.metrics;
      this.metricsHistory.push({t: f.ms, metrics: f.metrics});
      while (this.metricsHistory.length > 2 && this.metricsHistory[0].t < f.ms - METRICS_HISTORY_MS)
        this.metricsHistory.shift();
    }
    this.cost = f.cost_us;
    this.frame = f.frame;
    this.frameMs = f.ms;
    return true;
  }

  recordOccupancy(f) {
    const o = f.occ;
    const prev = this.occ;
    if (prev && !f.key) {
      const before = prev.preempt_recompute + prev.preempt_swap;
      const now = o.preempt_recompute + o.preempt_swap;
      if (now > before) this.preemptions.push({t: f.ms, count: now - before});
    }
    this.occ = o;
    this.history.push({t: f.ms, free: o.free, cached_free: o.cached_free, in_use: o.in_use});
    const cutoff = f.ms - HISTORY_MS;
    let drop = 0;
    while (drop < this.history.length - 1 && this.history[drop].t < cutoff) drop++;
    if (drop) this.history.splice(0, drop);
    while (this.preemptions.length && this.preemptions[0].t < cutoff) this.preemptions.shift();
  }

  // The metrics as they were about `ms` ago (the oldest kept if the history is shorter).
  metricsAgo(ms) {
    const h = this.metricsHistory;
    if (!h.length) return null;
    const target = h[h.length - 1].t - ms;
    let best = h[0];
    for (const e of h) if (e.t <= target) best = e;
    return best.metrics;
  }

  // A sequence's block table, in order.
  table(id) {
    const s = this.seqs.get(id);
    if (!s) return [];
    const out = [];
    for (let k = 0; k + 1 < s.ranges.length; k += 2)
      for (let b = s.ranges[k]; b < s.ranges[k] + s.ranges[k + 1]; b++) out.push(b);
    return out;
  }

  // Sequences whose table holds block b (its owners), with b's position in each table.
  owners(b) {
    const out = [];
    for (const s of this.seqs.values()) {
      let pos = 0;
      for (let k = 0; k + 1 < s.ranges.length; k += 2) {
        const first = s.ranges[k], count = s.ranges[k + 1];
        if (b >= first && b < first + count) {
          out.push({seq: s, index: pos + (b - first)});
          break;
        }
        pos += count;
      }
    }
    return out;
  }

  // Slot of a tenant label (for colouring charts by tenant), or -1.
  slotOf(label) {
    for (const [slot, l] of this.tenants) if (l === label) return slot;
    return -1;
  }

  takeDirty() {
    const full = this.fullRepaint;
    const runs = this.dirtyRuns;
    this.fullRepaint = false;
    this.dirtyRuns = [];
    return {full, runs};
  }
}
