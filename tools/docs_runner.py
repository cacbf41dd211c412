#!/usr/bin/env python3
"""Runs the command blocks of README.md and docs/*.md that are marked runnable, and checks the
output the text claims for them (docs/architecture.md, "Docs that run"). Standard library only.

    tools/docs_runner.py [--fast | --all] [--file F ...] [--list]

A block is marked by an HTML comment (invisible when rendered) on the line before its fence:

    <!-- runnable -->                 runs in CI (--fast, the default) and with --all
    <!-- runnable: slow -->           only with --all
    <!-- runnable: exit=1 -->         the block must end with this status (default 0)
    <!-- runnable: timeout=300 -->    seconds before it is killed (default 120, slow 1800)
    <!-- runnable: requires=PATH -->  skipped when PATH (as the block sees it) does not exist
    <!-- runnable: server ready="TEXT" -->
                                      runs in the background until its output shows TEXT; the
                                      file's later blocks run while it is up; it is stopped
                                      (SIGTERM, then SIGKILL) after the file's last block

Options combine: `<!-- runnable: slow timeout=600 requires=../shared/x.jsonl -->`.

A fence marked `<!-- output -->` after a runnable block (prose may come between) is what that
block prints (stdout and stderr together; `<!-- output: stdout -->` or `stderr` for one): its
lines must appear in the output as one run of consecutive lines; `<!-- output: exact -->` must
be the whole output. Lines are compared without trailing blanks; a line that is only `...`
stands for any number of lines, and `...` inside a line for any text (timings, paths).

Every block of a file runs with `bash -e` in one scratch directory per file that mirrors the
checkout: the checkout's top-level entries are symlinked there (so `tests/data/...`,
`docs/examples/...`, `data/...` resolve), `build/bin/kvserve` and `kvserve` on PATH are a copy
of $KVSERVE_BIN (default build/bin/kvserve: a rebuild under the run cannot change it), and
`../shared` is the checkout's sibling `shared` when there is one. Files a block writes stay in
the scratch directory for the file's later blocks. The default model comes from
~/.cache/kvserve/models (scripts/fetch-model); a block that calls kvserve skips without the
binary or the model, and fails under CI=true.
"""
import argparse
import difflib
import fcntl
import glob
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODEL_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
MARKER = re.compile(r"^<!--\s*(runnable|output)\s*(?::(.*?))?\s*-->\s*$")
FENCE = re.compile(r"^(```+|~~~+)\s*([\w+-]*)\s*$")
RUN_FLAGS = {"slow", "server"}
RUN_KEYS = {"exit", "timeout", "requires", "ready"}
OUT_FLAGS = {"exact", "stdout", "stderr"}
ELLIPSIS = "..."


def shown(path):
    """A path as reports show it: relative to the checkout when inside it."""
    rel = os.path.relpath(path, ROOT)
    return path if rel.startswith("..") else rel


class DocError(Exception):
    """A marker the runner cannot use: a lint error, reported with file:line."""


class Output:
    def __init__(self, path, line, flags, lines):
        self.path, self.line, self.flags, self.lines = path, line, flags, lines

    @property
    def stream(self):
        return "stdout" if "stdout" in self.flags else "stderr" if "stderr" in self.flags else "both"


class Block:
    def __init__(self, path, line, flags, opts, code):
        self.path, self.line, self.flags, self.opts, self.code = path, line, flags, opts, code
        self.outputs = []

    @property
    def where(self):
        return f"{shown(self.path)}:{self.line}"

    @property
    def slow(self):
        return "slow" in self.flags

    @property
    def server(self):
        return "server" in self.flags

    def timeout(self):
        return float(self.opts.get("timeout", 1800 if self.slow else 120))


def parse_options(text, flags_allowed, keys_allowed, where):
    flags, opts = set(), {}
    try:
        words = shlex.split(text or "")
    except ValueError as e:
        raise DocError(f"{where}: cannot parse the marker's options: {e}")
    for w in words:
        if "=" in w:
            k, v = w.split("=", 1)
            if k not in keys_allowed:
                raise DocError(f"{where}: unknown option '{k}=' (known: {', '.join(sorted(keys_allowed))})")
            opts[k] = v
        elif w in flags_allowed:
            flags.add(w)
        else:
            known = ", ".join(sorted(flags_allowed | {k + "=" for k in keys_allowed}))
            raise DocError(f"{where}: unknown option '{w}' (known: {known})")
    return flags, opts


