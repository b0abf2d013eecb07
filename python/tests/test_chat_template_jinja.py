"""qkv's Jinja interpreter (qkv.text.render_chat_template) against jinja2 as
transformers runs chat templates (transformers' own render_jinja_template:
ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks, loopcontrols, its
tojson, raise_exception, strftime_now and namespace), which is the oracle.

The published templates of SmolLM2, Qwen 2.5, Qwen 3, Gemma 3 and Llama 3.2
(tests/data/chat_templates/, see its README) are rendered on hand-written
conversations and on fuzzed ones (fixed seed) and the texts compared exactly;
where jinja2 raises, qkv must raise too. Snippets hold single features of the
language to jinja2 the same way, and the built-in templates to the published
templates of their families.
"""

import random
import struct

import pytest

import qkv
from model_files import ROOT, SMOLLM2_GGUF

pytest.importorskip("jinja2")
chat_template_utils = pytest.importorskip("transformers.utils.chat_template_utils")

TEMPLATES = ROOT / "tests" / "data" / "chat_templates"
NAMES = ["smollm2", "qwen2.5", "qwen3", "gemma3", "llama3.2"]
TOKENS = {"bos_token": "<s>", "eos_token": "</s>"}


def template(name):
    return (TEMPLATES / f"{name}.jinja").read_text(encoding="utf-8")


def reference(source, messages, add_generation_prompt, **variables):
    """jinja2's text, or the exception it raised."""
    try:
        rendered, _ = chat_template_utils.render_jinja_template(
            [messages], chat_template=source, add_generation_prompt=add_generation_prompt,
            **variables)
        return rendered[0]
    except Exception as e:  # noqa: BLE001 (any jinja2 error is an expected outcome)
        return e


def ours(source, messages, add_generation_prompt, **variables):
    try:
        return qkv.text.render_chat_template(source, messages, add_generation_prompt,
                                             **variables)
    except (ValueError, TypeError) as e:
        return e


def assert_same(source, messages, add_generation_prompt=False, **variables):
    expected = reference(source, messages, add_generation_prompt, **variables)
    got = ours(source, messages, add_generation_prompt, **variables)
    if isinstance(expected, Exception):
        assert isinstance(got, Exception), (messages, expected, got)
        if "raise_exception" in source and type(expected).__name__ == "TemplateError":
            assert str(expected) in str(got), (expected, got)
    else:
        assert got == expected, (messages, variables)


def m(role, content, **extra):
    return {"role": role, "content": content, **extra}


CONVERSATIONS = [
    [],
    [m("user", "Hi!")],
    [m("user", "")],
    [m("system", "Be brief."), m("user", "What is 2+2?")],
    [m("system", "")],
    [m("system", "  padded system  \n"), m("user", "\n  padded user \t")],
    [m("user", "Tell me a joke."), m("assistant", "Why did the chicken cross the road?"),
     m("user", "Why?\nI don't know. 😀")],
    [m("system", "S"), m("user", "a"), m("assistant", "b"), m("user", "c"), m("assistant", "d")],
    [m("assistant", "I start."), m("user", "late")],
    [m("user", "a"), m("user", "b")],
    [m("user", "x"), m("system", "a system message in the middle"), m("assistant", "y")],
    [m("user", "Ünïcödé: 日本語, עברית, العربية, 🎉👍🏽, \u00a0nbsp\u3000ideographic")],
    [m("user", "q"), m("assistant", "<think>\nreasoning\n</think>\n\nanswer"), m("user", "again")],
    [m("user", "q"), m("assistant", "<think>only thinking</think>")],
    [m("user", "q"), m("assistant", "a", reasoning_content="explicit reasoning")],
    [m("user", "q"), m("assistant", "no think tags</think>tail")],
    [m("user", "<tool_response>\nresult\n</tool_response>")],
    [m("user", "{{ not a tag }} {% neither %} {# nor #} '\"\\")],
    [m("user", "line\r\nwindows\rold mac\n")],
]


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("generation", [False, True])
def test_templates_on_conversations(name, generation):
    source = template(name)
    for messages in CONVERSATIONS:
        assert_same(source, messages, generation, **TOKENS)


