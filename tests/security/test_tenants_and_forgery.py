"""Findings 4 and 5 of the trust review, against real servers on a real Redis: tenants are
identities, not positions (two replicas with different keys share nothing; a keyless replica's
cache_salt reaches no keyed tenant; replicas with different secrets share nothing; key rotation
keeps a named tenant and never hands a bare key's KV to another key), and values written by
anyone without the server secret are rejected, deleted, counted and recomputed (Redis and disk).
Redis AUTH: a password-protected Redis works with the password in the URL."""
import os
import shutil
import subprocess

from attack_helpers import metric, private_dir, redis_command, secret_file
from conftest import Server
from tier_prompts import POOL, complete, doc

WHOLE = 288  # whole blocks before the last token of a 300-token prompt


def forge(victim_value, forger_value):
    """The best an attacker without the secret can do: the victim's header (its chain keys, tokens
    and namespace) over the attacker's payload, with the trailer recomputed. Format v1 ended in
    an unkeyed XXH3-128 anyone can compute; v2 ends in a MAC under the server secret, which the
    attacker can only guess (here: keyed with a key of their own)."""
    version = int.from_bytes(victim_value[8:12], "little")
    trailer = 16 if version == 1 else 32
    hb = int.from_bytes(victim_value[12:16], "little")
    body = victim_value[:hb] + forger_value[hb:len(victim_value) - trailer]
    assert len(body) == len(victim_value) - trailer
    if version == 1:
        import xxhash
        return body + xxhash.xxh3_128(body).intdigest().to_bytes(16, "little")
    import hashlib
    return body + hashlib.blake2b(body, key=os.urandom(32), digest_size=32).digest()


def replica(start_server, redis, key=None, secret=None, keys_file=None, *extra):
    args = [*POOL, "--kv-remote", redis.url]
    if secret:
        args += ["--kv-tier-secret-file", secret]
    if keys_file:
        args += ["--api-keys", keys_file]
    elif key:
        args += ["--api-key", key]
    s = start_server(*args, *extra, api_key=False)
    if key:  # its own key for /metrics and /v1/kv
        s.headers = lambda: {"Authorization": "Bearer " + key}
    return s


def ask(server, prompt, key=None, salt=None):
    body = {"prompt": prompt, "max_tokens": 8, "temperature": 0}
    if salt is not None:
        body["cache_salt"] = salt
    headers = {"Authorization": "Bearer " + key} if key else {}
    r = server.post("/v1/completions", body, headers=headers)
    assert r.status_code == 200, r.text
    j = r.json()
    return j["choices"][0]["text"], j["usage"]["prompt_tokens_details"]["cached_tokens"]


def written(server, key=None):
    """Waits until the replica's Redis writes are done (none queued, none being written)."""
    import time
    h = {"Authorization": "Bearer " + key} if key else {}
    for _ in range(200):
        if server.get("/v1/kv", headers=h).json()["tiers"]["remote"]["queued_writes"] == 0:
            return
        time.sleep(0.05)
    raise AssertionError("the replica's Redis writes did not finish")


def test_replicas_with_different_keys_never_share(start_server, redis_server):
    d = private_dir("kvs-sec-tenants-")
    try:
        shared = secret_file(d)
        alice = replica(start_server, redis_server, "alice-secret", shared)
        bob = replica(start_server, redis_server, "bob-secret", shared)
        alice2 = replica(start_server, redis_server, "alice-secret", shared)
        text, cached = ask(alice, doc(1), "alice-secret")
        assert cached == 0
        written(alice, "alice-secret")
        # Bob is the first key of his server as Alice is of hers: another tenant all the same.
        assert ask(bob, doc(1), "bob-secret") == (text, 0)
        # Alice's own key on another replica (same secret) is Alice: the KV is shared.
        assert ask(alice2, doc(1), "alice-secret") == (text, WHOLE)
        # A keyless replica naming Alice's tenant (old and new spellings) in cache_salt: nothing.
        anon = replica(start_server, redis_server, None, shared)
        tenant = alice.get("/v1/kv", headers={"Authorization": "Bearer alice-secret"}).json()
        labels = {s["tenant"] for s in tenant.get("tenants", [])} if "tenants" in tenant else set()
        for salt in ["key-1\u001f", "key-1", *[l + "\u001f" for l in labels], *labels]:
            assert ask(anon, doc(1), salt=salt) == (text, 0), salt
    finally:
        shutil.rmtree(d, ignore_errors=True)


