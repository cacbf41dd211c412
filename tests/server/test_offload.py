"""The KV offload tiers through the real server: warm restart across a process restart, a
corrupted extent recomputed to the same output and counted, a full disk tier that never fails a
request, extents of another KV format ignored, salts that never share, and a host-tier hit after
the pool evicted a prefix. Tier metrics and the /v1/kv tier summary are checked on the way."""
import os
import re
import subprocess
import tempfile
import threading

import pytest
import requests

from conftest import API_KEY, wait_until
from tier_prompts import POOL, complete, doc


def metric(s, name, tier):
    text = s.get("/metrics").text
    m = re.search(r"^%s\{tier=\"%s\"\} (\S+)$" % (re.escape(name), tier), text, re.M)
    assert m, f"{name}{{tier={tier}}} missing"
    return float(m.group(1))


@pytest.fixture
def tier_dir(start_server):
    """The disk tier's directory, removed only after every server of the test has exited: a
    server still running writes into it, and removing it first raced with that."""
    with tempfile.TemporaryDirectory(prefix="kvs-offload-e2e-") as d:
        yield d
        start_server.stop_all()


def extents(d):
    return [f for f in os.listdir(d) if f.endswith(".kvx")]


def disk_server(start_server, d, *extra):
    return start_server(*POOL, "--kv-offload-dir", d, "--kv-offload-disk-admit", "0", *extra)


def test_warm_restart_serves_a_seen_prefix_from_disk(start_server, tier_dir):
    s = disk_server(start_server, tier_dir)
    cold_text, cached = complete(s, doc(1))
    assert cached == 0
    assert s.get("/v1/kv").json()["tiers"]["disk"]["capacity_bytes"] == 4 << 30
    s.stop()  # SIGTERM: the blocks the pool still caches are written before exit
    assert s.proc.returncode == 0
    assert extents(tier_dir)

    s2 = disk_server(start_server, tier_dir)
    text, cached = complete(s2, doc(1))
    assert text == cold_text
    assert cached == 288  # every whole block before the last prompt token
    assert metric(s2, "kvserve_kv_offload_prefix_cache_hits_tokens_total", "disk") == 288
    assert metric(s2, "kvserve_kv_offload_blocks_loaded_total", "disk") == 18
    tiers = s2.get("/v1/kv").json()["tiers"]
    assert tiers["disk"]["hit_tokens"] == 288 and tiers["host"] is None
    # A prompt never seen is computed as usual.
    assert complete(s2, doc(2))[1] == 0


def test_a_corrupted_extent_is_recomputed_and_counted(start_server, tier_dir):
    s = disk_server(start_server, tier_dir)
    cold_text, _ = complete(s, doc(3))
    s.stop()
    for f in extents(tier_dir):
        with open(os.path.join(tier_dir, f), "r+b") as fh:
            fh.seek(-2000, os.SEEK_END)
            b = fh.read(1)
            fh.seek(-2000, os.SEEK_END)
            fh.write(bytes([b[0] ^ 0xFF]))
    s2 = disk_server(start_server, tier_dir)
    text, cached = complete(s2, doc(3))
    assert text == cold_text
    assert cached < 288  # the damaged extent's blocks were recomputed
    assert metric(s2, "kvserve_kv_offload_checksum_failures_total", "disk") >= 1
    # Once recomputed, the prefix is cached again as usual.
    assert complete(s2, doc(3)) == (cold_text, 288)


def test_a_full_disk_tier_never_fails_a_request(start_server, tier_dir):
    mnt = os.path.join(tier_dir, "small")
    os.mkdir(mnt)
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m,mode=0700", "tmpfs", mnt],
                             capture_output=True).returncode == 0
    try:
        # On a 1 MiB tmpfs the writes fail with ENOSPC; without mount rights, a capacity
        # smaller than one extent admits nothing. Either way every request succeeds.
        extra = [] if mounted else ["--kv-offload-disk-bytes", "100000"]
        s = start_server(*POOL, "--kv-offload-dir", mnt, "--kv-offload-disk-admit", "0",
                         "--kv-offload-memory", "2MiB", *extra)
        texts = {}
        for rnd in range(2):
            for i in range(6):  # 6 x 19 blocks through a 42-block pool and a 5-block host tier
                text, _ = complete(s, doc(10 + i))
                assert texts.setdefault(i, text) == text
        kv = s.get("/v1/kv").json()["tiers"]["disk"]
        if mounted:
            assert kv["errors"] == 1 and kv["admitting"] is False
            assert metric(s, "kvserve_kv_offload_errors_total", "disk") == 1
        else:
            assert kv["blocks"] == 0
        assert requests.get(s.url + "/health").status_code == 200
        s.stop()
        assert s.proc.returncode == 0
    finally:
        if mounted:
            subprocess.run(["umount", mnt])


