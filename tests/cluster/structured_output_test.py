"""Structured output on real processes, through the router and through a mixed worker serving the
API itself, with the official `openai` client: response_format json_schema outputs validate
against their schema (checked by the `jsonschema` package) for schemas with nested objects,
arrays, enums, optional and required fields; json_object outputs parse to an object; vLLM's
guided_regex / guided_choice outputs match; streaming and non-streaming; bad constraints are
refused with 400. The model is the built-in preset with random weights: only the constraint
makes its output well-formed.

Usage: structured_output_test.py STRATA_BINARY   (ctest passes it)
"""
import json
import os
import re
import shutil
import sys
import tempfile
import unittest

import jsonschema
import openai

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cluster_util as cu  # noqa: E402

STRATA = None
MODEL = "structured-model"

SCHEMAS = {
    "person": {
        "type": "object",
        "properties": {
            "name": {"type": "string", "maxLength": 12},
            "age": {"type": "integer"},
            "address": {
                "type": "object",
                "properties": {
                    "street": {"type": "string", "maxLength": 16},
                    "zip": {"type": "string", "pattern": "^[0-9]{5}$"},
                },
                "required": ["street", "zip"],
                "additionalProperties": False,
            },
            "tags": {"type": "array", "items": {"enum": ["red", "green", "blue"]},
                     "maxItems": 3},
        },
        "required": ["name", "age", "address", "tags"],
        "additionalProperties": False,
    },
    "todo_list": {
        "type": "object",
        "properties": {
            "items": {
                "type": "array",
                "minItems": 1,
                "maxItems": 3,
                "items": {
                    "type": "object",
                    "properties": {
                        "id": {"type": "integer"},
                        "kind": {"enum": ["task", "bug", 7, None]},
                        "done": {"type": "boolean"},
                        "when": {"type": "string", "format": "date"},
                    },
                    "required": ["id", "kind", "done", "when"],
                    "additionalProperties": False,
                },
            },
        },
        "required": ["items"],
        "additionalProperties": False,
    },
    "optional_fields": {
        "type": "object",
        "properties": {
            "title": {"type": "string", "maxLength": 10},
            "score": {"anyOf": [{"type": "number"}, {"type": "null"}]},
            "level": {"enum": ["low", "mid", "high"]},
            "ref": {"$ref": "#/$defs/ref"},
        },
        "required": ["level", "ref"],
        "$defs": {"ref": {"type": "object", "properties": {"id": {"type": "string",
                                                                  "format": "uuid"}},
                          "required": ["id"], "additionalProperties": False}},
    },
}


class StructuredOutputTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="strata_structured_test_")
        model = cu.init_model(STRATA, cls.tmp)
        cls.router, cls.worker = cu.start_router_and_mixed(STRATA, model, cls.tmp,
                                                           ["--served-model-name", MODEL])
        cls.http, cls.mixed_http = cls.router.http, cls.worker.http
        cls.ports = {"router": cls.http, "mixed": cls.mixed_http}

    @classmethod
    def tearDownClass(cls):
        cls.worker.stop()
        rc = cls.router.stop()
        shutil.rmtree(cls.tmp, ignore_errors=True)
        assert rc == 0, f"router exited {rc}"

    def client(self, port):
        return openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="none",
                             max_retries=0)

    def chat(self, port, stream, seed, **kwargs):
        """The answer's text and finish reason, streamed or not."""
        args = dict(model=MODEL, messages=[{"role": "user", "content": "Answer in JSON."}],
                    max_tokens=400, temperature=1.0, seed=seed)
        args.update(kwargs)
        client = self.client(port)
        if not stream:
            r = client.chat.completions.create(**args)
            return r.choices[0].message.content, r.choices[0].finish_reason
        text, finish = "", None
        for chunk in client.chat.completions.create(stream=True, **args):
            for c in chunk.choices:
                text += c.delta.content or ""
                finish = c.finish_reason or finish
        return text, finish

    def test_json_schema_outputs_validate(self):
        for where, port in self.ports.items():
            for name, schema in SCHEMAS.items():
                for stream in (False, True):
                    for seed in (1, 2):
                        with self.subTest(where=where, schema=name, stream=stream, seed=seed):
                            text, finish = self.chat(port, stream, seed, response_format={
                                "type": "json_schema",
                                "json_schema": {"name": name, "schema": schema, "strict": True}})
                            self.assertEqual(finish, "stop", text)
                            jsonschema.validate(json.loads(text), schema)

    def test_json_object_outputs_parse(self):
        for where, port in self.ports.items():
            for stream in (False, True):
                with self.subTest(where=where, stream=stream):
                    text, finish = self.chat(port, stream, 3,
                                             response_format={"type": "json_object"})
                    self.assertEqual(finish, "stop", text)
                    self.assertIsInstance(json.loads(text), dict)

    def test_regex_and_choice_on_completions(self):
        pattern = r"[A-Z]{2}-[0-9]{3}( \(ok\))?"
        for where, port in self.ports.items():
            client = self.client(port)
            for stream in (False, True):
                with self.subTest(where=where, stream=stream):
                    args = dict(model=MODEL, prompt="Code:", max_tokens=50, temperature=1.0,
                                seed=5, extra_body={"guided_regex": pattern})
                    if stream:
                        chunks = list(client.completions.create(stream=True, **args))
                        text = "".join(c.choices[0].text for c in chunks if c.choices)
                        finish = [c.choices[0].finish_reason for c in chunks
                                  if c.choices and c.choices[0].finish_reason][-1]
                    else:
                        r = client.completions.create(**args)
                        text, finish = r.choices[0].text, r.choices[0].finish_reason
                    self.assertIsNotNone(re.fullmatch(pattern, text), text)
                    self.assertEqual(finish, "stop")
                    r = client.completions.create(
                        model=MODEL, prompt="Pick:", max_tokens=20, n=3, temperature=1.0,
                        extra_body={"guided_choice": ["yes", "no", "maybe later"]})
                    for c in r.choices:
                        self.assertIn(c.text, ["yes", "no", "maybe later"])
                        self.assertEqual(c.finish_reason, "stop")

    def test_max_tokens_cuts_with_length(self):
        for where, port in self.ports.items():
            with self.subTest(where=where):
                text, finish = self.chat(port, False, 4, max_tokens=3, response_format={
                    "type": "json_schema",
                    "json_schema": {"name": "p", "schema": SCHEMAS["person"]}})
                self.assertEqual(finish, "length")
                self.assertTrue(text.startswith("{"), text)

    def test_bad_constraints_are_refused(self):
        for where, port in self.ports.items():
            client = self.client(port)
            with self.subTest(where=where):
                with self.assertRaises(openai.BadRequestError) as e:
                    client.chat.completions.create(
                        model=MODEL, messages=[{"role": "user", "content": "x"}],
                        response_format={"type": "json_schema", "json_schema": {
                            "name": "n", "schema": {"type": "string", "format": "email"}}})
                self.assertIn("format", str(e.exception))
                with self.assertRaises(openai.BadRequestError) as e:
                    client.completions.create(model=MODEL, prompt="x",
                                              extra_body={"guided_regex": "(a"})
                self.assertIn("regex", str(e.exception))


if __name__ == "__main__":
    STRATA = sys.argv.pop(1)
    unittest.main(verbosity=2)
