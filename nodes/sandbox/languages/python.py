# The sandbox driver for Python. It runs inside the sandbox, reads one job
# (JSON) on stdin, and prints one report line, prefixed with the job's
# nonce, as the last line of its stdout. It never runs the submitted code
# itself: metrics come from the ast module, and the program and each test
# run in child processes whose output goes to files, so nothing the code
# does can write to the report.
import ast
import json
import os
import resource
import signal
import subprocess
import sys
import threading
import time

job = json.loads(sys.stdin.buffer.read())
sys.stdin.close()
nonce = job.pop("nonce")
try:  # a child may not read this process's memory or open its stdout
    import ctypes
    ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE 0
except Exception:
    pass

limits = job.get("limits", {})
OUTPUT = int(limits.get("output", 65536))
FILE = int(limits.get("file_size", 1 << 20))
CPU = int(limits.get("cpu", 10))
DEADLINE = time.monotonic() + float(limits.get("wall", 10))
TEST_TIME = float(limits.get("test", 5))
source = job["source"]
with open(job["file"], "w") as f:
    f.write(source)


def metrics():
    m = {"lines": sum(1 for l in source.splitlines() if l.strip()),
         "comments": sum(1 for l in source.splitlines() if l.strip().startswith("#"))}
    try:
        tree = ast.parse(source, job["file"])
    except SyntaxError as e:
        m["syntax_error"] = {"line": e.lineno or 0, "column": e.offset or 0, "message": e.msg}
        return m
    funcs = []

    def complexity(node):
        # McCabe: one plus each decision point, not counting nested functions
        n = 1
        stack = list(ast.iter_child_nodes(node))
        while stack:
            x = stack.pop()
            if isinstance(x, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
                continue
            if isinstance(x, (ast.If, ast.IfExp, ast.For, ast.AsyncFor, ast.While, ast.ExceptHandler, ast.Assert)):
                n += 1
            elif isinstance(x, ast.BoolOp):
                n += len(x.values) - 1
            elif isinstance(x, ast.comprehension):
                n += 1 + len(x.ifs)
            elif isinstance(x, ast.match_case):
                n += 1
            stack.extend(ast.iter_child_nodes(x))
        return n

    blocks = (ast.If, ast.For, ast.AsyncFor, ast.While, ast.With, ast.AsyncWith, ast.Try, ast.Match,
              ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
    if hasattr(ast, "TryStar"):
        blocks += (ast.TryStar,)

    def nesting(node, depth):
        deepest = depth
        for x in ast.iter_child_nodes(node):
            d = depth + 1 if isinstance(x, blocks) else depth
            deepest = max(deepest, nesting(x, d))
        return deepest

    for x in ast.walk(tree):
        if isinstance(x, (ast.FunctionDef, ast.AsyncFunctionDef)):
            funcs.append({"name": x.name, "line": x.lineno, "complexity": complexity(x), "nesting": nesting(x, 0)})
    funcs.sort(key=lambda f: f["line"])
    m["functions"] = funcs
    m["classes"] = sum(1 for x in ast.walk(tree) if isinstance(x, ast.ClassDef))
    m["complexity"] = max([complexity(tree)] + [f["complexity"] for f in funcs])
    m["max_nesting"] = nesting(tree, 0)
    return m


def limit_child():
    hard = resource.getrlimit(resource.RLIMIT_CPU)[1]
    if hard == resource.RLIM_INFINITY:
        hard = CPU + 1
    resource.setrlimit(resource.RLIMIT_CPU, (min(CPU, hard), min(CPU + 1, hard)))
    fsize = FILE
    hard = resource.getrlimit(resource.RLIMIT_FSIZE)[1]
    if hard != resource.RLIM_INFINITY:
        fsize = min(fsize, hard)
    resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def kill(p):
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except OSError:
        pass


def spawn(argv, stdin, seconds):
    """Runs argv on stdin (bytes); keeps the first OUTPUT bytes of its stdout
    and stderr, and stops it when it prints more."""
    seconds = min(seconds, DEADLINE - time.monotonic())
    if seconds <= 0:
        return {"exit": None, "error": "no time left", "limit": "wall_time", "stdout": "", "stderr": ""}
    before = files()
    start = time.monotonic()
    try:
        p = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             preexec_fn=limit_child, start_new_session=True)
    except OSError as e:
        return {"exit": None, "error": "could not start: " + (e.strerror or str(e)),
                "limit": "processes" if e.errno == 11 else None, "stdout": "", "stderr": ""}
    except subprocess.SubprocessError as e:
        return {"exit": None, "error": "could not start: " + str(e), "stdout": "", "stderr": ""}
    r = {}
    out = {"stdout": bytearray(), "stderr": bytearray()}
    cut = {"stdout": False, "stderr": False}

    def feed():
        try:
            p.stdin.write(stdin)
        except OSError:
            pass  # a program that never reads its input
        try:
            p.stdin.close()
        except OSError:
            pass

    def drain(name, f):
        while True:
            try:
                b = os.read(f.fileno(), 65536)
            except OSError:
                break
            if not b:
                break
            if cut[name]:
                continue
            room = OUTPUT - len(out[name])
            out[name] += b[:room]
            if len(b) > room:
                cut[name] = True
                kill(p)  # it printed more than the limit: stopped there

    threads = [threading.Thread(target=feed, daemon=True),
               threading.Thread(target=drain, args=("stdout", p.stdout), daemon=True),
               threading.Thread(target=drain, args=("stderr", p.stderr), daemon=True)]
    for th in threads:
        th.start()
    try:
        p.wait(timeout=max(seconds - (time.monotonic() - start), 0.001))
    except subprocess.TimeoutExpired:
        r["limit"] = "wall_time"
    finally:
        kill(p)
        p.wait()
    for th in threads:
        th.join(timeout=1)  # a process that escaped its group may hold a pipe
    r["seconds"] = round(time.monotonic() - start, 4)
    code = p.returncode
    if cut["stdout"] or cut["stderr"]:
        r.setdefault("limit", "output")
    if code < 0:
        r["exit"], r["signal"] = None, signal.Signals(-code).name
        if -code == signal.SIGXCPU:
            r["limit"] = "cpu_time"  # what stopped it, even as its time ran out
        elif -code == signal.SIGXFSZ:
            r.setdefault("limit", "file_size")
    else:
        r["exit"] = code
        if code != 0 and "limit" not in r and any(size >= FILE for f, size in files().items() if before.get(f) != size):
            r["limit"] = "file_size"  # a write past the limit failed (EFBIG)
    r["stdout"], r["stdout_cut"] = out["stdout"].decode("utf-8", "replace"), cut["stdout"]
    r["stderr"], r["stderr_cut"] = out["stderr"].decode("utf-8", "replace"), cut["stderr"]
    return r


def files():
    """The sizes of the files in the workspace."""
    sizes = {}
    for dirpath, _, names in os.walk("."):
        for n in names:
            try:
                sizes[os.path.join(dirpath, n)] = os.lstat(os.path.join(dirpath, n)).st_size
            except OSError:
                pass
        if len(sizes) > 10000:
            break
    return sizes


RUNNER = """
import json, os, sys
ns = {"__name__": "solution", "__file__": sys.argv[1]}
exec(compile(open(sys.argv[1]).read(), sys.argv[1], "exec"), ns)
value = eval(sys.argv[2], ns)
try:
    text = json.dumps(value)
except (TypeError, ValueError):
    text = json.dumps({"unserializable": repr(value)[:200]})
with open(sys.argv[3], "w") as f:
    f.write(text)
"""


def run_test(t):
    name = t.get("name", "")
    if "call" in t:
        result = ".result"
        r = spawn([sys.executable, "-I", "-c", RUNNER, job["file"], t["call"], result], b"", TEST_TIME)
        got = b""
        try:
            with open(result, "rb") as f:
                got = f.read(OUTPUT + 1)
            os.unlink(result)
        except OSError:
            pass
        res = {"name": name, "call": t["call"], "expected": t.get("expected")}
        res.update(r)
        if r.get("exit") == 0 and got:
            try:
                res["actual"] = json.loads(got)
            except ValueError:
                res["actual"] = None
            res["passed"] = res["actual"] == t.get("expected")
        else:
            res["passed"] = False
            res.setdefault("error", last_line(r.get("stderr", "")) or r.get("error") or "no result")
        return res
    r = spawn([sys.executable, "-I", job["file"]], t.get("stdin", "").encode(), TEST_TIME)
    res = {"name": name, "stdin": t.get("stdin", ""), "expected": t.get("stdout", "")}
    res.update(r)
    res["actual"] = r.get("stdout", "")
    res["passed"] = r.get("exit") == 0 and res["actual"].rstrip() == str(t.get("stdout", "")).rstrip()
    if r.get("exit") != 0:
        res.setdefault("error", last_line(r.get("stderr", "")) or "exit status %s" % r.get("exit"))
    return res


def last_line(text):
    lines = [l for l in text.strip().splitlines() if l.strip()]
    return lines[-1][:500] if lines else ""


report = {"metrics": metrics()}
if "syntax_error" not in report["metrics"]:
    if job.get("run"):
        report["run"] = spawn([sys.executable, "-I", job["file"]], job.get("stdin", "").encode(), DEADLINE - time.monotonic())
    report["tests"] = [run_test(t) for t in job.get("tests") or []]
sys.stdout.write("\n" + nonce + json.dumps(report) + "\n")
sys.stdout.flush()
