// The sandbox driver for JavaScript (Node.js). Like the Python driver, it
// reads one job (JSON) on stdin and prints one report line, prefixed with
// the job's nonce, as the last line of its stdout; the submitted code runs
// only in child processes whose output goes to files.
'use strict';
const fs = require('fs');
const cp = require('child_process');

const job = JSON.parse(fs.readFileSync(0, 'utf8'));
const nonce = job.nonce;
delete job.nonce;
const limits = job.limits || {};
const OUTPUT = limits.output || 65536;
const DEADLINE = Date.now() + (limits.wall || 10) * 1000;
const TEST_TIME = (limits.test || 5) * 1000;
const source = job.source;
fs.writeFileSync(job.file, source);

function metrics() {
  const lines = source.split('\n');
  const m = {
    lines: lines.filter((l) => l.trim() !== '').length,
    comments: lines.filter((l) => /^\s*(\/\/|\/\*|\*)/.test(l)).length,
  };
  let acorn;
  try {
    acorn = require('internal/deps/acorn/acorn/dist/acorn');
  } catch (e) {
    acorn = null;
  }
  if (!acorn) {
    try {
      new (require('vm').Script)(source, { filename: job.file });
    } catch (e) {
      const at = /:(\d+)\n/.exec(e.stack || '');
      m.syntax_error = { line: at ? +at[1] : 0, column: 0, message: e.message };
    }
    return m;
  }
  let tree;
  try {
    tree = acorn.parse(source, { ecmaVersion: 'latest', sourceType: 'script', locations: true, allowHashBang: true });
  } catch (e) {
    m.syntax_error = { line: e.loc ? e.loc.line : 0, column: e.loc ? e.loc.column + 1 : 0, message: e.message.replace(/ \(\d+:\d+\)$/, '') };
    return m;
  }
  const isFunc = (n) => /^(FunctionDeclaration|FunctionExpression|ArrowFunctionExpression)$/.test(n.type);
  const isBlock = (n) => isFunc(n) || /^(IfStatement|ForStatement|ForInStatement|ForOfStatement|WhileStatement|DoWhileStatement|SwitchStatement|TryStatement|ClassDeclaration|ClassExpression)$/.test(n.type);
  const children = (n) => {
    const out = [];
    for (const k of Object.keys(n)) {
      if (k === 'loc') continue;
      const v = n[k];
      if (Array.isArray(v)) v.forEach((x) => x && typeof x.type === 'string' && out.push(x));
      else if (v && typeof v.type === 'string') out.push(v);
    }
    return out;
  };
  const complexity = (fn) => {
    let c = 1;
    const stack = children(fn);
    while (stack.length) {
      const x = stack.pop();
      if (isFunc(x) || x.type === 'ClassDeclaration' || x.type === 'ClassExpression') continue;
      if (/^(IfStatement|ConditionalExpression|ForStatement|ForInStatement|ForOfStatement|WhileStatement|DoWhileStatement|CatchClause)$/.test(x.type)) c++;
      else if (x.type === 'SwitchCase' && x.test) c++;
      else if (x.type === 'LogicalExpression') c++;
      stack.push(...children(x));
    }
    return c;
  };
  const nesting = (n, depth) => {
    let deepest = depth;
    for (const x of children(n)) deepest = Math.max(deepest, nesting(x, isBlock(x) ? depth + 1 : depth));
    return deepest;
  };
  const funcs = [];
  let classes = 0;
  const walk = (n, name) => {
    if (n.type === 'ClassDeclaration' || n.type === 'ClassExpression') classes++;
    if (isFunc(n)) {
      funcs.push({ name: (n.id && n.id.name) || name || '(anonymous)', line: n.loc.start.line, complexity: complexity(n), nesting: nesting(n, 0) });
    }
    for (const x of children(n)) {
      let inner = '';
      if (n.type === 'VariableDeclarator' && n.id.type === 'Identifier') inner = n.id.name;
      if ((n.type === 'MethodDefinition' || n.type === 'Property') && n.key.type === 'Identifier') inner = n.key.name;
      walk(x, inner);
    }
  };
  walk(tree, '');
  funcs.sort((a, b) => a.line - b.line);
  m.functions = funcs;
  m.classes = classes;
  m.complexity = Math.max(complexity(tree), ...funcs.map((f) => f.complexity));
  m.max_nesting = nesting(tree, 0);
  return m;
}

function files() {
  const sizes = {};
  const walk = (dir) => {
    let entries = [];
    try {
      entries = fs.readdirSync(dir, { withFileTypes: true });
    } catch (e) {}
    for (const e of entries) {
      if (Object.keys(sizes).length > 10000) return;
      const p = dir + '/' + e.name;
      if (e.isDirectory()) walk(p);
      else {
        try {
          sizes[p] = fs.lstatSync(p).size;
        } catch (err) {}
      }
    }
  };
  walk('.');
  return sizes;
}

