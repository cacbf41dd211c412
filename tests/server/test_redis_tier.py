"""The Redis KV tier (L4) through real servers and a real redis-server: a replica loads a prefix
only its peer computed and produces the output of a cold run; Redis stopped mid-load fails no
request and opens the breaker, and hits resume once it is back; a value corrupted with redis-cli
is detected, counted and recomputed; salts never share; another KV format never loads."""
import re
import threading
import time

from conftest import wait_until
from redis_fixture import redis_server  # noqa: F401 (fixture)
from tier_prompts import POOL, complete, doc

WHOLE = 288  # whole blocks before the last token of a 300-token prompt


def metric(s, name, labels='tier="remote"'):
    text = s.get("/metrics").text
    m = re.search(r"^%s\{%s\} (\S+)$" % (re.escape(name), re.escape(labels)), text, re.M)
    assert m, f"{name}{{{labels}}} missing"
    return float(m.group(1))


def replica(start_server, redis, *extra):
    return start_server(*POOL, "--kv-remote", redis.url, "--kv-tier-secret-file",
                        redis.secret_file, *extra)


def wait_written(s, blocks, timeout=10):
    """Waits until the replica's Redis writer has stored `blocks` blocks and has none queued."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        if (metric(s, "kvserve_kv_offload_blocks_stored_total") >= blocks and
                s.get("/v1/kv").json()["tiers"]["remote"]["queued_writes"] == 0):
            return
        time.sleep(0.05)
    raise AssertionError("the replica's blocks never reached Redis")


def test_a_replica_loads_the_prefix_its_peer_computed(start_server, redis_server):
    a = replica(start_server, redis_server)
    b = replica(start_server, redis_server)
    text_a, cached = complete(a, doc(1))
    assert cached == 0
    wait_written(a, 18)
    assert len(redis_server.keys()) >= 18
    text_b, cached_b = complete(b, doc(1))
    assert text_b == text_a  # loaded KV gives the output of a cold run
    assert cached_b == WHOLE
    assert metric(b, "kvserve_kv_offload_prefix_cache_hits_tokens_total") == WHOLE
    assert metric(b, "kvserve_kv_offload_blocks_loaded_total") == 18
    assert metric(b, "kvserve_kv_offload_decisions_total", 'tier="remote",decision="load"') >= 1
    tiers = b.get("/v1/kv").json()["tiers"]
    assert tiers["remote"]["hit_tokens"] == WHOLE
    assert tiers["remote"]["instances"][0]["breaker"] == "closed"
    assert tiers["remote"]["bytes_read"] > 0
    # A prompt nobody has seen is computed as usual.
    assert complete(b, doc(2))[1] == 0


def test_redis_stopped_mid_load_fails_no_request_and_hits_resume(start_server, redis_server):
    a = replica(start_server, redis_server, "--kv-remote-timeout-ms", "20")
    errors, done = [], []
    stop = threading.Event()

    def load(k):
        i = 0
        while not stop.is_set() and i < 200:
            try:
                complete(a, doc(100 + 10 * k + i % 10, n=120), max_tokens=4)
                done.append(1)
            except AssertionError as e:  # a non-200 answer
                errors.append(str(e))
            i += 1

    threads = [threading.Thread(target=load, args=(k,)) for k in range(2)]
    for t in threads:
        t.start()
    try:
        # Mid-load: requests are completing and their blocks reaching Redis.
        wait_until(lambda: errors or (len(done) >= 4 and
                                      metric(a, "kvserve_kv_offload_blocks_stored_total") > 0),
                   timeout=60, what="the load to write to Redis")
        redis_server.stop()  # mid-load
        n_at_stop = len(done)
        wait_until(lambda: metric(a, "kvserve_kv_offload_remote_breaker_opened_total",
                                  f'instance="{redis_server.url}/0"') >= 1,
                   timeout=20, what="the breaker to open", interval=0.1)
        # Requests keep succeeding with the breaker open: two more complete while Redis is down.
        n_open = len(done)
        wait_until(lambda: errors or len(done) >= n_open + 2, timeout=30,
                   what="requests to complete while Redis is down")
        n_down = len(done) - n_at_stop
        redis_server.start()
        # And once it is back.
        n_up = len(done)
        wait_until(lambda: errors or len(done) >= n_up + 2, timeout=30,
                   what="requests to complete after Redis came back")
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert not errors, errors[:3]
    assert n_down > 0, "no request completed while Redis was down"
    assert metric(a, "kvserve_kv_offload_errors_total") >= 1
    # Redis is back (empty): new blocks are written again and a peer hits them.
    deadline = time.time() + 15
    j = 0
    while time.time() < deadline:
        state = metric(a, "kvserve_kv_offload_remote_breaker_state",
                       f'instance="{redis_server.url}/0"')
        if state == 0:
            break
        # Traffic that reaches Redis lets the breaker probe: a prompt new to the pool (a repeated
        # one is a local prefix hit and never asks Redis, so the breaker would wait forever).
        complete(a, doc(7000 + j, n=40), max_tokens=1)
        j += 1
        time.sleep(0.2)
    assert state == 0, "the breaker never closed after Redis came back"
    text_a, _ = complete(a, doc(3))
    deadline = time.time() + 10
    while len(redis_server.keys()) < 18 and time.time() < deadline:
        time.sleep(0.05)
    b = replica(start_server, redis_server)
    text_b, cached_b = complete(b, doc(3))
    assert (text_b, cached_b) == (text_a, WHOLE)


def test_a_corrupted_value_is_detected_counted_and_recomputed(start_server, redis_server):
    a = replica(start_server, redis_server)
    text_a, _ = complete(a, doc(4))
    wait_written(a, 18)
    keys = redis_server.keys()
    assert len(keys) >= 18
    for k in keys:  # one byte in the middle of every value (the KV payload)
        n = int(redis_server.cli("STRLEN", k))
        assert redis_server.cli("SETRANGE", k, str(n // 2), "X").strip() == str(n)
    b = replica(start_server, redis_server)
    text_b, cached_b = complete(b, doc(4))
    assert text_b == text_a  # recomputed: the output of a cold run
    assert cached_b == 0
    assert metric(b, "kvserve_kv_offload_checksum_failures_total") >= 1
    assert metric(b, "kvserve_kv_offload_prefix_cache_hits_tokens_total") == 0
    # The bad values are deleted and the recomputed blocks written again: a third replica hits.
    wait_written(b, 18)
    c = replica(start_server, redis_server)
    assert complete(c, doc(4)) == (text_a, WHOLE)


def test_two_salts_never_share(start_server, redis_server):
    a = replica(start_server, redis_server)
    text, _ = complete(a, doc(5), salt="tenant-a")
    wait_written(a, 18)
    b = replica(start_server, redis_server)
    assert complete(b, doc(5), salt="tenant-b")[1] == 0
    assert complete(b, doc(5))[1] == 0  # no salt is a namespace of its own too
    c = replica(start_server, redis_server)
    assert complete(c, doc(5), salt="tenant-a") == (text, WHOLE)


def test_another_kv_format_never_loads(start_server, redis_server):
    a = replica(start_server, redis_server)
    complete(a, doc(6))
    wait_written(a, 18)
    b = replica(start_server, redis_server, "--kv-cache-dtype", "int8")
    _, cached = complete(b, doc(6))
    assert cached == 0
    assert metric(b, "kvserve_kv_offload_prefix_cache_hits_tokens_total") == 0
    assert metric(b, "kvserve_kv_offload_checksum_failures_total") == 0  # never even read
    # Nor does a pool of the same formats with some layers in their own (per-layer formats).
    c = replica(start_server, redis_server, "--kv-cache-dtype-v-layers", "1=int8")
    _, cached = complete(c, doc(6))
    assert cached == 0
    assert metric(c, "kvserve_kv_offload_checksum_failures_total") == 0
    # A bad --kv-remote is a clear startup error.
    import pytest
    from conftest import Server
    with pytest.raises(RuntimeError, match="--kv-remote"):
        Server(*POOL, "--kv-remote", "http://127.0.0.1:1")
