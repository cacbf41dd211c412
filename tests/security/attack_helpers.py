"""What the security suite's attacks share: a private directory, another user's files, a secret
file, a server that must refuse to start, and Prometheus values."""
import os
import re
import subprocess
import tempfile

from conftest import kvserve_bin

OTHER_UID = 65534  # nobody: "another local user"


def private_dir(prefix):
    """A fresh directory of this user, mode 0700 (what a KV directory must be)."""
    return tempfile.mkdtemp(prefix=prefix)


def plant_link(target, link, uid=OTHER_UID):
    """A symbolic link planted by another user (owned by uid when we may chown)."""
    os.symlink(target, link)
    try:
        os.lchown(link, uid, uid)
    except PermissionError:
        pass


def secret_file(directory, name="tier.secret"):
    path = os.path.join(directory, name)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    os.write(fd, os.urandom(32).hex().encode())
    os.close(fd)
    return path


def refused(*args, timeout=60):
    """Runs `kvserve serve ARGS` expecting it to refuse to start; returns its stderr."""
    p = subprocess.run([kvserve_bin(), "serve", "--host", "127.0.0.1", "--port", "0", "-t", "1",
                        *args], capture_output=True, text=True, timeout=timeout)
    assert p.returncode != 0, "the server started: " + p.stderr
    return p.stderr


def metric(server, name, labels=None):
    text = server.get("/metrics").text
    pattern = re.escape(name) + (r"\{" + re.escape(labels) + r"\}" if labels else "") + r" (\S+)$"
    m = re.search("^" + pattern, text, re.M)
    assert m, f"{name} {labels} missing"
    return float(m.group(1))


def redis_command(port, *args, password=None):
    """One Redis command over a raw RESP connection (binary-safe); returns the reply: bytes for a
    bulk string, None for nil, str for a status, an exception instance for an error."""
    import socket

    def encode(parts):
        out = b"*%d\r\n" % len(parts)
        for p in parts:
            p = p if isinstance(p, bytes) else str(p).encode()
            out += b"$%d\r\n%s\r\n" % (len(p), p)
        return out

    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        f = s.makefile("rb")
        if password:
            s.sendall(encode(["AUTH", password]))
            f.readline()
        s.sendall(encode(list(args)))
        line = f.readline()
        kind, rest = line[:1], line[1:-2]
        if kind == b"$":
            n = int(rest)
            return None if n < 0 else f.read(n + 2)[:-2]
        if kind == b"+":
            return rest.decode()
        if kind == b":":
            return int(rest)
        if kind == b"-":
            return RuntimeError(rest.decode())
        raise AssertionError("unexpected reply " + repr(line))
