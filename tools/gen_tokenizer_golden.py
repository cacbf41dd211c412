#!/usr/bin/env python3
"""Writes tests/data/tokenizer_golden.json: token ids of a varied corpus under the default model's
(SmolLM2-135M-Instruct) vocabulary, computed by an independent implementation, Hugging Face
`tokenizers`, built from the GGUF's vocabulary and merges.

The HF tokenizer mirrors what SmolLM2's tokenizer.json declares: a BPE model, pre-tokenizer
Sequence([Digits(individual_digits=True), ByteLevel(add_prefix_space=False, use_regex=True)]),
ByteLevel decoder, and the GGUF's control tokens (token_type 3) added as special tokens.

Cases with "parse_special": false are encoded with encode_special_tokens=True, i.e. special token
text is tokenized as ordinary text (the C++ encode(..., parse_special=false)).

Not run by CI. Pinned dependencies (pip):
    gguf==0.17.1  numpy==1.26.4  tokenizers==0.20.3
Usage:
    scripts/fetch-model
    python3 tools/gen_tokenizer_golden.py [model.gguf] [out.json]
"""
import hashlib
import json
import os
import sys

import gguf
from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_MODEL = os.path.join(
    os.environ.get("KVSERVE_MODEL_DIR", os.path.expanduser("~/.cache/kvserve/models")),
    "SmolLM2-135M-Instruct.Q4_1.gguf",
)

CHATML = (
    "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face"
    "<|im_end|>\n<|im_start|>user\nWhat is the capital of France?<|im_end|>\n"
    "<|im_start|>assistant\nThe capital of France is Paris.<|im_end|>\n"
    "<|im_start|>user\nAnd of Japan? 日本<|im_end|>\n<|im_start|>assistant\n"
)

CORPUS = [
    # Empty and whitespace.
    "",
    " ",
    "  ",
    "\n",
    "\t",
    "hello world",
    "Hello World!",
    " leading space",
    "trailing spaces   ",
    "multiple    spaces between",
    "tabs\tand\t\ttabs",
    "new\nlines\n\nand\n\n\nmore",
    "mixed \t\n  whitespace\r\n runs \n\t ",
    "\u00a0non-breaking\u00a0space and ideographic\u3000space",
    # Digits and numbers.
    "1",
    "12345678901234567890",
    "3.14159 and 2,718.28 and -42 and 1e-9",
    "Version 2.0.1 released on 2024-11-29 at 09:45",
    "phone: +1 (555) 123-4567",
    "x1y22z333",
    "superscript x² and Arabic-Indic ٣٤٥ and Roman Ⅻ",
    # Punctuation.
    "Hello, world! How are you? I'm fine... really!!!",
    "a--b---c----d",
    "!!!???...,,,;;;:::",
    "quotes \"double\" and 'single' and `backtick`",
    "(parens) [brackets] {braces} <angles>",
    "email@example.com https://huggingface.co/HuggingFaceTB/SmolLM2-135M-Instruct?x=1&y=2#top",
    # Contractions, both cases.
    "it's we're they'll I've she'd I'm don't",
    "IT'S WE'RE THEY'LL I'VE SHE'D I'M DON'T",
    "the cat's toy and the cats' toys",
    "'s 't 're 've 'm 'll 'd",
    # Accents and other scripts.
    "café naïve résumé Zürich São Paulo",
    "e\u0301 (e + combining acute) vs é",
    "Привет, мир! Как дела?",
    "Γειά σου Κόσμε",
    "مرحبا بالعالم",
    "שלום עולם",
    "नमस्ते दुनिया",
    "你好，世界！这是一个测试。",
    "日本語のテキストとカタカナ、ひらがな。",
    "한국어 텍스트입니다",
    "ภาษาไทย",
    "mixed: English, русский, 中文, العربية, and 123 numbers",
    # Emoji, including ZWJ sequences, flags and skin tones.
    "😀",
    "I love 🍕 and 🚀!",
    "👨‍👩‍👧‍👦 family",
    "👍🏽 thumbs up, 🏳️‍🌈 flag, 🇫🇷 France",
    "❤️‍🔥 heart on fire",
    # Code.
    "def add(a, b):\n    return a + b\n",
    "for (int i = 0; i < n; ++i) {\n\tsum += x[i] * 2;\n}\n",
    "#include <vector>\nint main() { std::vector<int> v{1, 2, 3}; return v.size(); }",
    '{"key": [1, 2, {"nested": null}], "ok": true}',
    "SELECT * FROM users WHERE id = 42 AND name LIKE '%bob%';",
    "    indented with four spaces\n        and eight",
    # Special tokens.
    "<|im_start|>user\nhi<|im_end|>",
    "<|endoftext|>",
    "text<|im_end|>more text<|im_start|>",
    "<|im_start|><|im_end|><|endoftext|>",
    "<|im_start|",
    "<repo_name>kvserve<file_sep>src/main.cpp",
    CHATML,
    # A paragraph of prose.
    "The quick brown fox jumps over the lazy dog. Tokenizers split text into pieces, map bytes "
    "to a printable alphabet and merge frequent pairs, most frequent first; the result is a "
    "sequence of integers that a language model can read. In 2019, GPT-2 popularized byte-level "
    "BPE, and many models since then have kept it.",
]