// spawn runs argv on stdin; it keeps the first OUTPUT bytes of stdout and
// stderr, and stops the program when it prints more.
function spawn(argv, stdin, ms) {
  ms = Math.min(ms, DEADLINE - Date.now());
  if (ms <= 0) return { exit: null, error: 'no time left', limit: 'wall_time', stdout: '', stderr: '' };
  const before = files();
  const start = Date.now();
  // prlimit sets the child's own limits: CPU time, file size, no core
  const cpu = limits.cpu || 10;
  const fsize = limits.file_size || 1 << 20;
  const p = cp.spawnSync('prlimit', [`--cpu=${cpu}:${cpu + 1}`, `--fsize=${fsize}`, '--core=0', '--', ...argv], {
    input: stdin, stdio: ['pipe', 'pipe', 'pipe'], timeout: ms, killSignal: 'SIGKILL', maxBuffer: OUTPUT,
  });
  const r = { seconds: (Date.now() - start) / 1000 };
  const code = p.error && p.error.code;
  if (code === 'ETIMEDOUT') r.limit = 'wall_time';
  else if (code === 'ENOBUFS') r.limit = 'output';
  else if (code && code !== 'EPIPE') {
    return { exit: null, error: 'could not start: ' + code, limit: code === 'EAGAIN' ? 'processes' : undefined, stdout: '', stderr: '' };
  }
  const out = p.stdout || Buffer.alloc(0);
  const err = p.stderr || Buffer.alloc(0);
  r.stdout_cut = r.limit === 'output' && out.length >= OUTPUT;
  r.stderr_cut = r.limit === 'output' && err.length >= OUTPUT;
  r.stdout = out.subarray(0, OUTPUT).toString('utf8');
  r.stderr = err.subarray(0, OUTPUT).toString('utf8');
  if (p.signal) {
    r.exit = null;
    r.signal = p.signal;
    if (p.signal === 'SIGXCPU') r.limit = 'cpu_time';
    if (p.signal === 'SIGXFSZ') r.limit = r.limit || 'file_size';
  } else {
    r.exit = p.status;
    if (p.status !== 0 && !r.limit) {
      const after = files();
      if (Object.keys(after).some((f) => after[f] >= fsize && before[f] !== after[f])) r.limit = 'file_size';
    }
  }
  return r;
}

const RUNNER = `
const fs = require('fs'), vm = require('vm');
vm.runInThisContext(fs.readFileSync(process.argv[1], 'utf8'), { filename: process.argv[1] });
let value = vm.runInThisContext(process.argv[2]);
Promise.resolve(value).then((v) => {
  let text;
  try { text = JSON.stringify(v === undefined ? null : v); } catch (e) { text = JSON.stringify({ unserializable: String(v).slice(0, 200) }); }
  fs.writeFileSync(process.argv[3], text);
});
`;

function lastLine(text) {
  const lines = text.trim().split('\n').filter((l) => l.trim() !== '');
  const thrown = lines.find((l) => /^[A-Za-z]*(Error|Exception)\b/.test(l));
  return (thrown || lines[lines.length - 1] || '').slice(0, 500);
}

function runTest(t) {
  const name = t.name || '';
  if (t.call !== undefined) {
    const r = spawn([process.execPath, '-e', RUNNER, job.file, t.call, '.result'], '', TEST_TIME);
    let got = '';
    try {
      got = fs.readFileSync('.result', 'utf8').slice(0, OUTPUT + 1);
      fs.unlinkSync('.result');
    } catch (e) {}
    const res = Object.assign({ name, call: t.call, expected: t.expected === undefined ? null : t.expected }, r);
    if (r.exit === 0 && got) {
      try {
        res.actual = JSON.parse(got);
      } catch (e) {
        res.actual = null;
      }
      res.passed = same(res.actual, res.expected);
    } else {
      res.passed = false;
      if (!res.error) res.error = lastLine(r.stderr || '') || 'no result';
    }
    return res;
  }
  const r = spawn([process.execPath, job.file], t.stdin || '', TEST_TIME);
  const res = Object.assign({ name, stdin: t.stdin || '', expected: t.stdout || '' }, r);
  res.actual = r.stdout || '';
  res.passed = r.exit === 0 && res.actual.trimEnd() === String(t.stdout || '').trimEnd();
  if (r.exit !== 0 && !res.error) res.error = lastLine(r.stderr || '') || 'exit status ' + r.exit;
  return res;
}

function same(a, b) {
  if (a === b) return true;
  if (typeof a !== 'object' || typeof b !== 'object' || a === null || b === null) return false;
  if (Array.isArray(a) !== Array.isArray(b)) return false;
  const ka = Object.keys(a), kb = Object.keys(b);
  return ka.length === kb.length && ka.every((k) => Object.prototype.hasOwnProperty.call(b, k) && same(a[k], b[k]));
}

const report = { metrics: metrics() };
if (!report.metrics.syntax_error) {
  if (job.run) report.run = spawn([process.execPath, job.file], job.stdin || '', DEADLINE - Date.now());
  report.tests = (job.tests || []).map(runTest);
}
process.stdout.write('\n' + nonce + JSON.stringify(report) + '\n');
