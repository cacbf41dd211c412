"""The dashboard (GET /dashboard) in a real browser: Debian's headless Chromium driven by Selenium
(pinned in scripts/install-deps), against `kvserve serve` under load.

Checked: the page loads with no console errors and fetches nothing but its own files and the
stream; a wrong API key is refused and the right one works (and never appears in a URL or the
server's log); the map has one cell per block of the pool; cells change colour while requests
run; two cache salts get different hues; clicking a running request highlights exactly its block
table (compared with /v1/kv); the page never polls /v1/kv; a 100,000-block pool keeps updating at
4+ updates/s. A screenshot is saved in the test's tmp dir (KVSERVE_DASHBOARD_SCREENSHOT=path
copies it, e.g. to docs/img/dashboard.png).

The browser has a dead proxy for everything but loopback, so any request to the network fails.
"""
import colorsys
import json
import os
import shutil
import threading
import time

import pytest
import requests

from conftest import API_KEY

webdriver = pytest.importorskip("selenium.webdriver")
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

CHROMIUM = shutil.which("chromium")
CHROMEDRIVER = shutil.which("chromedriver")
SYSTEM = "You are the support assistant of a library. " + " ".join(
    f"Rule {i}: answer topic {i} in one sentence." for i in range(12))


@pytest.fixture
def browser(tmp_path):
    if not CHROMIUM or not CHROMEDRIVER:
        pytest.skip("chromium / chromium-driver not installed (scripts/install-deps)")
    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for arg in ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                f"--user-data-dir={tmp_path / 'profile'}", "--window-size=1440,1100",
                "--no-first-run", "--no-default-browser-check", "--disable-extensions",
                "--disable-background-networking", "--disable-component-update",
                "--disable-sync", "--proxy-server=127.0.0.1:9"]:
        opts.add_argument(arg)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    service = Service(executable_path=CHROMEDRIVER, log_output=str(tmp_path / "chromedriver.log"))
    driver = webdriver.Chrome(service=service, options=opts)
    driver.set_script_timeout(30)
    yield driver
    driver.quit()


def js(driver, script, *args):
    return driver.execute_script(script, *args)


def wait_for(driver, script, timeout=30, what=None):
    WebDriverWait(driver, timeout, poll_frequency=0.1).until(
        lambda d: js(d, "return " + script), message=what or script)
    return js(driver, "return " + script)


def console_errors(driver):
    return [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]


def login(driver, key):
    box = driver.find_element(By.ID, "auth-key")
    box.clear()
    box.send_keys(key)
    driver.find_element(By.CSS_SELECTOR, "#auth button").click()


def chat(server, salt, max_tokens, question):
    body = {"model": "smol", "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True,
            "stream": True, "cache_salt": salt,
            "messages": [{"role": "system", "content": SYSTEM},
                         {"role": "user", "content": question}]}
    with requests.post(server.url + "/v1/chat/completions", json=body, headers=server.headers(),
                       stream=True, timeout=300) as r:
        assert r.status_code == 200, r.text
        for _ in r.iter_lines():
            pass


class Load:
    """Clients sending streaming chat requests with two cache salts until stopped."""

    def __init__(self, server, clients=4, max_tokens=48):
        self.stop = threading.Event()
        self.errors = []
        self.done = 0

        def client(k):
            i = 0
            while not self.stop.is_set():
                try:
                    chat(server, "salt-a" if k % 2 == 0 else "salt-b", max_tokens,
                         f"Question {k}-{i}: what does rule {i % 12} say?")
                    self.done += 1
                except Exception as e:  # noqa: BLE001 - reported by the test
                    self.errors.append(repr(e))
                i += 1

        self.threads = [threading.Thread(target=client, args=(k,), daemon=True)
                        for k in range(clients)]
        for t in self.threads:
            t.start()

    def finish(self):
        self.stop.set()
        for t in self.threads:
            t.join(timeout=300)
        assert not self.errors, self.errors


def http_count(server, route):
    text = server.get("/metrics").text
    total = 0
    for line in text.splitlines():
        if line.startswith("kvserve_http_requests_total{") and f'route="{route}"' in line:
            total += float(line.split()[-1])
    return total


def hue_of(rgb):
    h, _, _ = colorsys.rgb_to_hsv(*(c / 255 for c in rgb))
    return h * 360


def hue_distance(a, b):
    d = abs(a - b) % 360
    return min(d, 360 - d)


def open_dashboard(driver, server):
    driver.get(server.url + "/dashboard")
    wait_for(driver, "!document.getElementById('auth').hidden", what="the key prompt")