def test_replicas_with_different_secrets_never_share(start_server, redis_server):
    d = private_dir("kvs-sec-secrets-")
    try:
        a = replica(start_server, redis_server, "same-key", secret_file(d, "a.secret"))
        b = replica(start_server, redis_server, "same-key", secret_file(d, "b.secret"))
        text, _ = ask(a, doc(2), "same-key")
        written(a, "same-key")
        assert ask(b, doc(2), "same-key") == (text, 0)
        # Without a secret file each process has its own: nothing shared either.
        c = replica(start_server, redis_server, "same-key")
        dd = replica(start_server, redis_server, "same-key")
        text3, _ = ask(c, doc(3), "same-key")
        written(c, "same-key")
        assert ask(dd, doc(3), "same-key") == (text3, 0)
    finally:
        shutil.rmtree(d, ignore_errors=True)


def test_key_rotation_keeps_a_named_tenant_and_never_moves_a_bare_keys_kv(start_server,
                                                                         redis_server):
    d = private_dir("kvs-sec-rotate-")
    try:
        shared = secret_file(d)
        both = os.path.join(d, "keys-both")
        with open(both, "w") as f:
            f.write("team old-key\nteam new-key\n")
        only_new = os.path.join(d, "keys-new")
        with open(only_new, "w") as f:
            f.write("team new-key\n")
        before = replica(start_server, redis_server, secret=shared, keys_file=both)
        after = replica(start_server, redis_server, secret=shared, keys_file=only_new)
        text, _ = ask(before, doc(4), "old-key")
        written(before, "old-key")
        assert ask(after, doc(4), "new-key") == (text, WHOLE)  # the tenant is the name
        # Bare keys: each is its own tenant; dropping k1 does not give k1's KV to k2.
        two = replica(start_server, redis_server, None, shared, None, "--api-key", "k1",
                      "--api-key", "k2")
        one = replica(start_server, redis_server, "k2", shared)
        text5, _ = ask(two, doc(5), "k1")
        written(two, "k1")
        assert ask(one, doc(5), "k2") == (text5, 0)
    finally:
        shutil.rmtree(d, ignore_errors=True)


def redis_cli(redis, *args, stdin=None):
    return subprocess.run(["redis-cli", "-p", str(redis.port), *args], input=stdin,
                          capture_output=True, timeout=30)


def test_a_value_forged_without_the_secret_is_rejected_and_recomputed(start_server, redis_server):
    d = private_dir("kvs-sec-forge-")
    try:
        victim_secret, forger_secret = secret_file(d, "victim"), secret_file(d, "forger")
        victim = replica(start_server, redis_server, "k", victim_secret)
        text, _ = ask(victim, doc(6), "k")
        written(victim, "k")
        victim_keys = sorted(k for k in redis_server.keys())
        assert len(victim_keys) >= 18
        # The forger, who can read and write Redis, stores a prompt under its own secret, then
        # writes over every value of the victim a well-formed value for the victim's key: the
        # victim's header (chain key, tokens, secret id) with the forger's payload and MAC.
        forger = replica(start_server, redis_server, "k", forger_secret)
        ask(forger, doc(7), "k")  # different tokens: a wrong answer if it were accepted
        written(forger, "k")
        forged = sorted(set(redis_server.keys()) - set(victim_keys))
        assert forged
        theirs = redis_command(redis_server.port, "GET", forged[0])
        for k in victim_keys:
            ours = redis_command(redis_server.port, "GET", k)
            assert isinstance(ours, bytes) and len(ours) == len(theirs)
            assert redis_command(redis_server.port, "SET", k, forge(ours, theirs)) == "OK"
        fresh = replica(start_server, redis_server, "k", victim_secret)
        again, cached = ask(fresh, doc(6), "k")
        assert (again, cached) == (text, 0)
        assert metric(fresh, "kvserve_kv_offload_checksum_failures_total",
                      'tier="remote"') >= 1
        # The forged value was deleted; the recomputed block is written again.
        written(fresh, "k")
        assert ask(replica(start_server, redis_server, "k", victim_secret), doc(6), "k") == \
            (text, WHOLE)
    finally:
        shutil.rmtree(d, ignore_errors=True)