FUZZ_PIECES = ["hello", "world", " ", "  ", "\n", "\n\n", "\t", "\r\n", "\u00a0", "\u2028",
               "\u3000", "é", "ß", "日本", "😀", "<think>", "</think>", "<tool_response>",
               "</tool_response>", "<|im_start|>", "<|im_end|>", "<start_of_turn>", "{{", "}}",
               "{%", "%}", "'", '"', "\\", "\\n", "0", "None", "-", "~"]


def fuzz_messages(rng):
    messages = []
    for _ in range(rng.randint(1, 7)):
        role = rng.choice(["system", "user", "assistant", "user", "assistant"])
        content = "".join(rng.choice(FUZZ_PIECES) for _ in range(rng.randint(0, 8)))
        messages.append(m(role, content))
    if rng.random() < 0.5:  # often a valid alternation, which every template accepts
        messages = [m("user" if i % 2 == 0 else "assistant", x["content"])
                    for i, x in enumerate(messages)]
        if rng.random() < 0.5:
            messages.insert(0, m("system", rng.choice(FUZZ_PIECES) * 2))
    return messages


@pytest.mark.parametrize("name", NAMES)
def test_templates_on_fuzzed_messages(name):
    source = template(name)
    rng = random.Random(39)
    for _ in range(300):
        assert_same(source, fuzz_messages(rng), rng.random() < 0.5, **TOKENS)


def test_template_variables():
    qwen3 = template("qwen3")
    conversation = [m("user", "Hi"), m("assistant", "<think>x</think>Hello"), m("user", "Bye")]
    for thinking in (False, True):
        assert_same(qwen3, conversation, True, enable_thinking=thinking)
    llama = template("llama3.2")
    assert_same(llama, conversation[:1], True, date_string="26 Jul 2024", **TOKENS)
    # The date: both render now.
    assert_same(llama, conversation[:1], True, **TOKENS)
    # bos_token none, as transformers passes it for tokenizers without one.
    assert_same(template("gemma3"), conversation[:1], True, bos_token=None)


def test_raise_exception_message():
    with pytest.raises(ValueError, match="Conversation roles must alternate"):
        qkv.text.render_chat_template(template("gemma3"), [m("assistant", "first")])


def test_smollm2_template_is_the_files():
    if not SMOLLM2_GGUF.exists():
        pytest.skip(f"{SMOLLM2_GGUF} is missing")
    # The GGUF key/value: key, type 8 (string), length, bytes; metadata comes
    # before the tensors, in the first megabytes (gguf.GGUFReader takes 12 s).
    with open(SMOLLM2_GGUF, "rb") as f:
        head = f.read(8 << 20)
    key = b"tokenizer.chat_template"
    at = head.index(struct.pack("<Q", len(key)) + key) + 8 + len(key)
    kind, length = struct.unpack_from("<IQ", head, at)
    assert kind == 8
    value = head[at + 12:at + 12 + length].decode()
    assert value == template("smollm2")


BUILTIN_FAMILIES = {"chatml": None, "qwen": "qwen2.5", "gemma": "gemma3", "llama3": "llama3.2"}


@pytest.mark.parametrize("builtin", sorted(BUILTIN_FAMILIES))
def test_builtin_templates_equal_their_families(builtin):
    assert builtin in qkv.text.ChatTemplate.builtin_names()
    ours_t = qkv.text.ChatTemplate.builtin(builtin, **TOKENS)
    family = BUILTIN_FAMILIES[builtin]
    plain = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
             "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}"
             "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")
    source = plain if family is None else template(family)
    rng = random.Random(7)
    for _ in range(60):
        turns = [m("user" if i % 2 == 0 else "assistant",
                   "".join(rng.choice(FUZZ_PIECES) for _ in range(rng.randint(0, 5))))
                 for i in range(rng.randint(1, 5))]
        if rng.random() < 0.5:
            turns.insert(0, m("system", rng.choice(FUZZ_PIECES) + "sys"))
        generation = rng.random() < 0.5
        assert ours_t.apply(turns, generation) == reference(source, turns, generation, **TOKENS)
    with pytest.raises(ValueError, match="chatml, gemma, llama3, qwen"):
        qkv.text.ChatTemplate.builtin("nope")


