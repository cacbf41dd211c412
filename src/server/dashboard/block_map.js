// BlockMap: one cell per KV block on a canvas, painted straight into an ImageData pixel buffer
// (a 100,000-block pool is 100,000 small squares: fillRect per cell would cost tens of
// milliseconds, pixel writes of the changed cells cost well under one). Only the cells a frame
// changed are repainted, and only the rows holding them are uploaded.
//
// A cell: free = dark grey; cached-free = the tenant's hue, dim; in use = the tenant's hue, the
// filled part bright from the bottom up (fill / block size), the rest dark; loading = amber
// stripes; shared (refcount > 1) = a white mark in the top-left corner. With several layer groups
// (sliding-window models) one pool serves them all; choosing a group (setGroup) paints the other
// groups' blocks in a flat grey. A second canvas on top draws the selected sequence's block
// tables: everything else dimmed, each group's blocks joined in table order by a line that is
// drawn out from the first block to the last.

import {BACKGROUND, FREE, LOADING, LOADING_DARK, OTHER_GROUP, SHARED_MARK} from './palette.js';
import {CACHED, IN_USE, LOADING as LOADING_STATE, STATE_NAMES, cellFill, cellShared, cellState,
        cellTenant} from './kv_state.js';

const REVEAL_MS = 900;

// "layer group 2: 3 layers, window 512" (config.layer_groups: [{group, layers, window}]).
export function groupName(config, g) {
  const d = config.layer_groups[g];
  if (!d) return `layer group ${g}`;
  return `layer group ${g}: ${d.layers} layers, ${d.window ? 'window ' + d.window : 'full attention'}`;
}

export class BlockMap {
  constructor({canvas, overlay, tooltip, wrap}, state, palette) {
    this.canvas = canvas;
    this.overlay = overlay;
    this.tooltip = tooltip;
    this.wrap = wrap;
    this.state = state;
    this.palette = palette;
    this.ctx = canvas.getContext('2d', {alpha: false});
    this.octx = overlay.getContext('2d');
    this.n = 0;
    this.cols = 1;
    this.cs = 1;
    this.gap = 0;
    this.image = null;
    this.pixels = null;
    this.selected = null;     // seq id
    this.selectedTables = []; // its block ids, per layer group, in table order
    this.selectedTable = [];  // all of them, group after group
    this.group = null;        // the layer group shown (null: all)
    this.revealStart = 0;
    this.onSelect = () => {};
    canvas.addEventListener('mousemove', (e) => this.hover(e));
    canvas.addEventListener('mouseleave', () => { this.tooltip.hidden = true; });
    canvas.addEventListener('click', (e) => this.click(e));
  }

  // Sizes the canvas for n blocks to the container's width.
  layout(n) {
    this.n = n;
    const width = Math.max(200, this.wrap.clientWidth);
    const targetHeight = n > 20000 ? 520 : 380;
    this.cs = Math.max(2, Math.min(28, Math.floor(Math.sqrt((width * targetHeight) / Math.max(1, n)))));
    this.gap = this.cs >= 5 ? 1 : 0;
    this.cols = Math.max(1, Math.floor(width / this.cs));
    const rows = Math.max(1, Math.ceil(n / this.cols));
    const w = this.cols * this.cs, h = rows * this.cs;
    for (const c of [this.canvas, this.overlay]) {
      c.width = w;
      c.height = h;
      c.style.width = w + 'px';
      c.style.height = h + 'px';
    }
    this.image = this.ctx.createImageData(w, h);
    this.pixels = new Uint32Array(this.image.data.buffer);
    this.pixels.fill(BACKGROUND);
  }

  cellRect(i) {
    return {x: (i % this.cols) * this.cs, y: Math.floor(i / this.cols) * this.cs,
            size: this.cs - this.gap};
  }

  cellAt(x, y) {
    const col = Math.floor(x / this.cs), row = Math.floor(y / this.cs);
    if (col < 0 || col >= this.cols || row < 0) return -1;
    const i = row * this.cols + col;
    return i < this.n ? i : -1;
  }

