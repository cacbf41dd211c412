// The dashboard's charts, drawn by hand (no chart library): occupancy over time with preemption
// marks (canvas), prefix-cache hit rates by tenant and route, TTFT by prompt-length bucket and
// inter-token latency, the tokens-per-request histogram (DOM bars), and the capacity line.
// Text always goes in through textContent.

function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined) e.textContent = text;
  return e;
}

const pct = (x) => (x * 100).toFixed(x < 0.1 ? 1 : 0) + '%';
const commas = (n) => Math.round(n).toLocaleString('en-US');

export function formatBytes(b) {
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  while (b >= 1024 && i < units.length - 1) {
    b /= 1024;
    i++;
  }
  return (i ? b.toFixed(2) : String(b)) + ' ' + units[i];
}

export function formatSeconds(s) {
  if (s === null || s === undefined) return '–';
  return s < 1 ? (s * 1000).toFixed(s < 0.01 ? 1 : 0) + ' ms' : s.toFixed(2) + ' s';
}

// Stacked areas of in use / cached-free / free blocks over the last two minutes, with a red
// tick at each preemption (the count above it when more than one).
export function drawOccupancy(canvas, state, colors) {
  const dpr = window.devicePixelRatio || 1;
  const w = canvas.clientWidth, h = canvas.clientHeight;
  if (canvas.width !== Math.round(w * dpr) || canvas.height !== Math.round(h * dpr)) {
    canvas.width = Math.round(w * dpr);
    canvas.height = Math.round(h * dpr);
  }
  const c = canvas.getContext('2d');
  c.setTransform(dpr, 0, 0, dpr, 0, 0);
  c.clearRect(0, 0, w, h);
  const hist = state.history;
  if (!state.config || hist.length < 1) return;
  const total = state.config.num_blocks;
  const pad = {l: 44, r: 6, t: 8, b: 18};
  const pw = w - pad.l - pad.r, ph = h - pad.t - pad.b;
  const tEnd = hist[hist.length - 1].t, span = 120_000;
  const xOf = (t) => pad.l + pw * (1 - (tEnd - t) / span);
  const yOf = (v) => pad.t + ph * (1 - v / total);
  const layers = [
    {key: (p) => p.in_use, color: colors.used},
    {key: (p) => p.in_use + p.cached_free, color: colors.cached},
    {key: () => total, color: colors.free},
  ];
  let below = () => 0;
  for (const layer of layers) {
    c.beginPath();
    c.moveTo(xOf(hist[0].t), yOf(below(hist[0])));
    for (const p of hist) c.lineTo(xOf(p.t), yOf(layer.key(p)));
    for (let i = hist.length - 1; i >= 0; i--) c.lineTo(xOf(hist[i].t), yOf(below(hist[i])));
    c.closePath();
    c.fillStyle = layer.color;
    c.fill();
    below = layer.key;
  }
  c.fillStyle = colors.preempt;
  c.font = '10px system-ui, sans-serif';
  for (const m of state.preemptions) {
    const x = Math.round(xOf(m.t));
    c.fillRect(x - 1, pad.t, 2, ph);
    if (m.count > 1) c.fillText(String(m.count), x + 2, pad.t + 9);
  }
  c.fillStyle = colors.dim;
  c.strokeStyle = colors.line;
  c.lineWidth = 1;
  for (const f of [0, 0.5, 1]) {
    const y = Math.round(yOf(total * f)) + 0.5;
    c.beginPath();
    c.moveTo(pad.l, y);
    c.lineTo(pad.l + pw, y);
    c.stroke();
    c.fillText(pct(f), 4, y + 3);
  }
  for (const s of [120, 90, 60, 30, 0]) c.fillText(s ? `-${s}s` : 'now', xOf(tEnd - s * 1000) - (s ? 10 : 20), h - 4);
}

// Rows of "label | bar | hit% (recent%)" from counters {label, query, hit}.
export function renderHitRates(container, rows, before, colorOf) {
  const prev = new Map((before || []).map((r) => [r.label, r]));
  const children = [];
  for (const r of rows) {
    const rate = r.query ? r.hit / r.query : 0;
    const p = prev.get(r.label);
    const dq = p ? r.query - p.query : 0, dh = p ? r.hit - p.hit : 0;
    const row = el('div', 'row');
    row.dataset.label = r.label;
    row.dataset.rate = String(rate);
    row.append(el('span', 'label', r.label));
    const track = el('div', 'track'), fill = el('div', 'fill');
    fill.style.width = (rate * 100).toFixed(1) + '%';
    fill.style.background = colorOf(r.label);
    track.append(fill);
    row.append(track);
    row.append(el('span', 'value',
                  `${pct(rate)} (${dq > 0 ? pct(dh / dq) : '–'}) · ${commas(r.query)} tok`));
    children.push(row);
  }
  if (!children.length) children.push(el('div', 'dim small', 'no prompts yet'));
  container.replaceChildren(...children);
}

