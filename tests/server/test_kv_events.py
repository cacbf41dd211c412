"""KV events through a real server, read by a subscriber written as a router would write it:
pyzmq sockets and msgspec structs that declare vLLM's event types (vllm/distributed/kv_events.py,
v0.26+: tagged map events in an array batch) and decode strictly. After a randomized load
(stores, evictions, preemptions) the subscriber's block index equals the pool's cached blocks in
/v1/kv (and the host and disk tiers' blocks, media "CPU" and "STORAGE"); a subscriber that missed batches fills the gap by replay; a malformed replay request is
ignored and the publisher keeps running."""
import random
import re
import socket
import struct
import threading
import time
from typing import Any, Optional, Union

import msgspec
import pytest
import xxhash
import zmq


# ---- vLLM's structs, as a consumer declares them ----
class EventBatch(msgspec.Struct, array_like=True, omit_defaults=True, gc=False):
    ts: float
    events: list[Any]
    data_parallel_rank: Optional[int] = None


class KVCacheEvent(msgspec.Struct, array_like=False, omit_defaults=True, gc=False, tag=True,
                   forbid_unknown_fields=True):
    """Base of the events (tagged by class name under "type")."""


class BlockStored(KVCacheEvent):
    block_hashes: list[Union[int, bytes]]
    parent_block_hash: Optional[Union[int, bytes]]
    token_ids: list[int]
    block_size: int
    lora_id: Optional[int]
    medium: Optional[str]
    lora_name: Optional[str]
    extra_keys: Optional[list[Optional[tuple[Any, ...]]]] = None
    group_idx: Optional[int] = None
    kv_cache_spec_kind: Optional[str] = None
    kv_cache_spec_sliding_window: Optional[int] = None
    locality: Optional[str] = None
    ownership: Optional[str] = None
    session_id: Optional[str] = None


class BlockRemoved(KVCacheEvent):
    block_hashes: list[Union[int, bytes]]
    medium: Optional[str]
    group_idx: Optional[int] = None
    locality: Optional[str] = None
    ownership: Optional[str] = None


class AllBlocksCleared(KVCacheEvent):
    pass


class KVEventBatch(EventBatch):
    events: list[Union[BlockStored, BlockRemoved, AllBlocksCleared]]


DECODER = msgspec.msgpack.Decoder(type=KVEventBatch, strict=True)
END_SEQ = b"\xff" * 8


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


BLOCK_TAG = 0x6b76732d74697262  # kvcache/tier_key.cpp's block domain tag (docs/scale-out.md)


def block_key(parent: int, tokens) -> int:
    """kvserve's block hash, computed as an external indexer would: from the token ids."""
    return xxhash.xxh3_64_intdigest(struct.pack("<%di" % len(tokens), *tokens),
                                    seed=parent ^ BLOCK_TAG)


class Index:
    """The block index a router keeps per medium, rebuilt from events applied in seq order."""

    def __init__(self):
        self.blocks = {}  # medium -> {hash: token_ids}
        self.applied = -1  # last seq applied
        self.block_size = None
        self.stored = 0  # blocks stored, over all events

    def apply(self, seq, payload):
        if seq <= self.applied:
            return
        assert seq == self.applied + 1, f"gap: {self.applied} -> {seq}"
        batch = DECODER.decode(payload)
        assert batch.data_parallel_rank == 0
        for e in batch.events:
            if isinstance(e, AllBlocksCleared):
                self.blocks.clear()
            elif isinstance(e, BlockStored):
                assert e.lora_id is None and e.lora_name is None
                assert len(e.token_ids) == e.block_size * len(e.block_hashes)
                self.block_size = e.block_size
                m = self.blocks.setdefault(e.medium, {})
                if e.parent_block_hash is None:  # a chain starts: its root is in extra_keys
                    assert e.extra_keys is not None and len(e.extra_keys[0]) == 1
                    assert all(k is None for k in e.extra_keys[1:])
                    parent = e.extra_keys[0][0]
                else:
                    assert e.extra_keys is None
                    parent = e.parent_block_hash
                for i, h in enumerate(e.block_hashes):
                    tokens = e.token_ids[i * e.block_size:(i + 1) * e.block_size]
                    assert h == block_key(parent, tokens), "a hash not computable from its tokens"
                    m[h] = tokens
                    parent = h
                self.stored += len(e.block_hashes)
            elif isinstance(e, BlockRemoved):
                m = self.blocks.setdefault(e.medium, {})
                for h in e.block_hashes:
                    assert h in m, f"removed a block never stored: {h}"
                    del m[h]
        self.applied = seq


