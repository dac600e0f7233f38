"""Tool calling on real processes, through the router and through a mixed worker serving the API
itself, with the official `openai` client: requests with tools, tool_choice (auto, required, a
named function, none), parallel_tool_calls, assistant tool_calls and tool results are rendered
exactly as transformers' apply_chat_template renders them (the prompts of
tests/fixtures/chat_templates/qwen2_5/openai_cases.json, compared token for token through
/tokenize), and answered in streaming and non-streaming form; bad tools are refused with 400.

The model is the built-in preset with the Qwen2.5 chat template (so the hermes parser is picked
automatically). Its random weights do not write tool calls; how calls in the output become
message.tool_calls and delta.tool_calls is tested against scripted output in
tests/openai/frontend_tools_test.cc.

Usage: tools_test.py STRATA_BINARY   (ctest passes it)
"""
import json
import os
import shutil
import sys
import tempfile
import unittest

import openai

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cluster_util as cu  # noqa: E402

STRATA = None
MODEL = "tools-model"
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FAMILY = os.path.join(ROOT, "tests", "fixtures", "chat_templates", "qwen2_5")


def wire_cases():
    with open(os.path.join(FAMILY, "openai_cases.json"), encoding="utf-8") as f:
        return [c for c in json.load(f)["cases"] if "expected" in c]


class ToolsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="strata_tools_test_")
        model = cu.init_model(STRATA, cls.tmp)
        shutil.copy(os.path.join(FAMILY, "template.jinja"),
                    os.path.join(model, "chat_template.jinja"))
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

    def tokenize(self, port, body):
        status, answer = cu.request(port, "POST", "/tokenize", {"model": MODEL, **body})
        self.assertEqual(status, 200, answer)
        return answer["tokens"]

    def test_requests_render_as_transformers_does(self):
        cases = wire_cases()
        self.assertEqual(len(cases), 6)
        for where, port in self.ports.items():
            for case in cases:
                with self.subTest(where=where, case=case["name"]):
                    rendered = self.tokenize(port, case["request"])
                    expected = self.tokenize(port, {"prompt": case["expected"],
                                                    "add_special_tokens": False})
                    self.assertEqual(rendered, expected)

    def check_message(self, message, finish_reason, tool_names):
        self.assertIn(finish_reason, ("stop", "length", "tool_calls"))
        if finish_reason == "tool_calls":
            self.assertTrue(message.tool_calls)
        for call in message.tool_calls or []:
            self.assertTrue(call.id.startswith("call_"))
            self.assertEqual(call.type, "function")
            self.assertIn(call.function.name, tool_names)
            json.loads(call.function.arguments)
        if not message.tool_calls:
            self.assertIsInstance(message.content, str)

    def test_chat_with_tools_round_trips_streaming_and_not(self):
        round_trip = next(c for c in wire_cases() if c["name"] == "round_trip")["request"]
        tools = round_trip["tools"]
        names = [t["function"]["name"] for t in tools]
        choices = ["auto", "required", "none",
                   {"type": "function", "function": {"name": "get_time"}}]
        for where, port in self.ports.items():
            client = self.client(port)
            for choice in choices:
                with self.subTest(where=where, tool_choice=choice):
                    kw = dict(model=MODEL, messages=round_trip["messages"], tools=tools,
                              tool_choice=choice, max_tokens=12, temperature=0,
                              parallel_tool_calls=choice != "required")
                    done = client.chat.completions.create(**kw)
                    self.assertEqual(done.object, "chat.completion")
                    message = done.choices[0].message
                    self.assertEqual(message.role, "assistant")
                    self.check_message(message, done.choices[0].finish_reason, names)
                    self.assertGreater(done.usage.prompt_tokens, 0)

                    content, calls, finish = "", {}, None
                    for chunk in client.chat.completions.create(stream=True, **kw):
                        self.assertEqual(chunk.object, "chat.completion.chunk")
                        delta = chunk.choices[0].delta
                        content += delta.content or ""
                        for call in delta.tool_calls or []:
                            calls.setdefault(call.index, []).append(call)
                        finish = chunk.choices[0].finish_reason or finish
                    self.assertIn(finish, ("stop", "length", "tool_calls"))
                    # Greedy: the stream says what the single answer said.
                    self.assertEqual(content, message.content or "")
                    self.assertEqual(len(calls), len(message.tool_calls or []))
                    self.assertEqual(finish, done.choices[0].finish_reason)

    def test_required_and_named_tool_choice_always_answer_with_valid_calls(self):
        # Random weights never write a tool call by themselves: the calls here come from the
        # output constraint alone, in the hermes syntax the Qwen2.5 template asks for.
        import jsonschema
        tools = [
            {"type": "function", "function": {
                "name": "get_weather", "description": "Weather in a city",
                "parameters": {"type": "object", "properties": {
                    "city": {"type": "string", "maxLength": 16},
                    "days": {"type": "integer"},
                    "unit": {"enum": ["celsius", "fahrenheit"]}},
                    "required": ["city", "unit"], "additionalProperties": False}}},
            {"type": "function", "function": {
                "name": "get_time", "parameters": {"type": "object", "properties": {
                    "zone": {"type": "string", "maxLength": 8}}, "required": ["zone"]}}}]
        schemas = {t["function"]["name"]: t["function"]["parameters"] for t in tools}
        messages = [{"role": "user", "content": "What is the weather in Oslo?"}]
        named = {"type": "function", "function": {"name": "get_weather"}}
        for where, port in self.ports.items():
            client = self.client(port)
            for choice in ("required", named):
                for temperature, seed in ((0, None), (1.0, 3), (1.0, 4)):
                    with self.subTest(where=where, tool_choice=choice, temperature=temperature):
                        kw = dict(model=MODEL, messages=messages, tools=tools, tool_choice=choice,
                                  max_tokens=300, temperature=temperature, seed=seed)
                        done = client.chat.completions.create(**kw)
                        self.assertEqual(done.choices[0].finish_reason, "tool_calls", done)
                        calls = done.choices[0].message.tool_calls
                        self.assertTrue(calls)
                        for call in calls:
                            if choice is named:
                                self.assertEqual(call.function.name, "get_weather")
                            jsonschema.validate(json.loads(call.function.arguments),
                                                schemas[call.function.name])
                        streamed = {}
                        for chunk in client.chat.completions.create(stream=True, **kw):
                            for call in chunk.choices[0].delta.tool_calls or [] if chunk.choices else []:
                                streamed.setdefault(call.index, call)
                        self.assertEqual([streamed[i].function.name for i in sorted(streamed)],
                                         [c.function.name for c in calls])
        # A constrained tool call and response_format at once: refused.
        with self.assertRaises(openai.BadRequestError) as e:
            self.client(self.http).chat.completions.create(
                model=MODEL, messages=messages, tools=tools, tool_choice="required",
                response_format={"type": "json_object"})
        self.assertEqual(e.exception.body.get("param"), "tool_choice")

    def test_prompt_with_tools_differs_from_tool_choice_none(self):
        case = next(c for c in wire_cases() if c["name"] == "tools_auto")["request"]
        with_tools = self.tokenize(self.http, case)
        without = self.tokenize(self.http, {**case, "tool_choice": "none"})
        self.assertGreater(len(with_tools), len(without))

    def test_bad_tools_are_400(self):
        tools = wire_cases()[0]["request"]["tools"]
        messages = [{"role": "user", "content": "hi"}]
        bad = [
            ({"tools": tools, "tool_choice": {"type": "function", "function": {"name": "nope"}}},
             "tool_choice.function.name", "no function named 'nope'"),
            ({"tools": [{"type": "function", "function": {"name": "has space"}}]},
             "tools[0].function.name", "1 to 64 characters"),
            ({"tools": [{"type": "retrieval"}]}, "tools[0].type", "function"),
            ({"tool_choice": "required"}, "tool_choice", "only allowed when tools"),
            ({"functions": [{"name": "f", "parameters": {}}]}, "functions",
             "send tools and tool_choice instead"),
        ]
        for where, port in self.ports.items():
            client = self.client(port)
            for extra, param, message in bad:
                with self.subTest(where=where, param=param):
                    with self.assertRaises(openai.BadRequestError) as raised:
                        client.chat.completions.create(model=MODEL, messages=messages,
                                                       max_tokens=2, extra_body=extra)
                    error = raised.exception.body
                    self.assertEqual(error["param"], param)
                    self.assertIn(message, error["message"])


if __name__ == "__main__":
    STRATA = sys.argv.pop(1)
    unittest.main(verbosity=2)
