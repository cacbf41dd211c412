"""bench/results_cache.py: results kept between runs, llama.cpp's final estimate, and generated
blocks written between their markers with the text around them kept."""
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))), "bench"))
import results_cache  # noqa: E402


class Cached(unittest.TestCase):
    def test_a_stored_result_is_read_back_and_not_run_again(self):
        with tempfile.TemporaryDirectory() as d:
            runs = []
            fn = lambda: runs.append(1) or {"ppl": 4.0}  # noqa: E731
            self.assertEqual(results_cache.cached(d, "x", fn), {"ppl": 4.0})
            self.assertEqual(results_cache.cached(d, "x", fn), {"ppl": 4.0})
            self.assertEqual(len(runs), 1)
            # Render-only: what is not stored is None, and nothing runs.
            self.assertIsNone(results_cache.cached(d, "y", fn, render_only=True))
            self.assertEqual(len(runs), 1)
            # A failed run (None) is not stored: the next run tries again.
            self.assertIsNone(results_cache.cached(d, "z", lambda: None))
            self.assertFalse(os.path.exists(os.path.join(d, "z.json")))


class LlamaFinalPerplexity(unittest.TestCase):
    def test_the_final_estimate_or_none(self):
        self.assertEqual(results_cache.llama_final_perplexity(
            "[1]4.1,[2]4.2,\nFinal estimate: PPL = 4.3546 +/- 0.02\n"), 4.3546)
        self.assertIsNone(results_cache.llama_final_perplexity("error: model not found\n"))


class SpliceGenerated(unittest.TestCase):
    def test_one_named_block_is_replaced_and_the_rest_kept(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "doc.md")
            with open(path, "w") as f:
                f.write("intro\n<!-- B -->\nold\n<!-- E -->\nmiddle\n<!-- B x -->\nold x\n"
                        "<!-- E x -->\nend\n")
            results_cache.splice_generated(path, "<!-- B x -->", "<!-- E x -->", "new x\n")
            with open(path) as f:
                self.assertEqual(f.read(), "intro\n<!-- B -->\nold\n<!-- E -->\nmiddle\n"
                                           "<!-- B x -->\nnew x\n<!-- E x -->\nend\n")

    def test_missing_markers_are_an_error_unless_a_new_doc_is_given(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "doc.md")
            with open(path, "w") as f:
                f.write("hand-written\n")
            with self.assertRaises(SystemExit):
                results_cache.splice_generated(path, "<!-- B -->", "<!-- E -->", "t\n")
            with open(path) as f:
                self.assertEqual(f.read(), "hand-written\n")  # left as it was
            results_cache.splice_generated(path, "<!-- B -->", "<!-- E -->", "t\n", new_doc="")
            with open(path) as f:
                self.assertEqual(f.read(), "hand-written\n\n<!-- B -->\nt\n<!-- E -->\n")
            fresh = os.path.join(d, "fresh.md")
            results_cache.splice_generated(fresh, "<!-- B -->", "<!-- E -->", "t\n",
                                           new_doc="# T\n\n<!-- B -->\n<!-- E -->\n")
            with open(fresh) as f:
                self.assertEqual(f.read(), "# T\n\n<!-- B -->\nt\n<!-- E -->\n")


if __name__ == "__main__":
    unittest.main()