def test_extents_of_another_kv_format_are_ignored(start_server, tier_dir):
    s = disk_server(start_server, tier_dir)
    complete(s, doc(4))
    s.stop()
    s2 = disk_server(start_server, tier_dir, "--kv-cache-dtype", "int8")
    _, cached = complete(s2, doc(4))
    assert cached == 0
    assert s2.get("/v1/kv").json()["tiers"]["disk"]["foreign_extents"] >= 1
    s2.stop()
    assert extents(tier_dir)  # left for the format that wrote them


def test_two_salts_never_share_a_tier(start_server, tier_dir):
    s = disk_server(start_server, tier_dir)
    text_a, _ = complete(s, doc(5), salt="tenant-a")
    s.stop()
    s2 = disk_server(start_server, tier_dir)
    assert complete(s2, doc(5), salt="tenant-b")[1] == 0
    assert complete(s2, doc(5))[1] == 0  # no salt is a salt of its own
    assert complete(s2, doc(5), salt="tenant-a") == (text_a, 288)


def test_the_host_tier_serves_what_the_pool_evicted(start_server):
    s = start_server(*POOL, "--kv-offload-memory", "64MiB")
    first, _ = complete(s, doc(20))
    for i in range(1, 5):  # 4 more documents push doc 20 out of the 42-block pool
        complete(s, doc(20 + i))
    assert s.get("/v1/kv").json()["summary"]["cached_free"] < 42
    text, cached = complete(s, doc(20))
    assert text == first and cached == 288
    assert metric(s, "kvserve_kv_offload_prefix_cache_hits_tokens_total", "host") >= 288
    assert metric(s, "kvserve_kv_offload_blocks_stored_total", "host") > 0
    text = s.get("/metrics").text
    assert 'kvserve_kv_offload_load_seconds_bucket{tier="host",le="+Inf"}' in text
    assert 'kvserve_kv_offload_decisions_total{tier="host",decision="load"}' in text
    assert s.get("/debug/integrity").json()["ok"] is True


def test_a_server_killed_while_writing_restarts_clean(start_server, tier_dir):
    # Write-through with one-block extents: every prefill writes to disk as it goes.
    flags = ["--kv-offload-policy", "write-through", "--kv-offload-extent-blocks", "1"]
    s = disk_server(start_server, tier_dir, *flags)
    texts = {i: complete(s, doc(30 + i))[0] for i in range(3)}
    def load():
        try:
            for i in range(6):
                complete(s, doc(40 + i))
        except (requests.RequestException, AssertionError):
            pass  # the server is killed under it

    # The writer thread may still hold the last extents of these three: wait until they are on
    # disk, or the kill below can land before they are and the check after it fails by chance.
    wait_until(lambda: s.get("/v1/kv").json()["tiers"]["disk"]["pending_blocks"] == 0,
               timeout=60, what="the first three documents' blocks to reach the disk tier")
    stored = metric(s, "kvserve_kv_offload_blocks_stored_total", "disk")
    t = threading.Thread(target=load, daemon=True)
    t.start()
    # Kill once the load's own blocks are reaching the disk: more of them are on the way.
    wait_until(lambda: metric(s, "kvserve_kv_offload_blocks_stored_total", "disk") > stored,
               timeout=60, what="the load's blocks to reach the disk tier", interval=0.02)
    s.proc.kill()  # SIGKILL mid-stream: writes in flight are lost, nothing else
    s.proc.wait()
    s2 = disk_server(start_server, tier_dir, *flags)
    kv = s2.get("/v1/kv").json()["tiers"]["disk"]
    assert kv["checksum_failures"] == 0 and kv["blocks"] > 0
    for i in range(3):  # what was written before the kill is served, verified, unchanged
        assert complete(s2, doc(30 + i)) == (texts[i], 288)
    assert s2.get("/v1/kv").json()["tiers"]["disk"]["checksum_failures"] == 0
    assert not [f for f in os.listdir(tier_dir) if f.endswith(".tmp")]