  paintCell(i) {
    const cell = this.state.cells[i];
    const {x, y, size} = this.cellRect(i);
    const w = this.image.width, px = this.pixels, cs = this.cs;
    let st = cellState(cell);
    let top = FREE, bottom = FREE, split = 0;
    const hidden = this.group !== null && st !== 0 && this.state.groups[i] !== this.group;
    if (hidden) {
      top = bottom = OTHER_GROUP;
      st = 0;
    } else if (st === IN_USE || st === CACHED) {
      const t = this.palette.tenant(cellTenant(cell));
      if (st === CACHED) {
        top = bottom = t.cached;
      } else {
        const bs = this.state.config.block_size;
        const fill = Math.min(cellFill(cell), bs);
        const filledRows = fill > 0 ? Math.max(1, Math.round((fill / bs) * size)) : 0;
        split = size - filledRows;
        top = t.unfilled;
        bottom = t.used;
      }
    }
    const mark = cellShared(cell) && !hidden ? Math.max(1, Math.floor(size / 3)) : 0;
    for (let dy = 0; dy < cs; dy++) {
      let o = (y + dy) * w + x;
      for (let dx = 0; dx < cs; dx++, o++) {
        if (dx >= size || dy >= size) {
          px[o] = BACKGROUND;
        } else if (dx < mark && dy < mark) {
          px[o] = SHARED_MARK;
        } else if (st === LOADING_STATE) {
          px[o] = ((dx + dy) & 2) ? LOADING : LOADING_DARK;
        } else {
          px[o] = dy < split ? top : bottom;
        }
      }
    }
  }

  // Repaints what changed since the last draw; returns the number of cells painted.
  draw() {
    if (!this.state.ready) return 0;
    const {full, runs} = this.state.takeDirty();
    if (full || this.n !== this.state.cells.length) {
      this.layout(this.state.cells.length);
      for (let i = 0; i < this.n; i++) this.paintCell(i);
      this.ctx.putImageData(this.image, 0, 0);
      this.drawOverlay();
      return this.n;
    }
    if (!runs.length) return 0;
    let painted = 0, rowMin = Infinity, rowMax = -1;
    for (let k = 0; k < runs.length; k += 2) {
      const first = runs[k], end = runs[k] + runs[k + 1];
      for (let i = first; i < end; i++) this.paintCell(i);
      painted += end - first;
      rowMin = Math.min(rowMin, Math.floor(first / this.cols));
      rowMax = Math.max(rowMax, Math.floor((end - 1) / this.cols));
    }
    const y = rowMin * this.cs, h = (rowMax - rowMin + 1) * this.cs;
    this.ctx.putImageData(this.image, 0, 0, 0, y, this.image.width, h);
    return painted;
  }

  // Shows one layer group's blocks (null: all groups).
  setGroup(group) {
    this.group = group;
    this.state.fullRepaint = true;
    this.draw();
  }

  // ---- selection: a sequence's block tables, in order ----

  setSelection(tables) {
    this.selectedTables = tables;
    this.selectedTable = tables.flat();
  }

  select(seqId) {
    this.selected = seqId;
    this.setSelection(seqId === null ? [] : this.state.tables(seqId));
    this.revealStart = performance.now();
    this.drawOverlay();
    this.onSelect(seqId);
  }

  // After a frame: follow the selected sequence's table (it grows, or is gone).
  refreshSelection() {
    if (this.selected === null) return;
    if (!this.state.seqs.has(this.selected)) {
      this.setSelection([]);
      this.drawOverlay();
      return;
    }
    const tables = this.state.tables(this.selected);
    const flat = tables.flat();
    const same = flat.length === this.selectedTable.length &&
                 flat.every((b, i) => b === this.selectedTable[i]);
    if (!same) {
      this.setSelection(tables);
      this.drawOverlay();
    }
  }

  get animating() {
    return this.selectedTable.length > 1 && performance.now() - this.revealStart < REVEAL_MS;
  }

