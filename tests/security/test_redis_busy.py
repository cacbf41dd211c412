"""Finding 10 of the trust review: on a busy machine the Redis tier must still work with its
default timeout. Replica A stores a 1,353-token prompt (84 blocks, about 31 MB at f16); with
every core busy, replica B must load it from Redis, not recompute it. Before, one pipelined GET of
all the blocks had to fit in the 50 ms timeout: 0 tokens cached."""
import multiprocessing
import os
import shutil
import time

from attack_helpers import private_dir, secret_file
from tier_prompts import complete, doc

POOL = ["--kv-cache-memory", "64MiB", "--max-model-len", "2048"]


def burn(stop_at, started):
    started.set()
    while time.time() < stop_at:
        pass


def test_a_busy_machine_still_loads_a_long_prefix_from_redis(start_server, redis_server):
    d = private_dir("kvs-sec-busy-")
    burners = []
    try:
        shared = secret_file(d)
        args = [*POOL, "--kv-remote", redis_server.url, "--kv-tier-secret-file", shared]
        a = start_server(*args)
        b = start_server(*args)
        prompt = doc(70, n=1353)
        text, _ = complete(a, prompt, max_tokens=4)
        deadline = time.time() + 30
        while len(redis_server.keys()) < 84 and time.time() < deadline:
            time.sleep(0.1)
        assert len(redis_server.keys()) >= 84
        # Every core busy (twice over) while B fetches.
        stop_at = time.time() + 60
        started = []
        for _ in range(2 * (os.cpu_count() or 2)):
            e = multiprocessing.Event()
            p = multiprocessing.Process(target=burn, args=(stop_at, e), daemon=True)
            p.start()
            burners.append(p)
            started.append(e)
        for e in started:  # every burner is spinning before B asks
            assert e.wait(30), "a burner did not start"
        text_b, cached = complete(b, prompt, max_tokens=4)
        assert text_b == text
        assert cached >= 1344 // 2, cached  # most of the 84 whole blocks came from Redis
    finally:
        for p in burners:
            p.terminate()
        shutil.rmtree(d, ignore_errors=True)
