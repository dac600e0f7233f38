#!/usr/bin/env python3
"""Structured output's per-token mask cost, strata side by side with xgrammar (PyPI), on the same
constraints and the same vocabulary (a preset's tokenizer.json, by default llama-3.1-8b-shape's
128,256 tokens).

strata: build/bin/grammar_bench (compile, a state's mask by the trie walk and by brute force,
mask + automaton step per generated token cold and warm, one mask applied to a logits row).
xgrammar: GrammarCompiler over TokenizerInfo of the same vocabulary, then per generated token
fill_next_token_bitmask + accept_token (a random allowed token each step, restarting when the
matcher terminates), and apply_token_bitmask_inplace on one CPU logits row.

Usage: scripts/bench_grammar.py [--tokenizer PATH] [--tokens N] [--build DIR]
Needs: `pip install xgrammar` (it brings torch) in the Python that runs this script.
"""
import argparse
import importlib.metadata
import json
import os
import random
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

CASES = [
    {"name": "person (nested object, enum array)", "kind": "json_schema", "spec": json.dumps({
        "type": "object",
        "properties": {
            "name": {"type": "string", "maxLength": 12}, "age": {"type": "integer"},
            "address": {"type": "object", "properties": {
                "street": {"type": "string", "maxLength": 16},
                "zip": {"type": "string", "pattern": "^[0-9]{5}$"}},
                "required": ["street", "zip"], "additionalProperties": False},
            "tags": {"type": "array", "items": {"enum": ["red", "green", "blue"]},
                     "maxItems": 3}},
        "required": ["name", "age", "address", "tags"], "additionalProperties": False})},
    {"name": "todo list (array of objects, date)", "kind": "json_schema", "spec": json.dumps({
        "type": "object",
        "properties": {"items": {"type": "array", "minItems": 1, "maxItems": 3, "items": {
            "type": "object",
            "properties": {"id": {"type": "integer"}, "kind": {"enum": ["task", "bug", 7, None]},
                           "done": {"type": "boolean"},
                           "when": {"type": "string", "format": "date"}},
            "required": ["id", "kind", "done", "when"], "additionalProperties": False}}},
        "required": ["items"], "additionalProperties": False})},
    {"name": "free strings (3 unbounded string fields)", "kind": "json_schema",
     "spec": json.dumps({"type": "object", "properties": {
         "a": {"type": "string"}, "b": {"type": "string"},
         "c": {"type": "array", "items": {"type": "string"}}}, "required": ["a", "b", "c"],
         "additionalProperties": False})},
    {"name": "json_object (any object)", "kind": "json_object", "spec": ""},
    {"name": "regex (phone-like)", "kind": "regex",
     "spec": r"\+?[0-9]{1,3}[ -]?\(?[0-9]{3}\)?[ -]?[0-9]{3}-[0-9]{4}"},
]


def strata_table(build, tokenizer, cases_path, tokens, keep_dir=None):
    argv = [os.path.join(build, "bin", "grammar_bench"), tokenizer, cases_path, str(tokens)]
    if keep_dir:
        argv.append(keep_dir)
    return subprocess.run(argv, check=True, capture_output=True, text=True).stdout


def xgrammar_rows(tokenizer, tokens):
    import torch
    import xgrammar as xgr

    with open(tokenizer, encoding="utf-8") as f:
        tj = json.load(f)
    vocab = dict(tj["model"]["vocab"])
    for t in tj.get("added_tokens", []):
        vocab[t["content"]] = t["id"]
    size = max(vocab.values()) + 1
    encoded = [""] * size
    for tok, i in vocab.items():
        encoded[i] = tok
    stop = [t["id"] for t in tj.get("added_tokens", []) if t["content"] == "<|end_of_text|>"]
    info = xgr.TokenizerInfo(encoded, vocab_type=xgr.VocabType.BYTE_LEVEL, vocab_size=size,
                             stop_token_ids=stop)
    compiler = xgr.GrammarCompiler(info, max_threads=1, cache_enabled=False)
    rows = []
    for case in CASES:
        t0 = time.perf_counter()
        if case["kind"] == "json_schema":
            compiled = compiler.compile_json_schema(case["spec"], any_whitespace=False)
        elif case["kind"] == "json_object":
            compiled = compiler.compile_builtin_json_grammar()
        else:
            compiled = compiler.compile_regex(case["spec"])
        compile_ms = (time.perf_counter() - t0) * 1e3
        matcher = xgr.GrammarMatcher(compiled)
        bitmask = xgr.allocate_token_bitmask(1, size)
        rng = random.Random(1)
        spent = 0.0
        for _ in range(tokens):
            if matcher.is_terminated():
                matcher.reset()
            a = time.perf_counter()
            matcher.fill_next_token_bitmask(bitmask)
            spent += time.perf_counter() - a
            words = bitmask[0].numpy().view("uint32")
            allowed = [w * 32 + b for w in range(len(words)) if words[w]
                       for b in range(32) if (words[w] >> b) & 1 and w * 32 + b < size]
            if not allowed:
                break
            token = rng.choice(allowed)
            a = time.perf_counter()
            matcher.accept_token(token)
            spent += time.perf_counter() - a
        logits = torch.zeros(1, size)
        a = time.perf_counter()
        for _ in range(200):
            xgr.apply_token_bitmask_inplace(logits, bitmask)
        apply_us = (time.perf_counter() - a) / 200 * 1e6
        rows.append(f"| {case['name']} | {compile_ms:.2f} | {spent / tokens * 1e6:.1f} | "
                    f"{apply_us:.0f} |")
    return importlib.metadata.version("xgrammar"), rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokenizer")
    ap.add_argument("--tokens", type=int, default=2000)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="bench_grammar_")
    cases_path = os.path.join(tmp, "cases.json")
    with open(cases_path, "w", encoding="utf-8") as f:
        json.dump(CASES, f)
    print("## strata\n")
    if args.tokenizer:
        tokenizer = args.tokenizer
        print(strata_table(args.build, tokenizer, cases_path, args.tokens))
    else:
        # grammar_bench writes the preset (and keeps it for xgrammar's run).
        model = os.path.join(tmp, "model")
        print(strata_table(args.build, "preset:llama-3.1-8b-shape", cases_path, args.tokens,
                           model))
        tokenizer = os.path.join(model, "tokenizer.json")
    try:
        version, rows = xgrammar_rows(tokenizer, args.tokens)
    except ImportError as e:
        print(f"xgrammar not available ({e}): pip install xgrammar", file=sys.stderr)
        return 1
    print(f"## xgrammar {version}\n")
    print("| constraint | compile ms | fill_next_token_bitmask + accept_token per token, µs | "
          "apply_token_bitmask_inplace on a logits row, µs |\n|---|---|---|---|")
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