  drawOverlay() {
    const c = this.octx, cs = this.cs, size = cs - this.gap;
    c.clearRect(0, 0, this.overlay.width, this.overlay.height);
    if (this.selected === null || !this.selectedTable.length) return;
    c.fillStyle = 'rgba(13, 17, 23, 0.72)';
    c.fillRect(0, 0, this.overlay.width, this.overlay.height);
    for (const b of this.selectedTable) {
      const r = this.cellRect(b);
      c.clearRect(r.x, r.y, size, size);
    }
    const progress = Math.min(1, (performance.now() - this.revealStart) / REVEAL_MS);
    for (const t of this.selectedTables) {
      if (t.length) this.drawTable(t, Math.max(1, Math.ceil(progress * t.length)));
    }
  }

  // One table's first `shown` blocks, outlined and joined in order (green dot = first).
  drawTable(t, shown) {
    const c = this.octx, cs = this.cs, size = cs - this.gap;
    const center = (b) => {
      const r = this.cellRect(b);
      return [r.x + size / 2, r.y + size / 2];
    };
    if (cs >= 6) {
      c.strokeStyle = 'rgba(255, 255, 255, 0.9)';
      c.lineWidth = 1;
      for (let i = 0; i < shown; i++) {
        const r = this.cellRect(t[i]);
        c.strokeRect(r.x + 0.5, r.y + 0.5, size - 1, size - 1);
      }
    }
    c.strokeStyle = 'rgba(255, 255, 255, 0.85)';
    c.lineWidth = Math.max(1, cs / 7);
    c.beginPath();
    const [x0, y0] = center(t[0]);
    c.moveTo(x0, y0);
    for (let i = 1; i < shown; i++) c.lineTo(...center(t[i]));
    c.stroke();
    c.fillStyle = '#3fb950';
    c.beginPath();
    c.arc(x0, y0, Math.max(2, cs / 3), 0, 2 * Math.PI);
    c.fill();
    const [x1, y1] = center(t[shown - 1]);
    c.fillStyle = '#f0f6fc';
    c.beginPath();
    c.arc(x1, y1, Math.max(2, cs / 3), 0, 2 * Math.PI);
    c.fill();
  }

  // ---- pointer ----

  hover(e) {
    const i = this.cellAt(e.offsetX, e.offsetY);
    if (i < 0 || !this.state.ready) {
      this.tooltip.hidden = true;
      return;
    }
    const lines = this.describe(i);
    this.tooltip.replaceChildren(...lines.map((text, k) => {
      const d = document.createElement('div');
      d.textContent = text;
      if (k === 0) d.style.fontWeight = '600';
      return d;
    }));
    this.tooltip.hidden = false;
    const wrapWidth = this.wrap.clientWidth;
    const left = Math.min(e.offsetX + 14, Math.max(0, wrapWidth - this.tooltip.offsetWidth - 4));
    this.tooltip.style.left = left + 'px';
    this.tooltip.style.top = (e.offsetY + 14) + 'px';
  }

  describe(i) {
    const cell = this.state.cells[i];
    const st = cellState(cell);
    const bs = this.state.config.block_size;
    const owners = this.state.owners(i);
    const lines = [`block ${i} · ${STATE_NAMES[st]}${cellShared(cell) ? ' · shared' : ''}`];
    if (st !== 0) {
      lines.push(`fill ${Math.min(cellFill(cell), bs)} / ${bs} tokens`);
      lines.push(`tenant ${this.state.tenants.get(cellTenant(cell)) ?? '?'}`);
      if (this.state.numGroups > 1) lines.push(groupName(this.state.config, this.state.groups[i]));
    }
    if (owners.length) {
      const names = owners.slice(0, 6).map(({seq, index}) =>
        `req ${seq.request}${seq.sample ? '.' + seq.sample : ''} (#${index})`);
      if (owners.length > 6) names.push(`+${owners.length - 6} more`);
      lines.push(`owners: ${names.join(', ')}`);
    } else if (st === CACHED) {
      lines.push('owners: none (kept for prefix hits until evicted)');
    }
    const tiers = this.state.config.lower_tiers || [];
    lines.push(tiers.length ? `lower tiers: ${tiers.join(', ')} (this block's copies there ` +
                              'are not tracked by the map)'
                            : 'lower tiers: none configured');
    return lines;
  }

  click(e) {
    const i = this.cellAt(e.offsetX, e.offsetY);
    const owners = i < 0 ? [] : this.state.owners(i);
    this.select(owners.length ? owners[0].seq.id : null);
  }
}
