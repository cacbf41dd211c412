#!/usr/bin/env python3
"""The structure rules of docs/architecture.md, checked on every test run.

- no source file over 800 lines (src/, tools/, bench/, tests/);
- each folder of src/ includes only its own layer and those below it;
- no include cycle inside a folder (a header and its .cpp count as one concept);
- the scheduler, the tier policy and the planner hold no byte-moving code: they include neither
  the stores, the block storage, the transcoder nor the transfer executor, and call no memcpy.
Exits non-zero naming every violation.
"""
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MAX_LINES = 800

# Each folder of src/ and the folders it may include (besides itself).
LAYERS = {
    "core": set(),
    "quant": {"core"},
    "kvcache": {"core", "quant"},
    "kernels": {"core", "quant"},
    "tiers": {"core", "quant", "kvcache", "kernels"},
    "model": {"core", "quant", "kvcache", "kernels"},
    "engine": {"core", "quant", "kvcache", "kernels", "tiers", "model"},
    "planner": {"core", "quant", "kvcache", "tiers", "model"},
    "sim": {"core", "quant", "kvcache", "kernels", "tiers", "model", "engine", "planner"},
    "server": {"core", "quant", "kvcache", "kernels", "tiers", "model", "engine", "planner"},
}
# Files that decide and must not move KV bytes.
DECIDERS = ["src/engine/scheduler.h", "src/engine/scheduler.cpp", "src/tiers/tier_policy.h",
            "src/tiers/tier_policy.cpp"]
BYTE_MOVERS = {"tiers/tier_stores.h", "tiers/kv_transfer_executor.h", "kvcache/kv_block_storage.h",
               "tiers/kv_block_transcoder.h"}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
SOURCE_EXT = (".h", ".cpp", ".py", ".js", ".html", ".css", ".sh")


def includes(path):
    with open(path, encoding="utf-8") as f:
        return INCLUDE.findall(f.read())


def check_sizes(errors):
    for top in ("src", "tools", "bench", "tests"):
        for dirpath, _, files in os.walk(os.path.join(ROOT, top)):
            if "/data" in dirpath or "/corpus" in dirpath:
                continue
            for name in files:
                if not name.endswith(SOURCE_EXT):
                    continue
                path = os.path.join(dirpath, name)
                with open(path, encoding="utf-8", errors="replace") as f:
                    n = sum(1 for _ in f)
                if n > MAX_LINES:
                    errors.append(f"{os.path.relpath(path, ROOT)}: {n} lines (> {MAX_LINES})")


def check_folder(src, folder, errors):
    fdir = os.path.join(src, folder)
    concept = {}
    for name in sorted(os.listdir(fdir)):
        if not name.endswith((".h", ".cpp")):
            continue
        base = f"{folder}/{name.rsplit('.', 1)[0]}"
        deps = concept.setdefault(base, set())
        for inc in includes(os.path.join(fdir, name)):
            if "/" not in inc:
                continue
            top = inc.split("/")[0]
            if top != folder and top not in LAYERS[folder]:
                errors.append(f"src/{folder}/{name} includes {inc}: {folder} may not depend on {top}")
            dep = inc.rsplit(".", 1)[0]
            if top == folder and dep != base:
                deps.add(dep)
    state = {}

    def visit(node, stack):
        state[node] = 1
        for dep in sorted(concept.get(node, ())):
            if state.get(dep) == 1:
                errors.append("include cycle: " + " -> ".join(stack[stack.index(dep):] + [dep]))
            elif state.get(dep) is None:
                visit(dep, stack + [dep])
        state[node] = 2

    for node in sorted(concept):
        if node not in state:
            visit(node, [node])


def check_deciders(src, errors):
    paths = [os.path.join(ROOT, rel) for rel in DECIDERS]
    paths += [os.path.join(src, "planner", n) for n in sorted(os.listdir(os.path.join(src, "planner")))]
    for path in paths:
        rel = os.path.relpath(path, ROOT)
        for inc in includes(path):
            if inc in BYTE_MOVERS:
                errors.append(f"{rel} includes {inc}: it decides and moves no byte")
        with open(path, encoding="utf-8") as f:
            if re.search(r"\bmem(cpy|move)\b", f.read()):
                errors.append(f"{rel} calls memcpy/memmove: it decides and moves no byte")


def main():
    errors = []
    check_sizes(errors)
    src = os.path.join(ROOT, "src")
    for folder in sorted(os.listdir(src)):
        if not os.path.isdir(os.path.join(src, folder)):
            continue
        if folder not in LAYERS:
            errors.append(f"src/{folder}: a folder with no layer in check_structure.py")
            continue
        check_folder(src, folder, errors)
    check_deciders(src, errors)
    for e in errors:
        print("structure:", e)
    print(f"structure: {len(errors)} violation(s)")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