def parse_file(path):
    """The runnable blocks of one Markdown file, each with the output blocks that follow it."""
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    rel = shown(path)
    blocks, i = [], 0
    while i < len(lines):
        m = MARKER.match(lines[i])  # at column 0
        if not m:
            fence = FENCE.match(lines[i])
            if fence:  # an unmarked block: a marker shown inside it is an example, not a marker
                i += 1
                while i < len(lines) and lines[i].strip() != fence.group(1):
                    i += 1
            i += 1
            continue
        kind, where = m.group(1), f"{rel}:{i + 1}"
        j = i + 1
        while j < len(lines) and not lines[j].strip():
            j += 1
        fence = FENCE.match(lines[j]) if j < len(lines) else None
        if not fence:
            raise DocError(f"{where}: <!-- {kind} --> must be followed by a fenced block (```)")
        end = j + 1
        while end < len(lines) and lines[end].strip() != fence.group(1):
            end += 1
        if end == len(lines):
            raise DocError(f"{rel}:{j + 1}: the fence is never closed")
        body = lines[j + 1:end]
        if kind == "runnable":
            flags, opts = parse_options(m.group(2), RUN_FLAGS, RUN_KEYS, where)
            if "server" in flags and "ready" not in opts:
                raise DocError(f"{where}: a server block needs ready=\"TEXT\"")
            if "ready" in opts and "server" not in flags:
                raise DocError(f"{where}: ready= is for server blocks")
            for k in ("exit", "timeout"):
                if k in opts and not re.fullmatch(r"\d+", opts[k]):
                    raise DocError(f"{where}: {k}= takes a whole number")
            blocks.append(Block(path, j + 1, flags, opts, "\n".join(body) + "\n"))
        else:
            if not blocks:
                raise DocError(f"{where}: <!-- output --> with no runnable block before it")
            flags, _ = parse_options(m.group(2), OUT_FLAGS, set(), where)
            if {"stdout", "stderr"} <= flags:
                raise DocError(f"{where}: stdout and stderr together is the default; give neither")
            if blocks[-1].server and "exact" in flags:
                raise DocError(f"{where}: a server's output cannot be exact (it is still running)")
            blocks[-1].outputs.append(Output(path, j + 1, flags, body))
        i = end + 1
    return blocks


# ---- matching -------------------------------------------------------------------------------

def line_pattern(expected):
    """A regex for one expected line: `...` inside it matches any text."""
    parts = expected.rstrip().split(ELLIPSIS)
    return re.compile(".*".join(re.escape(p) for p in parts), re.S)


def matches(expected, actual, exact):
    """True when the expected lines match the actual ones (see the module docstring)."""
    pats = []
    if not exact:
        pats.append(None)
    for e in expected:
        pats.append(None if e.strip() == ELLIPSIS else line_pattern(e))
    if not exact:
        pats.append(None)
    act = [a.rstrip() for a in actual]
    # ok[j] after step i: the first i patterns match the first j actual lines.
    ok = [True] + [False] * len(act)
    for p in pats:
        new = [False] * (len(act) + 1)
        if p is None:
            seen = False
            for j in range(len(act) + 1):
                seen = seen or ok[j]
                new[j] = seen
        else:
            for j in range(1, len(act) + 1):
                new[j] = ok[j - 1] and p.fullmatch(act[j - 1]) is not None
        ok = new
    return ok[len(act)]


def show_diff(expected, actual):
    """A unified diff of what the doc claims against what ran; actual lines that match an
    expected line's wildcards are shown as that line, so only real differences remain."""
    exp = [e.rstrip() for e in expected if e.strip() != ELLIPSIS]
    pats = [line_pattern(e) for e in exp]
    act = []
    for a in (x.rstrip() for x in actual):
        hit = next((e for e, p in zip(exp, pats) if p.fullmatch(a)), None)
        act.append(hit if hit is not None else a)
    # Trim the actual output to the region the expected lines touch (plus context).
    idx = [k for k, a in enumerate(act) if a in exp]
    if idx:
        act = act[max(0, idx[0] - 3):idx[-1] + 4]
    diff = difflib.unified_diff(exp, act, "the doc", "the output", lineterm="", n=2)
    return "\n".join(diff)


# ---- running --------------------------------------------------------------------------------

def running_in_ci():
    return os.environ.get("CI", "") not in ("", "0", "false")


def model_path():
    d = os.environ.get("KVSERVE_MODEL_DIR", os.path.expanduser("~/.cache/kvserve/models"))
    return os.path.join(d, MODEL_NAME)


def make_workdir(kvserve_bin):
    """A scratch directory mirroring the checkout; returns (top, cwd, bin_dir)."""
    top = tempfile.mkdtemp(prefix="kvserve-docs-")
    cwd = os.path.join(top, os.path.basename(ROOT))
    os.mkdir(cwd)
    for name in os.listdir(ROOT):
        if name.startswith(".") or name == "build":
            continue
        os.symlink(os.path.join(ROOT, name), os.path.join(cwd, name))
    os.makedirs(os.path.join(cwd, "build", "bin"))
    bench = os.path.join(ROOT, "build", "bench")
    if os.path.isdir(bench):
        os.symlink(bench, os.path.join(cwd, "build", "bench"))
    shared = os.path.join(os.path.dirname(ROOT), "shared")
    if os.path.isdir(shared):
        os.symlink(shared, os.path.join(top, "shared"))
    bin_dir = os.path.join(top, "bin")
    os.mkdir(bin_dir)
    if kvserve_bin:
        exe = os.path.join(cwd, "build", "bin", "kvserve")
        shutil.copy2(kvserve_bin, exe)  # a rebuild of the original cannot change this run
        os.symlink(exe, os.path.join(bin_dir, "kvserve"))
    return top, cwd, bin_dir