# Single features of the language, each against jinja2 (x, s, d, ns: variables below).
SNIPPETS = [
    "{{ x }} {{ s }} {{ d }} {{ n }} {{ f }} {{ none }} {{ true }} {{ u }}",
    "{{ x[0] }}{{ x[-1] }}{{ x[1:] }}{{ x[:-1] }}{{ x[::-1] }}{{ x[::2] }}{{ x[5] }}{{ s[1:4] }}",
    "{{ s[::-1] }}|{{ s[-2] }}|{{ s|length }}|{{ x|length }}|{{ d|length }}|{{ u|length }}",
    "{{ d.a }} {{ d['b'] }} {{ d.missing }} {{ d.get('a') }} {{ d.get('zz', 7) }}",
    "{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}{% for k in d %}{{ k }}{% endfor %}",
    "{{ d.keys()|list }} {{ d.values()|list }} {{ d|items|list }}",
    "{% for i in x %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}"
    "{{ loop.first }}{{ loop.last }}{{ loop.length }}|{% endfor %}",
    "{% for i in x %}{{ loop.previtem }}/{{ loop.nextitem }}/{{ loop.cycle('a','b') }} {% endfor %}",
    "{% for i in x if i > 1 %}{{ i }}{{ loop.length }}{% else %}empty{% endfor %}",
    "{% for i in [] %}{{ i }}{% else %}empty{% endfor %}{% for i in u %}x{% else %}undef{% endfor %}",
    "{% for i in x %}{% if i == 2 %}{% continue %}{% endif %}{% if i == 3 %}{% break %}{% endif %}"
    "{{ i }}{% endfor %}",
    "{% set a = 1 %}{% for i in x %}{% set a = i %}{{ a }}{% endfor %}{{ a }}",
    "{% set ns = namespace(a=1, b=[]) %}{% for i in x %}{% set ns.a = ns.a + i %}"
    "{% set ns.b = ns.b + [i] %}{% endfor %}{{ ns.a }}{{ ns.b }}",
    "{% set a, b = 1, 2 %}{{ a }}{{ b }}{% set t = (1, 2) %}{{ t|length }}",
    "{% set block %}in {{ s }} block{% endset %}[{{ block }}]",
    "{% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}"
    "{{ greet('a') }} {{ greet('b', '?') }} {{ greet(name='c') }}",
    "{{ 1 + 2 * 3 - 4 / 2 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 2 ** 8 }}",
    "{{ 1.5 + 1 }} {{ 0.1 + 0.2 }} {{ 1e20 }} {{ 1e16 }} {{ 1e15 }} {{ 0.0001 }} {{ 0.00001 }} "
    "{{ 3 / 1 }} {{ -0.0 }} {{ 1/3 }}",
    "{{ 'a' ~ 1 ~ none ~ true }} {{ 'ab' * 3 }} {{ [1] * 2 }} {{ x + [4] }} {{ 'a' + 'b' }}",
    "{{ 1 == 1.0 }} {{ true == 1 }} {{ 'a' < 'b' }} {{ [1, 2] < [1, 3] }} {{ 1 < 2 < 3 }} "
    "{{ 3 > 2 > 2 }} {{ 'b' in 'abc' }} {{ 2 in x }} {{ 'a' in d }} {{ 'z' not in d }}",
    "{{ not x }} {{ x and s }} {{ [] or 'default' }} {{ 0 or none }} {{ u is defined }} "
    "{{ u is not defined }} {{ none is none }} {{ s is string }} {{ d is mapping }}",
    "{{ x is iterable }} {{ s is iterable }} {{ n is number }} {{ f is number }} {{ s is number }}"
    " {{ x is sequence }} {{ n is integer }} {{ f is float }} {{ true is true }} "
    "{{ 1 is true }} {{ false is false }} {{ true is boolean }}",
    "{{ 3 is odd }} {{ 4 is even }} {{ 9 is divisibleby 3 }} {{ 2 is equalto 2 }} "
    "{{ none is sameas none }} {{ 'abc' is lower }} {{ 'ABC' is upper }} {{ 2 is in x }}",
    "{{ '  a b  '|trim }}|{{ 'xxaxx'|trim('x') }}|{{ s|upper }}|{{ 'ÀB'|lower }}|"
    "{{ 'hello world'|title }}|{{ 'hELLO'|capitalize }}",
    "{{ u|default('dflt') }} {{ ''|default('e') }} {{ ''|default('e', true) }} {{ u|d(1) }}",
    "{{ x|join(',') }} {{ x|join }} {{ x|first }} {{ x|last }} {{ s|first }} {{ x|reverse|list }}",
    "{{ 'aXbXc'|replace('X', '-') }} {{ 'aaa'|replace('a', 'b', 2) }} {{ 42|string }}",
    "{{ d|tojson }} {{ x|tojson }} {{ s|tojson }} {{ 'é\"\\n\\t'|tojson }} {{ none|tojson }}",
    "{{ d|tojson(indent=2) }}{{ [d, [], {}]|tojson(indent=4) }}{{ d|tojson(sort_keys=true) }}",
    "{{ people|selectattr('age', 'gt', 20)|map(attribute='name')|list }} "
    "{{ people|rejectattr('age', 'gt', 20)|map(attribute='name')|join(',') }} "
    "{{ people|selectattr('admin')|list|length }} {{ x|select('odd')|list }}",
    "{{ x|map('string')|join('-') }} {{ ['b', 'a']|sort }} {{ [1, 1, 2]|unique|list }} "
    "{{ -3|abs }} {{ '12'|int + 1 }} {{ '1.5'|float }} {{ 'x'|int }}",
    "{{ 'line1\\nline2\\n\\nline4'|indent }}|{{ 'a\\nb'|indent(2, true) }}|"
    "{{ 'a\\n\\nb'|indent(width='> ', blank=true) }}",
    "{{ s.startswith('he') }} {{ s.endswith('lo') }} {{ s.startswith(('x', 'h')) }} "
    "{{ '  a  '.strip() }}|{{ 'xax'.strip('x') }}|{{ '  a'.lstrip() }}|{{ 'a  '.rstrip() }}|",
    "{{ 'a,b,,c'.split(',') }} {{ ' a  b '.split() }} {{ 'a b c'.split(' ', 1) }} "
    "{{ 'A'.lower() }}{{ 'a'.upper() }} {{ 'a-b'.replace('-', '+') }} {{ 'abc'.find('c') }}",
    "{{ 'x' if true else 'y' }} {{ 'x' if false else 'y' }} {{ 'x' if false }}|"
    "{{ (1 if false) is defined }}",
    "{{ range(3)|list }} {{ range(1, 7, 2)|list }} {{ range(5, 0, -2)|list }}",
    "{{ dict(a=1, b=2) }} {{ {'k': [1, {'n': none}]} }} {{ ('a', 'b') }}",
    "  {% if true %}\n    kept\n  {% endif %}\n  {{ s }}  \n{# comment #}\nafter\n",
    "a  {%- if true -%}  b  {%- endif -%}  c {{- ' d ' -}} e {#- c -#} f",
    "x\n  {%+ if true %}y{% endif %}\n  {% if true +%}\nz{% endif %}",
    "{% raw %}{{ not rendered }}{% endraw %}\n{% raw -%}  {% x %}  {%- endraw %}!",
    "{{ '\\x41\\u00e9\\U0001F600\\101\\q' }} {{ \"dq'\" }} {{ 'sq\"' }} {{ 'a' 'b' }}",
    "{% if x|length > 2 and s %}long{% elif x %}short{% else %}none{% endif %}",
    "{% generation %}gen {{ s }}{% endgeneration %}",
    "{{ x.0 }} {{ d['a'] + 1 }} {{ d.items()|list|first }}",
    "{{ 'é'|length }} {{ 'aé😀'[1] }} {{ 'aé😀'[-1:] }} {{ '😀é'|reverse }} {{ 'x\u3000'|trim }}|",
    "{{ people[0].name }} {{ people|map(attribute='missing', default='?')|list }}",
    "{{ 'a' ~ x }} {{ x ~ d }} {{ [none, true, 1.5, 'q\\'s'] }}",
    "{{ u.attr }}",
    "{{ u + 1 }}",
    "{{ x + 1 }}",
    "{{ raise_exception('custom failure') }}",
    "{{ s.__class__ }}",
    "{{ x.append(4) }}",
    "{{ 1 / 0 }}",
    "{% for %}",
    "{% if true %}unclosed",
    "{{ 'unterminated }}",
    "{% include 'other' %}",
]