# Special-token text encoded as ordinary text (parse_special=false).
PLAIN_CASES = [
    "<|im_start|>user\nhi<|im_end|>",
    "<|endoftext|>",
    CHATML,
]


def field(reader, key):
    return reader.fields[key].contents()


def main():
    model = sys.argv[1] if len(sys.argv) > 1 else DEFAULT_MODEL
    out = sys.argv[2] if len(sys.argv) > 2 else os.path.join(ROOT, "tests/data/tokenizer_golden.json")
    with open(model, "rb") as f:
        sha = hashlib.sha256(f.read()).hexdigest()
    r = gguf.GGUFReader(model)
    assert field(r, "tokenizer.ggml.model") == "gpt2"
    assert field(r, "tokenizer.ggml.pre") == "smollm"
    tokens = field(r, "tokenizer.ggml.tokens")
    types = field(r, "tokenizer.ggml.token_type")
    merges = field(r, "tokenizer.ggml.merges")
    vocab = {t: i for i, t in enumerate(tokens)}
    assert len(vocab) == len(tokens), "duplicate tokens"

    bpe = models.BPE(vocab=vocab, merges=[tuple(m.split(" ", 1)) for m in merges])
    tok = Tokenizer(bpe)
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    specials = [t for t, ty in zip(tokens, types) if ty == 3]
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in specials])
    for t in specials:
        assert tok.token_to_id(t) == vocab[t]

    assert len(CORPUS) >= 40
    cases = []
    for parse_special, texts in ((True, CORPUS), (False, PLAIN_CASES)):
        tok.encode_special_tokens = not parse_special
        for text in texts:
            ids = tok.encode(text, add_special_tokens=False).ids
            back = tok.decode(ids, skip_special_tokens=False)
            assert back == text, (text, back)
            case = {"text": text, "ids": ids}
            if not parse_special:
                case["parse_special"] = False
            cases.append(case)

    golden = {
        "generator": "tools/gen_tokenizer_golden.py (HF tokenizers %s)" % __import__("tokenizers").__version__,
        "model": os.path.basename(model),
        "model_sha256": sha,
        "cases": cases,
    }
    # One case per line keeps the file small and its diffs readable.
    lines = [json.dumps(c, ensure_ascii=False) for c in cases]
    head = json.dumps({k: v for k, v in golden.items() if k != "cases"}, ensure_ascii=False)
    with open(out, "w", encoding="utf-8") as f:
        f.write(head[:-1] + ',\n "cases": [\n  ' + ",\n  ".join(lines) + "\n ]\n}\n")
    print(f"wrote {out}: {len(cases)} cases")


if __name__ == "__main__":
    main()