def stop_group(proc, grace=10.0):
    """Ends a block's whole process group: SIGTERM, then SIGKILL after `grace` seconds."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # anything the block left behind in its group
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait()


class Runner:
    def __init__(self, kvserve_bin, verbose):
        self.kvserve_bin, self.verbose = kvserve_bin, verbose
        self.passed = self.failed = self.skipped = 0
        self.servers = []
        self.server_lock = None

    def report(self, status, block, seconds, detail=""):
        tags = " ".join(sorted(block.flags))
        line = f"{status:4} {block.where}" + (f" [{tags}]" if tags else "") + f" ({seconds:.1f} s)"
        print(line + (f": {detail}" if detail and status != "FAIL" else ""), flush=True)
        if status == "FAIL" and detail:
            print("\n".join("     " + d for d in detail.rstrip().split("\n")), flush=True)
        if status == "PASS":
            self.passed += 1
        elif status == "SKIP":
            self.skipped += 1
        else:
            self.failed += 1

    def env(self, bin_dir):
        env = dict(os.environ)
        env["PATH"] = bin_dir + os.pathsep + env.get("PATH", "")
        env["KVSERVE_BIN"] = os.path.join(bin_dir, "kvserve")
        env.setdefault("LC_ALL", "C.UTF-8")
        return env

    def missing(self, block, cwd):
        """(why, fails_under_ci) when the block cannot run here, else None. A `requires=` path
        outside the checkout (../shared) skips even under CI, as tests/sim's trace test does;
        the binary and the model are what scripts/test provides, so under CI their absence
        fails."""
        req = block.opts.get("requires")
        if req and not os.path.exists(os.path.join(cwd, os.path.expanduser(req))):
            return f"requires {req}, which is not there", False
        if re.search(r"\bkvserve\b", block.code):
            if not self.kvserve_bin:
                return "needs the kvserve binary ($KVSERVE_BIN, default build/bin/kvserve)", True
            if not os.path.exists(model_path()):
                return f"needs the default model {model_path()} (scripts/fetch-model)", True
        return None

    def check_outputs(self, block, out, err, both):
        problems = []
        for o in block.outputs:
            text = {"stdout": out, "stderr": err, "both": both}[o.stream]
            lines = text.split("\n")
            if lines and lines[-1] == "":
                lines.pop()
            if not matches(o.lines, lines, "exact" in o.flags):
                rel = shown(o.path)
                what = "is not the output" if "exact" in o.flags else "does not appear in the output"
                problems.append(f"the output claimed at {rel}:{o.line} {what} "
                                f"({o.stream}):\n{show_diff(o.lines, lines)}")
        return problems

    def run_block(self, block, cwd, bin_dir, n):
        t0 = time.monotonic()
        missing = self.missing(block, cwd)
        if missing:
            why, fails_under_ci = missing
            if fails_under_ci and running_in_ci():
                self.report("FAIL", block, 0, f"{why} (a failure because CI is set)")
            else:
                self.report("SKIP", block, 0, why)
            return
        script = os.path.join(os.path.dirname(cwd), f".block-{n}.sh")
        with open(script, "w", encoding="utf-8") as f:
            f.write(block.code)
        if block.server:
            return self.start_server(block, cwd, bin_dir, script, t0)
        separate = any(o.stream != "both" for o in block.outputs)
        proc = subprocess.Popen(["bash", "-e", script], cwd=cwd, env=self.env(bin_dir),
                                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE if separate else subprocess.STDOUT,
                                start_new_session=True)
        try:
            out, err = proc.communicate(timeout=block.timeout())
        except subprocess.TimeoutExpired:
            stop_group(proc, grace=2)
            out, err = proc.communicate()
            text = (out or b"").decode("utf-8", "replace")
            self.report("FAIL", block, time.monotonic() - t0,
                        f"killed after {block.timeout():.0f} s (timeout=); its output:\n{tail(text)}")
            return
        finally:
            stop_group(proc, grace=2)
        out = out.decode("utf-8", "replace")
        err = (err or b"").decode("utf-8", "replace")
        both = out + err if separate else out
        want = int(block.opts.get("exit", 0))
        problems = []
        if proc.returncode != want:
            problems.append(f"exit status {proc.returncode}, expected {want}; its output:\n{tail(both)}")
        else:
            problems += self.check_outputs(block, out if separate else both, err, both)
        if self.verbose:
            print(both, flush=True)
        self.report("FAIL" if problems else "PASS", block, time.monotonic() - t0, "\n".join(problems))

    def take_server_lock(self):
        """Server blocks use the port their text shows (8000): two docs runs on one machine (two
        people's ctest) take turns instead of failing on the port."""
        if self.server_lock:
            return
        self.server_lock = open(os.path.join(tempfile.gettempdir(), "kvserve-docs-server.lock"), "w")
        try:
            fcntl.flock(self.server_lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            print("     (waiting for another docs run's server to stop)", flush=True)
            fcntl.flock(self.server_lock, fcntl.LOCK_EX)

    def start_server(self, block, cwd, bin_dir, script, t0):
        self.take_server_lock()
        t0 = time.monotonic()
        log_path = script[:-3] + ".log"
        log = open(log_path, "wb")
        proc = subprocess.Popen(["bash", "-e", script], cwd=cwd, env=self.env(bin_dir),
                                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
        log.close()
        self.servers.append(proc)
        ready = block.opts["ready"]
        deadline = time.monotonic() + block.timeout()
        while True:
            with open(log_path, encoding="utf-8", errors="replace") as f:
                text = f.read()
            if ready in text:
                break
            if proc.poll() is not None or time.monotonic() > deadline:
                what = (f"exited with status {proc.returncode}" if proc.poll() is not None
                        else f"not ready after {block.timeout():.0f} s")
                self.report("FAIL", block, time.monotonic() - t0,
                            f"{what} before printing '{ready}'; its output:\n{tail(text)}")
                return
            time.sleep(0.1)
        problems = self.check_outputs(block, text, "", text)
        self.report("FAIL" if problems else "PASS", block, time.monotonic() - t0, "\n".join(problems))

    def stop_servers(self):
        while self.servers:
            stop_group(self.servers.pop())
        if self.server_lock:
            self.server_lock.close()  # releases the flock
            self.server_lock = None

    def run_file(self, blocks):
        top, cwd, bin_dir = make_workdir(self.kvserve_bin)
        try:
            for n, block in enumerate(blocks):
                self.run_block(block, cwd, bin_dir, n)
        finally:
            self.stop_servers()
            shutil.rmtree(top, ignore_errors=True)


def tail(text, lines=40):
    rows = text.rstrip("\n").split("\n")
    return "\n".join((["..."] if len(rows) > lines else []) + rows[-lines:])


def default_files():
    return [os.path.join(ROOT, "README.md")] + sorted(glob.glob(os.path.join(ROOT, "docs", "*.md")))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--fast", action="store_true", help="the blocks not marked slow (CI; the default)")
    mode.add_argument("--all", action="store_true", help="every runnable block, slow ones too")
    ap.add_argument("--file", action="append", default=[], help="only this Markdown file (repeatable)")
    ap.add_argument("--list", action="store_true", help="list the runnable blocks and exit")
    ap.add_argument("-v", "--verbose", action="store_true", help="print every block's output")
    args = ap.parse_args(argv)

    files = [os.path.abspath(f) for f in args.file] or default_files()
    lint_errors, per_file = [], []
    for path in files:
        try:
            per_file.append(parse_file(path))
        except (DocError, OSError) as e:
            lint_errors.append(str(e))
    for e in lint_errors:
        print(f"FAIL {e}", flush=True)

    if args.list:
        for blocks in per_file:
            for b in blocks:
                tags = " ".join(sorted(b.flags)) or "fast"
                first = next((l for l in b.code.split("\n") if l.strip()), "")
                print(f"{b.where:28} {tags:12} {len(b.outputs)} output(s)  {first[:70]}")
        return 1 if lint_errors else 0

    kvserve_bin = os.path.abspath(os.environ.get("KVSERVE_BIN", os.path.join(ROOT, "build", "bin", "kvserve")))
    if not os.path.isfile(kvserve_bin):
        kvserve_bin = None
    runner = Runner(kvserve_bin, args.verbose)
    # ctest's timeout (SIGTERM) and Ctrl-C still stop every server and remove the scratch dirs.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    t0 = time.monotonic()
    try:
        for blocks in per_file:
            selected = [b for b in blocks if args.all or not b.slow]
            if selected:
                runner.run_file(selected)
    except KeyboardInterrupt:
        runner.stop_servers()
        return 130
    total = time.monotonic() - t0
    print(f"docs: {runner.passed} passed, {runner.failed + len(lint_errors)} failed, "
          f"{runner.skipped} skipped in {total:.1f} s ({'all' if args.all else 'fast'} set)", flush=True)
    return 1 if runner.failed or lint_errors else 0


if __name__ == "__main__":
    sys.exit(main())
