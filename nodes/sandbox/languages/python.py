# The sandbox runner for Python. Each process of an execution starts it
# with one request on stdin: a line holding the length of a JSON header,
# the header, then the program's input. It writes the source to its file,
# reports the source's metrics from the ast module when asked (before any
# of the code runs), then runs the code in this same process: the whole
# program (mode run), or one call whose value it reports (mode call). It
# decides nothing: what it prints is raw output that trellis, outside the
# sandbox, compares with what the tests expect (which never come in here).
#
# stdout carries the metrics first, as one line
#   \x1etrellis metrics {...}
# then whatever the program prints, and in mode call, last, one line
#   \x1etrellis value NONCE {"value": ...} or {"text": "..."}
# (text when the value has no JSON form: inf, NaN, an int beyond 64 bits,
# a set, an object).
import ast
import json
import math
import os
import signal
import sys


def read_request():
    size = b""
    while True:
        c = os.read(0, 1)
        if not c or c == b"\n":
            break
        size += c
    n, data = int(size), bytearray()
    while len(data) < n:
        b = os.read(0, n - len(data))
        if not b:
            break
        data += b
    return json.loads(bytes(data))


def frame(line):
    """Writes a line to fd 1 whole, past whatever sys.stdout holds."""
    data = line.encode("utf-8", "replace") + b"\n"
    while data:
        data = data[os.write(1, data):]


def metrics(source, name):
    lines = source.splitlines()
    m = {"lines": sum(1 for l in lines if l.strip()),
         "comments": sum(1 for l in lines if l.strip().startswith("#"))}
    try:
        tree = ast.parse(source, name)
    except SyntaxError as e:
        m["syntax_error"] = {"line": e.lineno or 0, "column": e.offset or 0, "message": e.msg}
        return m
    except (RecursionError, MemoryError, ValueError):
        return m  # too deep for the parser here: the lines are all it can tell
    blocks = (ast.If, ast.For, ast.AsyncFor, ast.While, ast.With, ast.AsyncWith, ast.Try, ast.Match,
              ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
    if hasattr(ast, "TryStar"):
        blocks += (ast.TryStar,)
    decisions = (ast.If, ast.IfExp, ast.For, ast.AsyncFor, ast.While, ast.ExceptHandler, ast.Assert)
    scopes = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)

    def complexity(node):
        # McCabe: one plus each decision point, not counting nested functions
        n, stack = 1, list(ast.iter_child_nodes(node))
        while stack:
            x = stack.pop()
            if isinstance(x, scopes):
                continue
            if isinstance(x, decisions):
                n += 1
            elif isinstance(x, ast.BoolOp):
                n += len(x.values) - 1
            elif isinstance(x, ast.comprehension):
                n += 1 + len(x.ifs)
            elif isinstance(x, ast.match_case):
                n += 1
            stack.extend(ast.iter_child_nodes(x))
        return n

    def nesting(node):
        # the deepest block below node, without recursion: sources nest deep
        deepest, stack = 0, [(node, 0)]
        while stack:
            x, depth = stack.pop()
            deepest = max(deepest, depth)
            for c in ast.iter_child_nodes(x):
                stack.append((c, depth + 1 if isinstance(c, blocks) else depth))
        return deepest

    funcs = [{"name": x.name, "line": x.lineno, "complexity": complexity(x), "nesting": nesting(x)}
             for x in ast.walk(tree) if isinstance(x, (ast.FunctionDef, ast.AsyncFunctionDef))]
    funcs.sort(key=lambda f: f["line"])
    m["functions"] = funcs
    m["classes"] = sum(1 for x in ast.walk(tree) if isinstance(x, ast.ClassDef))
    m["complexity"] = max([complexity(tree)] + [f["complexity"] for f in funcs])
    m["max_nesting"] = nesting(tree)
    return m


LIMIT = 1 << 63
COMMA, COLON, CLOSE_LIST, CLOSE_DICT = object(), object(), object(), object()
MARKS = {id(COMMA): ",", id(COLON): ":", id(CLOSE_LIST): "]", id(CLOSE_DICT): "}"}