def test_dashboard_under_load(start_server, browser, tmp_path):
    server = start_server("--kv-cache-memory", "24MiB", "--max-model-len", "512",
                          "--max-num-seqs", "8")
    kv = server.get("/v1/kv").json()
    driver = browser
    open_dashboard(driver, server)
    assert js(driver, "return window.kvDashboard.ready()") is False

    # A wrong key is refused: the page says so and shows nothing.
    login(driver, "not-the-key")
    wait_for(driver, "document.getElementById('auth-error').textContent.includes('incorrect')",
             what="the wrong key to be refused")
    assert js(driver, "return document.getElementById('status').dataset.state") == "unauthorized"
    assert js(driver, "return window.kvDashboard.ready()") is False
    refused = console_errors(driver)
    assert all("401" in e["message"] for e in refused), refused  # the refused stream only

    # The right key: live, with one cell per block of the pool.
    login(driver, API_KEY)
    wait_for(driver, "window.kvDashboard.ready()", what="the first frame")
    assert js(driver, "return window.kvDashboard.state.cells.length") == kv["num_blocks"]
    assert js(driver, "return window.kvDashboard.map.n") == kv["num_blocks"]
    rect = js(driver, "return window.kvDashboard.cellRect(arguments[0])", kv["num_blocks"] - 1)
    size = js(driver, "const c = document.getElementById('map'); return [c.width, c.height]")
    assert rect["x"] + rect["size"] <= size[0] and rect["y"] + rect["size"] <= size[1]

    # Under load the cells change colour, and the page never polls /v1/kv.
    kv_polls = http_count(server, "/v1/kv")
    load = Load(server)
    hashes = set()
    deadline = time.time() + 20
    while time.time() < deadline and len(hashes) < 5:
        hashes.add(js(driver, """
            const c = document.getElementById('map');
            const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
            let h = 0;
            for (let i = 0; i < d.length; i += 4) h = (Math.imul(h, 31) + d[i] + 3 * d[i + 1] + 7 * d[i + 2]) | 0;
            return h;"""))
        time.sleep(0.2)
    assert len(hashes) >= 5, "the block map did not change while requests ran"
    assert http_count(server, "/v1/kv") == kv_polls

    # Clicking a running request lights up exactly its block table (checked against /v1/kv
    # taken before and after the page's frame, when the table did not change in between).
    matched = None
    for _ in range(60):
        before = server.get("/v1/kv").json()
        running = [s for s in before["sequences"] if len(s["blocks"]) >= 2]
        if not running:
            time.sleep(0.1)
            continue
        seq = running[0]
        frame = js(driver, "return window.kvDashboard.state.frame")
        try:
            wait_for(driver, f"window.kvDashboard.state.frame >= {frame + 2} && "
                             f"window.kvDashboard.state.seqs.has({seq['id']})", timeout=5)
            item = driver.find_element(By.CSS_SELECTOR, f"#requests li[data-seq='{seq['id']}']")
            if "selected" not in (item.get_attribute("class") or ""):
                item.click()
        except Exception:  # noqa: BLE001 - the request finished meanwhile: try another
            continue
        lit = js(driver, "return window.kvDashboard.highlighted()")
        selected = js(driver, "return window.kvDashboard.map.selected")
        after = server.get("/v1/kv").json()
        same = [s for s in after["sequences"] if s["id"] == seq["id"]]
        if selected == seq["id"] and same and same[0]["blocks"] == seq["blocks"]:
            assert lit == seq["blocks"], (lit, seq)
            matched = seq
            break
    assert matched, "no running request held still long enough to compare"
    overlay = js(driver, """
        const c = document.getElementById('map-overlay');
        const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
        let n = 0; for (let i = 3; i < d.length; i += 4) n += d[i] > 0; return n;""")
    assert overlay > 0, "the selection overlay is empty"
    time.sleep(1.2)  # the table is drawn out in order; let it finish for the screenshot
    shot = tmp_path / "dashboard.png"
    driver.save_screenshot(str(shot))
    if os.environ.get("KVSERVE_DASHBOARD_SCREENSHOT"):
        shutil.copy(shot, os.environ["KVSERVE_DASHBOARD_SCREENSHOT"])
    load.finish()

    # Two salts, two hues: the prefix blocks of each stay cached (or in use) after the load.
    js(driver, "window.kvDashboard.select(null)")
    time.sleep(0.5)
    cells = js(driver, """
        const s = window.kvDashboard.state, out = {};
        for (let i = 0; i < s.cells.length; i++) {
          const c = s.cells[i];
          if ((c & 3) === 0 || ((c >>> 3) & 511) === 0) continue;
          const label = s.tenants.get(c >>> 12);
          if (!(label in out)) out[label] = i;
        }
        return out;""")
    server_labels = {b["tenant"] for b in server.get("/v1/kv").json()["blocks"] if b["tenant"]}
    assert set(cells) <= server_labels, (cells, server_labels)
    salted = [label for label in cells if label.startswith("key-1/")]
    assert len(salted) >= 2, cells
    hues = [hue_of(js(driver, "return window.kvDashboard.cellPixel(arguments[0])", cells[label]))
            for label in salted[:2]]
    assert hue_distance(*hues) >= 30, (salted, hues)

    # Nothing but the page's own files and the stream; no console error once the key was right.
    urls = js(driver, "return performance.getEntriesByType('resource').map(e => e.name)")
    assert all(u.startswith(server.url + "/") for u in urls), urls
    assert all(API_KEY not in u for u in urls + [driver.current_url])
    assert console_errors(driver) == []
    assert not any(API_KEY in line for line in server.log), "the API key was logged"
    metrics = js(driver, "return window.kvDashboard.state.metrics")
    assert metrics["quantiles"] == "bucket-interpolated"
    assert sum(t["query"] for t in metrics["tenants"]) > 0
    perf = js(driver, "return window.kvDashboard.perf()")
    print("dashboard perf (small pool):", json.dumps(perf))