// TTFT p50 / p99 per prompt-length bucket and inter-token latency: a bar to p50, a tick at p99,
// on one shared linear scale per group.
export function renderLatency(container, metrics) {
  const groups = [
    {title: 'time to first token, by prompt tokens',
     rows: metrics.ttft.map((b) => ({label: b.bucket, ...b}))},
    {title: 'inter-token latency', rows: [{label: 'all samples', ...metrics.itl}]},
  ];
  const children = [];
  for (const g of groups) {
    children.push(el('h3', null, g.title));
    const max = Math.max(1e-3, ...g.rows.map((r) => r.p99 ?? 0));
    for (const r of g.rows) {
      const row = el('div', 'row');
      row.append(el('span', 'label', `${r.label} (${r.count})`));
      const track = el('div', 'track');
      if (r.p50 !== null) {
        const bar = el('div', 'p50');
        bar.style.width = ((r.p50 / max) * 100).toFixed(1) + '%';
        const tick = el('div', 'p99');
        tick.style.left = `calc(${((r.p99 / max) * 100).toFixed(1)}% - 2px)`;
        track.append(bar, tick);
      }
      row.append(track);
      row.append(el('span', 'value', `${formatSeconds(r.p50)} / ${formatSeconds(r.p99)}`));
      children.push(row);
    }
  }
  container.replaceChildren(...children);
}

// Histogram of (prompt + generated) / --max-model-len per finished sample: how much of the
// context limit requests actually use.
export function renderLengths(container, note, lf, maxModelLen) {
  const counts = lf.counts;
  const max = Math.max(1, ...counts);
  const children = [];
  for (let i = 0; i < counts.length; i++) {
    const lo = i === 0 ? 0 : lf.bounds[i - 1];
    const label = i < lf.bounds.length ? `≤${pct(lf.bounds[i])}` : `>${pct(lo)}`;
    const col = el('div', 'col');
    col.title = `${counts[i]} samples with ${i === 0 ? 'at most' : 'more than ' + pct(lo) + ' and at most'} ` +
                (i < lf.bounds.length ? pct(lf.bounds[i]) : '') + ' of --max-model-len';
    col.append(el('span', 'count', String(counts[i])));
    const bar = el('div', i >= lf.bounds.length ? 'bar over' : 'bar');
    bar.style.height = ((counts[i] / max) * 110).toFixed(0) + 'px';
    col.append(bar, el('span', 'edge', label));
    children.push(col);
  }
  container.replaceChildren(...children);
  note.textContent = `${commas(lf.count)} samples · of --max-model-len ${commas(maxModelLen)}`;
}

// KV bytes per token with the formula's numbers, the pool, the maximum concurrency at
// --max-model-len and what the KV-format and context levers would give on the same memory.
export function renderCapacity(container, cap) {
  const p1 = el('p');
  p1.append(el('b', null, 'KV bytes per token '),
            `layers x 2 x kv_heads x head_dim x bytes = ${cap.formula} (K ${cap.k_dtype}, V ${cap.v_dtype}${cap.layer_formats || ''})`);
  const p2 = el('p');
  p2.append(el('b', null, 'Pool '),
            `${formatBytes(cap.pool_bytes)} = ${commas(cap.pool_bytes)} B in ${commas(cap.num_blocks)} ` +
            `blocks of ${cap.block_size} tokens = ${commas(cap.pool_tokens)} tokens`);
  // What --kv-cache-memory holds besides the blocks, sized for --max-num-seqs sequences.
  const before = [];
  if (cap.key_tail_bytes > 0) before.push(`${commas(cap.key_tail_bytes)} B of key tails`);
  if (cap.recent_window_bytes > 0)
    before.push(`${commas(cap.recent_window_bytes)} B of recent window ` +
                `(--kv-recent-window ${cap.recent_window})`);
  if (before.length > 0)
    p2.append(`; before it, out of --kv-cache-memory ${formatBytes(cap.kv_cache_memory)}: ` +
              `${before.join(' and ')} for --max-num-seqs ${cap.max_num_seqs}`);
  const p3 = el('p');
  p3.append(el('b', null, 'Maximum concurrency '),
            `at --max-model-len ${commas(cap.max_model_len)}: ${cap.max_concurrency.toFixed(2)} requests ` +
            `(${commas(cap.fully_reserved)} fully reserved, ${commas(cap.blocks_per_request)} blocks each)`);
  const table = el('table');
  const head = el('tr');
  for (const h of ['lever', 'change', 'bytes / token', 'blocks', 'requests at max len', 'more'])
    head.append(el('th', null, h));
  table.append(head);
  for (const l of cap.levers) {
    const tr = el('tr');
    tr.append(el('td', null, l.name), el('td', null, l.applicable ? l.change : l.why_not));
    if (l.applicable) {
      tr.append(el('td', 'num', commas(l.bytes_per_token)), el('td', 'num', commas(l.num_blocks)),
                el('td', 'num', commas(l.fully_reserved)),
                el('td', 'num', (l.more_requests >= 0 ? '+' : '') + commas(l.more_requests)));
    }
    table.append(tr);
  }
  container.replaceChildren(p1, p2, p3, table);
}
