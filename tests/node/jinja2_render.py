"""Renders chat requests with Python Jinja set up the way transformers renders chat templates
(the reference the chat goldens were made with): a sandboxed environment with trim_blocks,
lstrip_blocks and loop controls, `tojson` as json.dumps(ensure_ascii=False), and a
raise_exception() global.

usage: python3 jinja2_render.py TEMPLATE < requests.jsonl > results.jsonl
Each request is {"messages", "tools"?, "chat_template_kwargs"?, "add_generation_prompt"?}; each
result {"prompt": ...} or {"error": ..., "kind": "raise_exception" | the exception's type}.
Exits 77 when jinja2 is not installed.
"""
import json
import sys

try:
    from jinja2.exceptions import TemplateError
    from jinja2.ext import loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment
except ImportError:
    print("SKIPPED: python3 jinja2 is not installed (Debian: python3-jinja2)")
    sys.exit(77)


class Raised(TemplateError):
    pass


def raise_exception(message):
    raise Raised(message)


def tojson(value, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
env.filters["tojson"] = tojson
env.globals["raise_exception"] = raise_exception
with open(sys.argv[1], encoding="utf-8") as f:
    template = env.from_string(f.read())

for line in sys.stdin:
    if not line.strip():
        continue
    request = json.loads(line)
    try:
        prompt = template.render(messages=request["messages"], tools=request.get("tools"), documents=None,
                                 add_generation_prompt=request.get("add_generation_prompt", True),
                                 bos_token=None, eos_token="<|im_end|>", pad_token="<|endoftext|>",
                                 **request.get("chat_template_kwargs", {}))
        result = {"prompt": prompt}
    except Raised as e:
        result = {"error": str(e), "kind": "raise_exception"}
    except Exception as e:  # the template failing on its input (TypeError, UndefinedError, ...)
        result = {"error": str(e), "kind": type(e).__name__}
    print(json.dumps(result, ensure_ascii=False))
