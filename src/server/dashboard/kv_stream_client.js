// KvStreamClient: reads GET /v1/kv/stream (server-sent events) with fetch() and a
// ReadableStream, because EventSource cannot send an Authorization header and an API key must
// never travel in a URL. Reconnects after a dropped connection (the server then starts again
// with a key frame); stops on 401 so the page can ask for a key.

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

export class KvStreamClient {
  // onFrame(frame, receivedAt), onStatus({state, message}); state is one of connecting, live,
  // reconnecting, unauthorized, busy, error.
  constructor(url, {onFrame, onStatus}) {
    this.url = url;
    this.onFrame = onFrame;
    this.onStatus = onStatus;
    this.key = null;
    this.controller = null;
    this.generation = 0;
  }

  // (Re)connects with this key (null: none). A previous connection is closed.
  start(key) {
    this.stop();
    this.key = key;
    const generation = ++this.generation;
    this.run(generation);
  }

  stop() {
    this.generation++;
    if (this.controller) this.controller.abort();
    this.controller = null;
  }

  async run(generation) {
    let delay = 250;
    while (generation === this.generation) {
      this.onStatus({state: 'connecting', message: 'connecting'});
      const controller = new AbortController();
      this.controller = controller;
      const headers = {Accept: 'text/event-stream'};
      if (this.key) headers.Authorization = 'Bearer ' + this.key;
      let res;
      try {
        res = await fetch(this.url, {headers, cache: 'no-store', signal: controller.signal});
      } catch (e) {
        if (generation !== this.generation) return;
        this.onStatus({state: 'reconnecting', message: 'server unreachable, retrying'});
        await sleep(delay);
        delay = Math.min(delay * 2, 4000);
        continue;
      }
      if (res.status === 401) {
        const message = await errorMessage(res, 'API key required');
        if (generation === this.generation) this.onStatus({state: 'unauthorized', message});
        return;
      }
      if (res.status === 429) {
        const message = await errorMessage(res, 'too many dashboards open');
        this.onStatus({state: 'busy', message});
        await sleep(5000);
        continue;
      }
      if (!res.ok || !res.body) {
        this.onStatus({state: 'error', message: `HTTP ${res.status}`});
        await sleep(2000);
        continue;
      }
      delay = 250;
      this.onStatus({state: 'live', message: 'live'});
      try {
        await this.read(res.body, generation);
      } catch (e) {
        // aborted, or the connection dropped: reconnect below unless stopped
      }
      if (generation !== this.generation) return;
      this.onStatus({state: 'reconnecting', message: 'stream ended, reconnecting'});
      await sleep(500);
    }
  }

  async read(body, generation) {
    const reader = body.pipeThrough(new TextDecoderStream()).getReader();
    let buffer = '';
    for (;;) {
      const {value, done} = await reader.read();
      if (done || generation !== this.generation) {
        reader.cancel().catch(() => {});
        return;
      }
      buffer += value;
      let end;
      while ((end = buffer.indexOf('\n\n')) >= 0) {
        const event = buffer.slice(0, end);
        buffer = buffer.slice(end + 2);
        let data = '';
        for (const line of event.split('\n'))
          if (line.startsWith('data: ')) data += line.slice(6);
        if (data) this.onFrame(JSON.parse(data), performance.now());
      }
    }
  }
}

async function errorMessage(res, fallback) {
  try {
    const body = await res.json();
    return (body && body.error && body.error.message) || fallback;
  } catch (e) {
    return fallback;
  }
}
