"""Self-test of tools/docs_runner.py (CTest docs_runner_selftest): the runner must FAIL when a
doc's claimed output is not what the command prints, so that docs_runnable cannot pass by
checking nothing. Fixture Markdown files use only bash builtins and coreutils (no kvserve)."""
import os
import subprocess
import sys
import tempfile
import textwrap
import time
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RUNNER = os.path.join(ROOT, "tools", "docs_runner.py")
sys.path.insert(0, os.path.join(ROOT, "tools"))
import docs_runner  # noqa: E402

FENCE = "```"


def doc(text):
    return textwrap.dedent(text).replace("'''", FENCE)


class RunnerOnFixtures(unittest.TestCase):
    def run_doc(self, text, *args):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "fixture.md")
            with open(path, "w", encoding="utf-8") as f:
                f.write(doc(text))
            env = dict(os.environ)
            env.pop("CI", None)
            p = subprocess.run([sys.executable, RUNNER, "--file", path, *args], capture_output=True,
                               text=True, timeout=120, env=env)
            return p.returncode, p.stdout + p.stderr

    def test_a_matching_output_passes(self):
        rc, out = self.run_doc("""
            <!-- runnable -->
            '''bash
            printf 'header\\nbytes 1,024 B\\ntook 0.31 s\\nfooter\\n'
            '''
            <!-- output -->
            '''
            bytes 1,024 B
            took ... s
            '''
            """)
        self.assertEqual(rc, 0, out)
        self.assertIn("PASS", out)
        self.assertIn("1 passed, 0 failed", out)

    def test_a_wrong_claimed_output_fails_with_a_diff(self):
        rc, out = self.run_doc("""
            Some prose.

            <!-- runnable -->
            '''bash
            echo 'KV pool 1456 blocks'
            '''
            <!-- output -->
            '''
            KV pool 1455 blocks
            '''
            """)
        self.assertEqual(rc, 1, out)
        self.assertIn("FAIL", out)
        self.assertIn("fixture.md:5 ", out)  # the line of the block's fence
        self.assertIn("-KV pool 1455 blocks", out)
        self.assertIn("+KV pool 1456 blocks", out)

    def test_exact_output_rejects_extra_lines(self):
        text = """
            <!-- runnable -->
            '''bash
            echo a; echo b
            '''
            <!-- output: %s -->
            '''
            a
            '''
            """
        self.assertEqual(self.run_doc(text % "exact")[0], 1)
        self.assertEqual(self.run_doc(text % "stdout")[0], 0)

    def test_lines_must_be_consecutive_unless_elided(self):
        text = """
            <!-- runnable -->
            '''bash
            printf 'a\\nb\\nc\\n'
            '''
            <!-- output -->
            '''
            a
            %s
            c
            '''
            """
        self.assertEqual(self.run_doc(text % "")[0], 1)
        self.assertEqual(self.run_doc(text % "...")[0], 0)

    def test_exit_status_and_streams(self):
        rc, out = self.run_doc("""
            <!-- runnable: exit=3 -->
            '''bash
            echo 'to stdout'
            echo 'kvserve-like error' >&2
            exit 3
            '''
            <!-- output: stderr -->
            '''
            kvserve-like error
            '''
            """)
        self.assertEqual(rc, 0, out)
        rc, out = self.run_doc("""
            <!-- runnable -->
            '''bash
            false
            echo unreachable
            '''
            """)
        self.assertEqual(rc, 1, out)
        self.assertIn("exit status 1, expected 0", out)

    def test_slow_blocks_run_only_with_all_and_files_carry_over(self):
        text = """
            <!-- runnable -->
            '''bash
            echo made > made.txt
            '''
            <!-- runnable: slow -->
            '''bash
            cat made.txt
            '''
            <!-- output -->
            '''
            made
            '''
            """
        rc, out = self.run_doc(text)
        self.assertEqual(rc, 0, out)
        self.assertIn("1 passed", out)
        rc, out = self.run_doc(text, "--all")
        self.assertEqual(rc, 0, out)
        self.assertIn("2 passed", out)

    def test_the_checkout_is_mirrored_and_requires_skips(self):
        rc, out = self.run_doc("""
            <!-- runnable -->
            '''bash
            test -f tools/docs_runner.py
            test -x build/bin/kvserve || test ! -e "$KVSERVE_BIN"
            '''
            <!-- runnable: requires=no/such/file -->
            '''bash
            false
            '''
            """)
        self.assertEqual(rc, 0, out)
        self.assertIn("SKIP", out)

    def test_a_timeout_fails(self):
        rc, out = self.run_doc("""
            <!-- runnable: timeout=1 -->
            '''bash
            sleep 30
            '''
            """)
        self.assertEqual(rc, 1, out)
        self.assertIn("killed after 1 s", out)

    def test_a_server_runs_for_the_later_blocks_and_is_stopped(self):
        with tempfile.TemporaryDirectory() as d:
            pidfile = os.path.join(d, "pid")
            t0 = time.monotonic()
            rc, out = self.run_doc(f"""
                <!-- runnable: server ready="listening" -->
                '''bash
                echo $$ > {pidfile}
                echo 'capacity 11 requests'
                echo 'listening'
                sleep 300
                '''
                <!-- output -->
                '''
                capacity ... requests
                '''
                <!-- runnable -->
                '''bash
                kill -0 "$(cat {pidfile})"
                '''
                """)
            self.assertEqual(rc, 0, out)
            self.assertLess(time.monotonic() - t0, 60)
            with open(pidfile) as f:
                pid = int(f.read())
            with self.assertRaises(ProcessLookupError):
                os.kill(pid, 0)

    def test_markers_shown_inside_a_code_block_are_text(self):
        rc, out = self.run_doc("""
            How to mark a block:

            '''
            <!-- runnable -->
            false
            '''
                <!-- runnable -->
            """)
        self.assertEqual(rc, 0, out)
        self.assertIn("0 passed, 0 failed", out)

    def test_bad_markers_are_errors(self):
        for text in ("""
                <!-- runnable: fast -->
                '''bash
                true
                '''
                """, """
                <!-- runnable -->
                Prose, not a fence.
                """, """
                <!-- output -->
                '''
                orphan
                '''
                """, """
                <!-- runnable: server -->
                '''bash
                true
                '''
                """):
            rc, out = self.run_doc(text)
            self.assertEqual(rc, 1, out)
            self.assertIn("fixture.md", out)


class Matching(unittest.TestCase):
    def test_wildcards(self):
        m = docs_runner.matches
        self.assertTrue(m(["a ... c"], ["x", "a b c", "y"], exact=False))
        self.assertFalse(m(["a ... c"], ["x", "a b c", "y"], exact=True))
        self.assertTrue(m(["...", "a b c", "..."], ["x", "a b c", "y"], exact=True))
        self.assertTrue(m(["a", "...", "c"], ["a", "c"], exact=True))
        self.assertFalse(m(["a", "c"], ["a", "b", "c"], exact=False))
        self.assertTrue(m(["a  "], ["a"], exact=True))  # trailing blanks do not count
        self.assertFalse(m(["1,024 B"], ["1,025 B"], exact=False))
        self.assertTrue(m(["(x.y)"], ["(x.y)"], exact=True))  # no regex in expected text
        self.assertFalse(m(["(x.y)"], ["(xzy)"], exact=True))


if __name__ == "__main__":
    unittest.main()