VARIABLES = {
    "x": [1, 2, 3], "s": "hello", "d": {"a": 1, "b": "two", "c": [1.5, None, True]}, "n": 7,
    "f": 2.5,
    "people": [{"name": "ann", "age": 31, "admin": True}, {"name": "bob", "age": 19},
               {"name": "cy", "age": 25, "admin": False}],
}


@pytest.mark.parametrize("snippet", SNIPPETS)
def test_snippets(snippet):
    assert_same(snippet, [], False, **VARIABLES)


# Random templates: statements and expressions drawn from a small grammar of
# the language chat templates use, rendered by both (seed fixed).
FUZZ_ATOMS = ["x", "s", "d", "n", "f", "e", "z", "t", "u", "1", "0", "-3", "2.0", "'ab'", "''",
              "none", "true", "false", "[1, 'a']", "{'k': 2}", "x[0]", "x[-1]", "s[1:4]", "d.a",
              "d['b']", "d.zz", "x|length", "s|trim", "s|upper", "s|lower", "x|first", "x|last",
              "x|join('-')", "d|tojson", "x|tojson", "s|tojson", "item", "s.strip()", "s.split()",
              "s.startswith(' H')", "x|reverse|list", "x|min", "x|max", "x|sum", "(1, 2)",
              "d.items()|list"]