class Subscriber:
    def __init__(self, pub_port, replay_port=None):
        self.ctx = zmq.Context()
        self.sub = self.ctx.socket(zmq.SUB)
        self.sub.setsockopt(zmq.SUBSCRIBE, b"")
        self.sub.connect(f"tcp://127.0.0.1:{pub_port}")
        self.replay_port = replay_port
        self.pending = {}  # seq -> payload received live, not applied yet

    def poll(self, index, timeout_ms=100):
        """Receives what the PUB socket sent; returns how many messages came."""
        n = 0
        while self.sub.poll(timeout_ms):
            topic, seq, payload = self.sub.recv_multipart()
            assert topic == b"" and len(seq) == 8
            self.pending[int.from_bytes(seq, "big")] = payload
            n += 1
            timeout_ms = 0
        while index.applied + 1 in self.pending:
            s = index.applied + 1
            index.apply(s, self.pending.pop(s))
        return n

    def replay(self, index, start):
        """Asks for every buffered batch from `start` on and applies them."""
        d = self.ctx.socket(zmq.DEALER)
        d.connect(f"tcp://127.0.0.1:{self.replay_port}")
        d.send_multipart([b"", start.to_bytes(8, "big")])
        got = 0
        while True:
            assert d.poll(5000), "no replay answer"
            frames = d.recv_multipart()
            assert frames[0] == b"" and len(frames) == 4
            _, topic, seq, payload = frames
            if seq == END_SEQ:
                assert payload == b""
                break
            index.apply(int.from_bytes(seq, "big"), payload)
            got += 1
        d.close(linger=0)
        return got

    def close(self):
        self.sub.close(linger=0)
        self.ctx.term()


def cached_hashes(s):
    return {b["hash"] for b in s.get("/v1/kv").json()["blocks"] if b["hash"] is not None}


def settle(sub, index):
    """Reads until the publisher has been quiet for half a second."""
    quiet_since = time.time()
    while time.time() - quiet_since < 0.5:
        if sub.poll(index, 100):
            quiet_since = time.time()


