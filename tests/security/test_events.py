"""Findings 6 and 7 of the trust review: KV events against real subscribers. The sockets bind
loopback unless told otherwise; with CURVE only admitted subscribers read anything; token ids can
be left out; and a replay client that asks again and again and never reads cannot grow the
server's memory (before: 157 MB to 3 GB in 20 s)."""
import os
import shutil
import threading
import time

import msgspec
import pytest
import zmq

from attack_helpers import private_dir, refused
from conftest import Server
from redis_fixture import free_port
from tier_prompts import complete, doc

END_SEQ = b"\xff" * 8


def events_server(start_server, *extra, replay=True):
    pub, rep = free_port(), free_port()
    args = ["--kv-cache-memory", "10MiB", "--max-model-len", "384",
            "--kv-events-endpoint", f"tcp://127.0.0.1:{pub}"]
    if replay:
        args += ["--kv-events-replay-endpoint", f"tcp://127.0.0.1:{rep}"]
    return start_server(*args, *extra), pub, rep


def rss_mb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def subscriber(ctx, port, keys=None):
    s = ctx.socket(zmq.SUB)
    if keys:
        server_public, public, secret = keys
        s.curve_serverkey = server_public
        s.curve_publickey = public
        s.curve_secretkey = secret
    s.setsockopt(zmq.SUBSCRIBE, b"")
    s.connect(f"tcp://127.0.0.1:{port}")
    return s


def received(sock, server, prompts, wait_ms=1500):
    """Sends requests and returns the batches that arrived.

    A subscription reaches the publisher asynchronously (ZeroMQ's slow joiner), so what is
    published before it settles is not delivered. Until a first batch arrives, the prompts are
    sent again with a fresh prefix (new blocks, so new events), up to 30 s."""
    out = []
    deadline = time.time() + 30
    attempt = 0
    while not out and time.time() < deadline:
        for p in prompts:
            complete(server, p if attempt == 0 else f"[{attempt}] {p}", max_tokens=2)
        attempt += 1
        poll_ms = wait_ms
        while sock.poll(poll_ms):
            out.append(sock.recv_multipart())
            poll_ms = 200
    return out


def test_events_bind_loopback_unless_told_otherwise(start_server):
    port = free_port()
    for endpoint in [f"tcp://0.0.0.0:{port}", f"tcp://*:{port}"]:
        err = refused("--kv-cache-memory", "10MiB", "--max-model-len", "384",
                      "--kv-events-endpoint", endpoint)
        assert "reachable from other machines" in err and "--kv-events-allow-remote" in err, err
    s = start_server("--kv-cache-memory", "10MiB", "--max-model-len", "384",
                     "--kv-events-endpoint", f"tcp://0.0.0.0:{port}", "--kv-events-allow-remote")
    assert any("without CURVE" in line for line in s.log)


def test_with_curve_only_admitted_subscribers_read_anything(start_server):
    d = private_dir("kvs-sec-curve-")
    try:
        server_public, server_secret = zmq.curve_keypair()
        client_public, client_secret = zmq.curve_keypair()
        stranger_public, stranger_secret = zmq.curve_keypair()
        sk = os.path.join(d, "server.key")
        fd = os.open(sk, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        os.write(fd, server_secret + b"\n")
        os.close(fd)
        clients = os.path.join(d, "clients")
        with open(clients, "wb") as f:
            f.write(b"# admitted subscribers\n" + client_public + b"\n")
        s, pub, rep = events_server(start_server, "--kv-events-curve-secret-file", sk,
                                    "--kv-events-curve-clients", clients)
        assert any(server_public.decode() in line for line in s.log)  # printed for clients
        ctx = zmq.Context()
        admitted = subscriber(ctx, pub, (server_public, client_public, client_secret))
        plain = subscriber(ctx, pub)
        stranger = subscriber(ctx, pub, (server_public, stranger_public, stranger_secret))
        got = received(admitted, s, [doc(1, n=40), doc(2, n=40)])
        assert got, "the admitted subscriber received nothing"
        assert not plain.poll(300) and not stranger.poll(300)
        # Replay: the admitted key is answered, a plain requester is not.
        for keys, answered in [((server_public, client_public, client_secret), True),
                               (None, False)]:
            dealer = ctx.socket(zmq.DEALER)
            if keys:
                dealer.curve_serverkey, dealer.curve_publickey, dealer.curve_secretkey = keys
            dealer.connect(f"tcp://127.0.0.1:{rep}")
            dealer.send_multipart([b"", (0).to_bytes(8, "big")])
            assert bool(dealer.poll(2000)) == answered
            dealer.close(linger=0)
        for sock in (admitted, plain, stranger):
            sock.close(linger=0)
        ctx.term()
    finally:
        shutil.rmtree(d, ignore_errors=True)


def test_token_ids_can_be_left_out(start_server):
    s, pub, _ = events_server(start_server, "--no-kv-events-token-ids", replay=False)
    ctx = zmq.Context()
    sub = subscriber(ctx, pub)
    stored = 0
    for _, _, payload in received(sub, s, [doc(3, n=60)]):
        for e in msgspec.msgpack.decode(payload)[1]:
            if e.get("type") == "BlockStored":
                stored += 1
                assert e["token_ids"] == [], e
    assert stored > 0
    sub.close(linger=0)
    ctx.term()


def test_a_replay_flood_that_never_reads_cannot_grow_memory(start_server):
    s, pub, rep = events_server(start_server, "--max-num-seqs", "4")
    # A buffer of batches to replay: every prompt stores blocks with their token ids.
    for i in range(40):
        complete(s, doc(100 + i, n=200), max_tokens=1)
    base = rss_mb(s.proc.pid)
    ctx = zmq.Context()
    floods = []
    for _ in range(20):  # twenty connections...
        dealer = ctx.socket(zmq.DEALER)
        dealer.setsockopt(zmq.SNDHWM, 0)
        dealer.setsockopt(zmq.RCVHWM, 1)  # ...that never read
        dealer.connect(f"tcp://127.0.0.1:{rep}")
        floods.append(dealer)
    deadline = time.time() + 10
    sent = 0
    while time.time() < deadline:
        for dealer in floods:
            dealer.send_multipart([b"", (0).to_bytes(8, "big")], flags=zmq.NOBLOCK)
            sent += 1
    peak = base
    for _ in range(20):
        peak = max(peak, rss_mb(s.proc.pid))
        time.sleep(0.25)
    assert sent > 10000
    assert peak - base < 200, (base, peak)
    text = s.get("/metrics").text
    assert "kvserve_kv_events_replay_requests_refused_total" in text
    # The server still serves, and a subscriber that reads gets its replay.
    assert complete(s, doc(200, n=50), max_tokens=2)[0] is not None
    good = ctx.socket(zmq.DEALER)
    good.connect(f"tcp://127.0.0.1:{rep}")
    end = None
    for attempt in range(40):  # refused while the flood's sessions and rate hold; then served
        good.send_multipart([b"", (0).to_bytes(8, "big")])
        t = time.time()
        while time.time() - t < 2 and end is None:
            if good.poll(200):
                frames = good.recv_multipart()
                if frames[2] == END_SEQ:
                    end = frames
        if end is not None:
            break
    assert end is not None, "a reading subscriber never got its replay"
    for dealer in floods + [good]:
        dealer.close(linger=0)
    ctx.term()
