"""Findings 8 and 9 of the trust review: what /v1/kv, /v1/kv/stream and /metrics show, asked
with another tenant's key, and what polling them costs the engine. A tenant sees its own requests;
every other tenant's occupancy is the anonymous "other" (no request id, owners, fill or hash); only
an admin key (named in the keys file) sees every tenant and the block hashes. The views are built
from a snapshot the engine thread takes at most once per 100 ms, whoever polls."""
import json
import os
import shutil
import threading
import time

import requests

from attack_helpers import metric, private_dir
from tier_prompts import doc

KEYS = {"alice": "sk-alice-0123", "bob": "sk-bob-4567", "ops": "sk-ops-89ab"}


def keyed_server(start_server, d, *extra):
    path = os.path.join(d, "keys")
    with open(path, "w") as f:
        f.write("alice %s\nbob %s\nops %s admin\n" % (KEYS["alice"], KEYS["bob"], KEYS["ops"]))
    return start_server("--kv-cache-memory", "32MiB", "--max-model-len", "1024",
                        "--api-keys", path, *extra, api_key=False)


def h(who):
    return {"Authorization": "Bearer " + KEYS[who]}


class Running:
    """A long streamed request of one tenant, running while the test looks."""

    def __init__(self, server, who, i):
        self.r = requests.post(server.url + "/v1/completions", headers=h(who), stream=True,
                               timeout=120,
                               json={"prompt": doc(i, n=300), "max_tokens": 400,
                                     "ignore_eos": True, "stream": True,
                                     "cache_salt": who + "-salt"})
        self.lines = self.r.iter_lines()
        for line in self.lines:  # until the first token (keep-alive comments come before)
            if line.startswith(b"data: "):
                break

    def close(self):
        self.r.close()


def test_a_tenant_sees_its_own_requests_and_others_only_as_anonymous_occupancy(start_server):
    d = private_dir("kvs-sec-views-")
    try:
        # A host tier: cached blocks carry tier keys, the hashes /v1/kv shows admins.
        s = keyed_server(start_server, d, "--kv-offload-memory", "8MiB")
        a, b = Running(s, "alice", 1), Running(s, "bob", 2)
        try:
            kv_bob = s.get("/v1/kv", headers=h("bob")).json()
            kv_ops = s.get("/v1/kv", headers=h("ops")).json()
            text_bob = json.dumps(kv_bob)
            assert "alice" not in text_bob
            assert {q["tenant"].split("/")[0] for q in kv_bob["sequences"]} == {"bob"}
            others = [blk for blk in kv_bob["blocks"] if blk["tenant"] == "other"]
            assert others, "alice's blocks are not shown as occupancy"
            for blk in others:
                assert blk["owners"] is None and blk["fill"] is None and blk["hash"] is None
            assert all(blk["hash"] is None for blk in kv_bob["blocks"])
            assert kv_bob["summary"]["in_use"] == kv_ops["summary"]["in_use"]
            # The admin sees both tenants and the hashes.
            assert {q["tenant"].split("/")[0] for q in kv_ops["sequences"]} == {"alice", "bob"}
            assert any(blk["hash"] is not None for blk in kv_ops["blocks"])
            # /metrics: bob's series and "other"; the admin's: every tenant.
            m_bob = s.get("/metrics", headers=h("bob")).text
            m_ops = s.get("/metrics", headers=h("ops")).text
            assert 'tenant="alice' not in m_bob and 'tenant="bob' in m_bob
            assert 'tenant="other"' in m_bob
            assert 'tenant="alice' in m_ops and 'tenant="bob' in m_ops
            # The stream: bob's frames never name alice or a request of hers.
            alice_reqs = {q["request"] for q in kv_ops["sequences"]
                          if q["tenant"].startswith("alice")}
            frames = read_stream(s, "bob", 3)
            joined = "".join(frames)
            assert "alice" not in joined and '"other"' in joined
            for f in frames:
                for q in json.loads(f).get("seqs", []):
                    assert q[1] not in alice_reqs
            assert "alice" in "".join(read_stream(s, "ops", 2))
        finally:
            a.close()
            b.close()
        # A wrong key sees nothing at all.
        r = requests.get(s.url + "/v1/kv", headers={"Authorization": "Bearer nope"}, timeout=10)
        assert r.status_code == 401
    finally:
        shutil.rmtree(d, ignore_errors=True)


def read_stream(s, who, n):
    r = requests.get(s.url + "/v1/kv/stream", headers=h(who), stream=True, timeout=30)
    assert r.status_code == 200
    frames = []
    for line in r.iter_lines():
        if line.startswith(b"data: "):
            frames.append(line[6:].decode())
            if len(frames) >= n:
                break
    r.close()
    return frames


def test_public_metrics_name_no_tenant(start_server):
    d = private_dir("kvs-sec-pubm-")
    try:
        s = keyed_server(start_server, d, "--public-metrics")
        a = Running(s, "alice", 3)
        try:
            text = requests.get(s.url + "/metrics", timeout=10).text
            assert 'tenant="alice' not in text and 'tenant="bob' not in text
        finally:
            a.close()
    finally:
        shutil.rmtree(d, ignore_errors=True)


def test_polling_views_costs_the_engine_at_most_ten_snapshots_a_second(start_server):
    d = private_dir("kvs-sec-poll-")
    try:
        s = keyed_server(start_server, d)
        s.headers = lambda: h("ops")
        before = metric(s, "kvserve_kv_views_taken_total")
        stop = time.time() + 3
        polls = [0]

        def poll(route, who):
            sess = requests.Session()
            while time.time() < stop:
                sess.get(s.url + route, headers=h(who), timeout=10)
                polls[0] += 1

        threads = [threading.Thread(target=poll, args=(r, w)) for r in ("/v1/kv", "/metrics")
                   for w in ("alice", "bob")]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        taken = metric(s, "kvserve_kv_views_taken_total") - before
        assert polls[0] > 60
        assert taken <= 3 / 0.1 + 5, (taken, polls[0])
    finally:
        shutil.rmtree(d, ignore_errors=True)