def test_an_extent_forged_without_the_secret_is_rejected_and_recomputed(start_server):
    victim_dir, forger_dir = private_dir("kvs-sec-fv-"), private_dir("kvs-sec-ff-")
    try:
        args = ["--kv-offload-disk-admit", "0", "--kv-offload-extent-blocks", "32"]
        s = start_server(*POOL, "--kv-offload-dir", victim_dir, *args)
        text, _ = complete(s, doc(8))
        s.stop()
        f = start_server(*POOL, "--kv-offload-dir", forger_dir, *args)
        complete(f, doc(9))
        f.stop()
        victim_extents = [x for x in os.listdir(victim_dir) if x.endswith(".kvx")]
        forged = [x for x in os.listdir(forger_dir) if x.endswith(".kvx")][0]
        with open(os.path.join(victim_dir, victim_extents[0]), "rb") as fh:
            victim_bytes = fh.read()
        with open(os.path.join(forger_dir, forged), "rb") as fh:
            forged_bytes = bytearray(fh.read())
        # The forger writes the victim's header (its chain keys, tokens and secret id) over its
        # own payload: a well-formed extent of the victim's prompt that lies about the KV.
        forged_bytes = forge(victim_bytes, bytes(forged_bytes))
        assert len(forged_bytes) == len(victim_bytes)
        with open(os.path.join(victim_dir, victim_extents[0]), "wb") as fh:
            fh.write(forged_bytes)
        s2 = start_server(*POOL, "--kv-offload-dir", victim_dir, *args)
        again, cached = complete(s2, doc(8))
        assert again == text and cached == 0
        assert metric(s2, "kvserve_kv_offload_checksum_failures_total", 'tier="disk"') >= 1
    finally:
        shutil.rmtree(victim_dir, ignore_errors=True)
        shutil.rmtree(forger_dir, ignore_errors=True)


def test_a_password_protected_redis_works_with_the_password_in_the_url(start_server,
                                                                      redis_server):
    assert redis_cli(redis_server, "CONFIG", "SET", "requirepass", "s3cret-pw").returncode == 0
    d = private_dir("kvs-sec-auth-")
    try:
        shared = secret_file(d)
        url = "redis://:s3cret-pw@127.0.0.1:%d" % redis_server.port
        a = start_server(*POOL, "--kv-remote", url, "--kv-tier-secret-file", shared)
        b = start_server(*POOL, "--kv-remote", url, "--kv-tier-secret-file", shared)
        text, _ = complete(a, doc(10))
        written(a, "test-key")
        assert complete(b, doc(10)) == (text, WHOLE)
        assert "s3cret-pw" not in "".join(a.log)  # never printed
        # Without the password nothing is stored or found, and nothing fails.
        c = start_server(*POOL, "--kv-remote", redis_server.url, "--kv-tier-secret-file", shared)
        assert complete(c, doc(11))[1] == 0
    finally:
        redis_cli(redis_server, "-a", "s3cret-pw", "CONFIG", "SET", "requirepass", "")
        shutil.rmtree(d, ignore_errors=True)


def test_a_requests_last_blocks_reach_redis_without_another_step_and_on_sigterm(start_server,
                                                                               redis_server):
    import time
    d = private_dir("kvs-sec-final-")
    try:
        shared = secret_file(d)
        a = replica(start_server, redis_server, None, shared)
        # max_tokens 1: the prefill is the request's only step; its 18 blocks complete there.
        body = {"prompt": doc(12), "max_tokens": 1, "temperature": 0}
        assert a.post("/v1/completions", body).status_code == 200
        deadline = time.time() + 10
        while len(redis_server.keys()) < 18 and time.time() < deadline:
            time.sleep(0.05)  # A stays idle: no later step runs
        assert len(redis_server.keys()) >= 18
        # And a SIGTERM right after a request still delivers its blocks.
        assert a.post("/v1/completions", dict(body, prompt=doc(13))).status_code == 200
        a.stop()
        assert a.proc.returncode == 0
        b = replica(start_server, redis_server, None, shared)
        assert complete(b, doc(13))[1] == WHOLE
    finally:
        shutil.rmtree(d, ignore_errors=True)
