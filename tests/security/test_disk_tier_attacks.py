"""Findings 2, 3 and 11 of the trust review: the disk tier's directory attacked by another local
user, against a real server. A directory others may write (or another user owns) is refused at
start; links planted under temporary names are never followed (the file they point to stays
intact); a FIFO swapped in for an extent neither blocks a request nor SIGTERM; a dangling link
does not stop startup; a second server on the same directory gets a clear error."""
import os
import shutil
import stat
import subprocess
import time

import requests

from attack_helpers import OTHER_UID, plant_link, private_dir, refused
from tier_prompts import POOL, complete, doc


def disk_server(start_server, d, *extra):
    return start_server(*POOL, "--kv-offload-dir", d, "--kv-offload-disk-admit", "0",
                        "--kv-offload-extent-blocks", "2", *extra)


def extents(d):
    return sorted(f for f in os.listdir(d) if f.endswith(".kvx"))


def test_a_directory_others_can_write_or_another_user_owns_is_refused():
    d = private_dir("kvs-sec-dir-")
    try:
        os.chmod(d, 0o1777)  # like /tmp: anyone can plant files
        err = refused(*POOL, "--kv-offload-dir", d)
        assert "writable by others" in err and "chmod go-w" in err, err
        os.chmod(d, 0o700)
        if os.geteuid() == 0:
            os.chown(d, OTHER_UID, OTHER_UID)
            err = refused(*POOL, "--kv-offload-dir", d)
            assert "owned by uid %d" % OTHER_UID in err, err
            os.chown(d, 0, 0)
        link = d + "-link"
        os.symlink(d, link)
        try:
            err = refused(*POOL, "--kv-offload-dir", link)
            assert "symbolic link" in err, err
        finally:
            os.unlink(link)
    finally:
        shutil.rmtree(d, ignore_errors=True)


def test_links_planted_under_temporary_names_are_never_followed(start_server):
    d = private_dir("kvs-sec-links-")
    victim_dir = private_dir("kvs-sec-victim-")
    victim = os.path.join(victim_dir, "precious")
    with open(victim, "w") as f:
        f.write("root-owned data")
    try:
        # Before start: the old predictable names (the bandwidth probe's fixed name).
        plant_link(victim, os.path.join(d, "bandwidth-probe.kvx.tmp"))
        s = disk_server(start_server, d, "--kv-offload-policy", "write-through")
        complete(s, doc(40))  # write-through: its blocks go to disk at once
        deadline = time.time() + 10
        while not extents(d) and time.time() < deadline:
            time.sleep(0.05)
        # While it runs: the temporary names the next extents would have had if names followed
        # from the ones in the directory (hexadecimal counters), each a link to the victim.
        planted = 0
        for name in extents(d):
            try:
                n = int(name[:-len(".kvx")], 16)
            except ValueError:
                continue
            for k in range(1, 64):
                link = os.path.join(d, "%016x.kvx.tmp" % (n + k))
                if not os.path.lexists(link):
                    plant_link(victim, link)
                    planted += 1
        for i in range(1, 4):
            complete(s, doc(40 + i))
        s.stop()
        assert s.proc.returncode == 0
        assert planted, "no extent was written before the links were planted"
        assert len(extents(d)) > 1, "the server wrote no further extent"
        with open(victim, "rb") as f:
            assert f.read() == b"root-owned data"
    finally:
        shutil.rmtree(d, ignore_errors=True)
        shutil.rmtree(victim_dir, ignore_errors=True)


def test_a_fifo_swapped_in_for_an_extent_blocks_neither_requests_nor_sigterm(start_server):
    d = private_dir("kvs-sec-fifo-")
    try:
        s = disk_server(start_server, d)
        text, _ = complete(s, doc(50))
        s.stop()
        assert s.proc.returncode == 0
        names = extents(d)
        assert names
        # Another user replaces every extent with a FIFO nobody writes.
        for name in names:
            fifo = os.path.join(d, name + ".fifo")
            os.mkfifo(fifo)
            os.rename(fifo, os.path.join(d, name))
        s2 = disk_server(start_server, d)  # starts: the scan never opens a FIFO for reading
        t0 = time.time()
        again, cached = complete(s2, doc(50))
        assert again == text and cached == 0  # recomputed, not served from the FIFO
        assert time.time() - t0 < 30
        assert requests.get(s2.url + "/health", timeout=5).status_code == 200
        t0 = time.time()
        s2.proc.terminate()
        s2.proc.wait(timeout=30)
        assert s2.proc.returncode == 0 and time.time() - t0 < 30
        # And swapped in while the server runs, after it indexed the real extents.
        s3 = disk_server(start_server, d)
        complete(s3, doc(51))
        s3.stop()
        s4 = disk_server(start_server, d)
        for name in extents(d):
            st = os.lstat(os.path.join(d, name))
            if stat.S_ISREG(st.st_mode):
                fifo = os.path.join(d, name + ".fifo")
                os.mkfifo(fifo)
                os.rename(fifo, os.path.join(d, name))
        t0 = time.time()
        complete(s4, doc(51))
        assert time.time() - t0 < 30
        assert s4.get("/debug/integrity").json()["ok"] is True
        t0 = time.time()
        s4.proc.terminate()
        s4.proc.wait(timeout=30)
        assert s4.proc.returncode == 0 and time.time() - t0 < 30
    finally:
        shutil.rmtree(d, ignore_errors=True)


def test_a_dangling_link_does_not_stop_startup(start_server):
    d = private_dir("kvs-sec-dangling-")
    try:
        plant_link("/nonexistent/extent", os.path.join(d, "0123456789abcdef.kvx"))
        s = disk_server(start_server, d)
        assert s.get("/v1/kv").json()["tiers"]["disk"]["skipped_entries"] == 1
        complete(s, doc(60))
    finally:
        shutil.rmtree(d, ignore_errors=True)


def test_a_second_server_on_the_same_directory_gets_a_clear_error(start_server):
    d = private_dir("kvs-sec-lock-")
    try:
        disk_server(start_server, d)
        err = refused(*POOL, "--kv-offload-dir", d)
        assert "in use by another kvserve process" in err, err
    finally:
        shutil.rmtree(d, ignore_errors=True)