FUZZ_OPERATORS = ["+", "-", "*", "//", "~", "==", "!=", "<", ">=", "and", "or", "in", "not in"]
FUZZ_TESTS = ["defined", "none", "string", "number", "mapping", "iterable", "sequence", "true",
              "false", "odd", "even", "integer"]
FUZZ_TEXT = [" text ", "\n", "  {%- if true %}a{% endif %}  ", "{# c #}\n",
             "   {% if true %}\n  b\n  {% endif %}\n"]


def fuzz_expression(rng, depth=0):
    k = rng.random()
    if depth > 2 or k < 0.4:
        return rng.choice(FUZZ_ATOMS)
    a, b = fuzz_expression(rng, depth + 1), fuzz_expression(rng, depth + 1)
    if k < 0.75:
        return f"({a} {rng.choice(FUZZ_OPERATORS)} {b})"
    if k < 0.85:
        return f"(not {a})"
    if k < 0.95:
        return f"({a} if {b} else {fuzz_expression(rng, depth + 1)})"
    return f"({a} is {rng.choice(FUZZ_TESTS)})"


def fuzz_statement(rng, depth=0):
    k = rng.random()
    if depth > 2 or k < 0.35:
        return "{{ " + fuzz_expression(rng) + " }}" + rng.choice(["", " ", "\n", "  \n  "])
    if k < 0.55:
        otherwise = rng.choice(["", "{% else %}" + fuzz_statement(rng, depth + 1)])
        return ("{% if " + fuzz_expression(rng) + " %}" + fuzz_statement(rng, depth + 1) +
                otherwise + "{% endif %}" + rng.choice(["", "\n", "\n  "]))
    if k < 0.75:
        iterable = rng.choice(["x", "s", "d", "[]", "x[::-1]", "d.items()|list"])
        return ("{%- for item in " + iterable + " %}" + fuzz_statement(rng, depth + 1) +
                "{{ loop.index }}{% endfor -%}")
    if k < 0.85:
        return "{% set " + rng.choice(["x", "s", "q"]) + " = " + fuzz_expression(rng) + " %}"
    return rng.choice(FUZZ_TEXT)


def test_random_templates():
    variables = {"x": [1, 2, 3], "s": " Hello World ", "d": {"a": 1, "b": "two"}, "n": -7,
                 "f": 2.5, "e": "", "z": None, "t": True}
    rng = random.Random(39)
    for _ in range(300):
        source = "".join(fuzz_statement(rng) for _ in range(rng.randint(1, 4)))
        assert_same(source, [], False, **variables)