def encode(value, room):
    """The value's JSON text, built without recursion (values nest deep);
    None when it has no JSON form, or when it is longer than room."""
    out, stack, size = [], [value], 0
    while stack:
        v = stack.pop()
        if id(v) in MARKS and v in (COMMA, COLON, CLOSE_LIST, CLOSE_DICT):
            s = MARKS[id(v)]
        elif v is None or v is True or v is False:
            s = "null" if v is None else ("true" if v else "false")
        elif isinstance(v, int):
            if not -LIMIT <= v < LIMIT:
                return None
            s = str(int(v))
        elif isinstance(v, float):
            if not math.isfinite(v):
                return None
            s = repr(float(v))
        elif isinstance(v, str):
            s = json.dumps(v)
        elif isinstance(v, (list, tuple)):
            s, items = "[", []
            for i, x in enumerate(v):
                if i:
                    items.append(COMMA)
                items.append(x)
            items.append(CLOSE_LIST)
            stack.extend(reversed(items))
        elif isinstance(v, dict):
            if not all(isinstance(k, str) for k in v):
                return None
            s, items = "{", []
            for i, (k, x) in enumerate(v.items()):
                if i:
                    items.append(COMMA)
                items.extend([k, COLON, x])
            items.append(CLOSE_DICT)
            stack.extend(reversed(items))
        else:
            return None
        out.append(s)
        size += len(s)
        if size > room:
            return None
    return "".join(out)


def text(value, room):
    import reprlib
    r = reprlib.Repr()
    r.maxstring, r.maxother, r.maxlong, r.maxlevel = room, room, room, 20
    r.maxlist = r.maxtuple = r.maxdict = r.maxset = r.maxfrozenset = r.maxdeque = r.maxarray = 10000
    try:
        t = r.repr(value)
    except Exception as e:  # a repr that raises, or recurses without end
        t = "<%s: its text could not be made: %s>" % (type(value).__name__, type(e).__name__)
    return t[:room]


def fail(exc):
    """Prints the code's exception as Python would, without this runner's frame."""
    import traceback
    tb = exc.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename == "<string>":
        tb = tb.tb_next
    traceback.print_exception(type(exc), exc, tb)
    sys.stderr.flush()
    os._exit(1)


req = read_request()
source, name = req["source"], req["file"]
path = os.path.join(os.getcwd(), name)
with open(path, "w") as f:
    f.write(source)
if req.get("metrics"):
    m = metrics(source, name)
    frame("\x1etrellis metrics " + json.dumps(m))
    if "syntax_error" in m:
        sys.exit(0)
# Python ignores SIGXFSZ; the code meets the file size limit as any
# program does, by the signal
signal.signal(signal.SIGXFSZ, signal.SIG_DFL)
room = int(req.get("limits", {}).get("output", 65536))
try:
    code = compile(source, name, "exec")
except (SyntaxError, RecursionError, MemoryError, ValueError) as e:
    fail(e)
import builtins

if req["mode"] == "run":
    sys.argv = [path]
    ns = {"__name__": "__main__", "__file__": path, "__builtins__": builtins}
    try:
        exec(code, ns)
    except SystemExit:
        raise
    except BaseException as e:
        fail(e)
    sys.exit(0)

ns = {"__name__": "solution", "__file__": path, "__builtins__": builtins}
sys.stdin = open(os.devnull)
try:
    exec(code, ns)
    value = eval(compile(req["call"], "<call>", "eval"), ns)
except SystemExit:
    raise
except BaseException as e:
    fail(e)
enc = encode(value, room)
try:
    sys.stdout.flush()
except Exception:
    pass
payload = '{"value": %s}' % enc if enc is not None else json.dumps({"text": text(value, room)})
frame("\n\x1etrellis value " + req["nonce"] + " " + payload)
sys.exit(0)