def test_large_pool_keeps_updating(start_server, browser):
    # 100,000 blocks of 1 token (2,304,000,000 B of KV, mapped lazily: untouched blocks cost
    # no memory).
    server = start_server("--kv-cache-memory", "2304000000", "--block-size", "1",
                          "--max-model-len", "512", "--max-num-seqs", "8")
    assert server.kv_summary()["free"] == 100_000
    driver = browser
    open_dashboard(driver, server)
    login(driver, API_KEY)
    wait_for(driver, "window.kvDashboard.ready()", what="the first frame")
    assert js(driver, "return window.kvDashboard.state.cells.length") == 100_000
    load = Load(server, clients=4, max_tokens=32)
    time.sleep(8)
    perf = js(driver, "return window.kvDashboard.perf()")
    load.finish()
    print("dashboard perf (100,000 blocks):", json.dumps(perf))
    assert perf["updates_per_s"] >= 4, perf
    assert console_errors(driver) == []


def test_stream_and_page_without_a_browser(server):
    page = requests.get(server.url + "/dashboard", timeout=10)
    assert page.status_code == 200
    assert page.headers["Content-Type"].startswith("text/html")
    csp = page.headers["Content-Security-Policy"]
    assert "default-src 'none'" in csp and "script-src 'self'" in csp
    assert "http" not in page.text.replace("http-equiv", "")  # no external URL at all
    # Every file of src/server/dashboard/ is served byte for byte from the binary.
    assets = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "src", "server",
                          "dashboard")
    names = sorted(os.listdir(assets))
    assert "dashboard.js" in names and "index.html" in names
    for name in names:
        r = requests.get(f"{server.url}/dashboard/{name}", timeout=10)
        assert r.status_code == 200, name
        with open(os.path.join(assets, name), "rb") as f:
            assert r.content == f.read(), name
        assert "https://" not in r.text and "http://" not in r.text, name
    assert requests.get(server.url + "/dashboard/nope.js", timeout=10).status_code == 404
    assert requests.get(server.url + "/dashboard/auth.json", timeout=10).json() == {
        "key_required": True}

    url = server.url + "/v1/kv/stream"
    assert requests.get(url, timeout=10).status_code == 401
    assert requests.get(url, headers={"Authorization": "Bearer wrong"}, timeout=10).status_code == 401
    streams = []
    try:
        for _ in range(4):
            r = requests.get(url, headers=server.headers(), stream=True, timeout=10)
            assert r.status_code == 200
            assert r.headers["Content-Type"].startswith("text/event-stream")
            streams.append(r)
        over = requests.get(url, headers=server.headers(), timeout=10)
        assert over.status_code == 429 and over.headers.get("Retry-After")
        first = None
        for line in streams[0].iter_lines():
            if line.startswith(b"data: "):
                first = json.loads(line[6:])
                break
        assert first["key"] is True
        kv = server.get("/v1/kv").json()
        assert first["config"]["num_blocks"] == kv["num_blocks"]
        assert first["config"]["capacity"]["num_blocks"] == kv["num_blocks"]
        assert first["config"]["capacity"]["bytes_per_token"] * kv["block_size"] == kv["block_bytes"]
    finally:
        for r in streams:
            r.close()
    # The places are given back once the streams close.
    deadline = time.time() + 10
    while time.time() < deadline:
        r = requests.get(url, headers=server.headers(), stream=True, timeout=10)
        status = r.status_code
        r.close()
        if status == 200:
            break
        time.sleep(0.3)
    assert status == 200