def random_load(s, seed, n=40):
    """Requests sharing prefixes (system prompts, growing conversations) through a small pool,
    three at a time (more than the pool holds: preemptions), with a tenant salt on some."""
    rng = random.Random(seed)
    heads = [[rng.randrange(1000, 30000) for _ in range(rng.choice([16, 40, 64]))]
             for _ in range(4)]
    errors = []

    def client(k):
        r = random.Random(seed * 100 + k)
        for _ in range(n // 3):
            prompt = r.choice(heads) + [r.randrange(1000, 30000) for _ in range(r.randrange(5, 250))]
            body = {"prompt": prompt, "max_tokens": r.randrange(1, 60), "temperature": 0}
            if r.random() < 0.25:
                body["cache_salt"] = r.choice(["a", "b"])
            resp = s.post("/v1/completions", body)
            if resp.status_code != 200:
                errors.append(resp.text)

    threads = [threading.Thread(target=client, args=(k,)) for k in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[:3]


def events_server(start_server, *extra):
    # The endpoints' ports are picked free here and bound by the server a moment later: another
    # process of the parallel test run can take one in between (the server then refuses to start
    # with "Address already in use"), so a start that fails that way is tried with new ports.
    for attempt in range(5):
        pub, rep = free_port(), free_port()
        try:
            s = start_server("--kv-cache-memory", "10MiB", "--max-model-len", "384",
                             "--max-num-seqs", "4", "--preemption-mode", "swap",
                             "--swap-space", "4MiB", "--kv-events-endpoint", f"tcp://127.0.0.1:{pub}",
                             "--kv-events-replay-endpoint", f"tcp://127.0.0.1:{rep}", *extra,
                             admin=True)  # an admin key: /v1/kv shows the block hashes
            return s, pub, rep
        except RuntimeError as e:
            if "Address already in use" not in str(e) or attempt == 4:
                raise


def metric(s, name):
    m = re.search(r"^%s (\S+)$" % re.escape(name), s.get("/metrics").text, re.M)
    assert m, name
    return float(m.group(1))


def test_the_subscribers_index_equals_the_pool_after_a_random_load(start_server, tmp_path):
    s, pub, rep = events_server(start_server, "--kv-offload-memory", "4MiB",
                                "--kv-offload-dir", str(tmp_path), "--kv-offload-disk-admit", "0",
                                "--kv-offload-extent-blocks", "4")
    sub = Subscriber(pub, rep)
    index = Index()
    sub.replay(index, 0)  # the batches sent before we connected (AllBlocksCleared at seq 0)
    assert index.applied >= 0
    random_load(s, seed=1)
    settle(sub, index)
    gpu = index.blocks.get("GPU", {})
    assert gpu, "no block was ever stored"
    assert set(gpu) == cached_hashes(s)
    # The host tier (L2) is the "CPU" medium, as vLLM's CPU offloading.
    cpu = index.blocks.get("CPU", {})
    assert cpu, "nothing reached the host tier"
    assert set(cpu) == set(s.get("/v1/kv").json()["tiers"]["host"]["block_hashes"])
    # The disk tier (L3) is "STORAGE": its writer thread indexes extents between steps.
    disk = index.blocks.get("STORAGE", {})
    assert disk, "nothing reached the disk tier"
    assert set(disk) == set(s.get("/v1/kv").json()["tiers"]["disk"]["block_hashes"])
    # Blocks came and went (evictions, preemptions), so the index was really maintained.
    assert metric(s, "kvserve_kv_evictions_total") > 0
    text = s.get("/metrics").text
    assert sum(float(v) for v in re.findall(r"^kvserve_preemptions_total\{[^}]*\} (\S+)$", text,
                                            re.M)) > 0
    assert index.stored > len(gpu)
    assert metric(s, "kvserve_kv_events_batches_dropped_total") == 0
    sub.close()


def test_a_dropped_subscriber_fills_the_gap_by_replay(start_server):
    s, pub, rep = events_server(start_server)
    sub = Subscriber(pub, rep)
    index = Index()
    sub.replay(index, 0)
    random_load(s, seed=2, n=10)
    settle(sub, index)
    seen = index.applied
    sub.close()  # the router goes away...
    random_load(s, seed=3, n=12)  # ...while the cache changes
    sub = Subscriber(pub, rep)
    got = sub.replay(index, seen + 1)
    assert got > 0 and index.applied > seen
    settle(sub, index)
    assert set(index.blocks.get("GPU", {})) == cached_hashes(s)
    sub.close()


def test_a_malformed_replay_request_is_ignored(start_server):
    s, pub, rep = events_server(start_server)
    ctx = zmq.Context()
    d = ctx.socket(zmq.DEALER)
    d.connect(f"tcp://127.0.0.1:{rep}")
    d.send_multipart([b"garbage"])  # no delimiter
    d.send_multipart([b"", b"123456789"])  # a 9-byte sequence number
    d.send_multipart([b"", b"\x00" * 8, b"extra"])  # a frame too many
    assert not d.poll(500), "a malformed request was answered"
    deadline = time.time() + 5
    while metric(s, "kvserve_kv_events_bad_replay_requests_total") < 3:
        assert time.time() < deadline
        time.sleep(0.05)
    assert any("malformed KV events replay request" in line for line in s.log)
    # The publisher keeps running: a good request is answered, and the server serves.
    sub = Subscriber(pub, rep)
    index = Index()
    assert sub.replay(index, 0) >= 1
    r = s.post("/v1/completions", {"prompt": "Hello there", "max_tokens": 2})
    assert r.status_code == 200
    d.close(linger=0)
    ctx.term()
    sub.close()


def test_events_need_a_free_endpoint(start_server):
    s, pub, _ = events_server(start_server)
    from conftest import Server
    with pytest.raises(RuntimeError, match="--kv-events-endpoint"):
        Server("--kv-events-endpoint", f"tcp://127.0.0.1:{pub}")  # taken by the first
    with pytest.raises(RuntimeError, match="--kv-events-endpoint"):
        Server("--kv-events-endpoint", "nonsense")
