// KvState: the page's copy of the KV pool, kept up to date by the frames of /v1/kv/stream
// (src/server/kv_frame.h has the format). A key frame replaces everything; a delta frame applies
// the runs of changed cells, the changed sequences and tenant labels, and the counters.
//
// Cell (32 bits): state = bits 0-1 (0 free, 1 cached-free, 2 in use, 3 loading), shared = bit 2,
// fill = bits 3-11, tenant slot = bits 12-31. A second plane, `groups`, holds the layer group
// of each block (0 when free). A sequence has one block table per layer group, each sent as
// [released, first, count, first, count, ...]: the leading entries a sliding group released,
// then the held blocks as runs of consecutive ids.

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
    this.groups = null;        // per block: its layer group
    this.seqs = new Map();     // seq id -> {id, request, sample, tokens, label, tables}
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
      this.groups = new Uint32Array(f.config.num_blocks);
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
    const groupRuns = f.groups || [];
    for (let k = 0; k + 2 < groupRuns.length; k += 3) {
      const first = groupRuns[k], count = groupRuns[k + 1];
      if (first + count > cells.length) continue;
      this.groups.fill(groupRuns[k + 2], first, first + count);
      if (!this.fullRepaint) this.dirtyRuns.push(first, count);
    }
    for (const [slot, label] of f.tenants) this.tenants.set(slot, label);
    for (const [id, request, sample, tokens, label, tables] of f.seqs) {
      const old = this.seqs.get(id);
      this.seqs.set(id, {id, request, sample, tokens, label, tables: tables ?? (old ? old.tables : [])});
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

  get numGroups() {
    return this.config ? this.config.layer_groups.length : 1;
  }

  // A sequence's held blocks, one array per layer group, each in table order.
  tables(id) {
    const s = this.seqs.get(id);
    if (!s) return [];
    return s.tables.map((r) => {
      const out = [];
      for (let k = 1; k + 1 < r.length; k += 2)
        for (let b = r[k]; b < r[k] + r[k + 1]; b++) out.push(b);
      return out;
    });
  }

  // Every block a sequence holds: its groups' tables one after the other.
  table(id) {
    return this.tables(id).flat();
  }

  // Blocks a sequence holds (all groups).
  static heldBlocks(s) {
    let n = 0;
    for (const r of s.tables) for (let k = 2; k < r.length; k += 2) n += r[k];
    return n;
  }

  // Sequences whose tables hold block b (its owners), with the group and b's position in that
  // group's table (released entries count: position = token position / block size).
  owners(b) {
    const out = [];
    for (const s of this.seqs.values()) {
      s.tables.forEach((r, group) => {
        let pos = r[0] || 0;
        for (let k = 1; k + 1 < r.length; k += 2) {
          const first = r[k], count = r[k + 1];
          if (b >= first && b < first + count) {
            out.push({seq: s, group, index: pos + (b - first)});
            return;
          }
          pos += count;
        }
      });
    }
    return out;
  }

  // Per layer group: blocks in use and cached-free.
  groupCounts() {
    const out = Array.from({length: this.numGroups}, () => ({in_use: 0, cached_free: 0}));
    if (!this.cells) return out;
    for (let i = 0; i < this.cells.length; i++) {
      const st = this.cells[i] & 3;
      if (st === FREE) continue;
      const g = out[this.groups[i]];
      if (!g) continue;
      if (st === CACHED) g.cached_free++; else g.in_use++;
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
