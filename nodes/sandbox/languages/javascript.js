// The sandbox runner for JavaScript (Node.js), with the protocol of the
// Python runner: one request on stdin (a line holding the length of a
// JSON header, the header, then the program's input); the source's
// metrics from Node's own parser (acorn) first on stdout, before any of
// the code runs; then the code runs in this same process, as a whole
// program (mode run) or for one call whose value ends stdout as
//   \x1etrellis value NONCE {"value": ...} or {"text": "..."}
// It decides nothing: trellis compares the raw output outside the sandbox.
// Everything is in a function's scope: the code runs in this process's
// global scope, where a declaration of the runner's would be in its way.
(function () {
  'use strict';
  const fs = require('fs');
  const path = require('path');
  const vm = require('vm');

  // Node writes to a pipe without blocking, and keeps in memory what the
  // pipe does not take yet: a loop that prints would fill the memory
  // limit before the output limit, as fast as the reader is slow.
  // Blocking, it prints at the reader's pace, as Python does.
  for (const s of [process.stdout, process.stderr]) {
    if (s._handle && typeof s._handle.setBlocking === 'function') s._handle.setBlocking(true);
  }

  function readRequest() {
    const one = Buffer.alloc(1);
    let size = '';
    for (;;) {
      let n;
      try {
        n = fs.readSync(0, one, 0, 1, null);
      } catch (e) {
        if (e.code === 'EAGAIN') continue;
        throw e;
      }
      if (n === 0 || one[0] === 10) break;
      size += String.fromCharCode(one[0]);
    }
    const data = Buffer.alloc(Number(size));
    let got = 0;
    while (got < data.length) {
      let n;
      try {
        n = fs.readSync(0, data, got, data.length - got, null);
      } catch (e) {
        if (e.code === 'EAGAIN') continue;
        throw e;
      }
      if (n === 0) break;
      got += n;
    }
    return JSON.parse(data.subarray(0, got).toString('utf8'));
  }

  // frame writes a line to fd 1 whole.
  function frame(line) {
    const data = Buffer.from(line + '\n', 'utf8');
    let off = 0;
    while (off < data.length) {
      try {
        off += fs.writeSync(1, data, off, data.length - off);
      } catch (e) {
        if (e.code !== 'EAGAIN') throw e;
      }
    }
  }

  function metrics(source, file) {
    const lines = source.split('\n');
    const m = {
      lines: lines.filter((l) => l.trim() !== '').length,
      comments: lines.filter((l) => /^\s*(\/\/|\/\*|\*)/.test(l)).length,
    };
    // V8's own parser decides whether the source is valid; acorn, deeper in
    // detail but recursive, gives the rest when it can
    try {
      new vm.Script(source, { filename: file });
    } catch (e) {
      if (e instanceof SyntaxError) {
        const at = /:(\d+)\n/.exec(e.stack || '');
        m.syntax_error = { line: at ? +at[1] : 0, column: 0, message: e.message };
        let acorn = null;
        try {
          acorn = require('internal/deps/acorn/acorn/dist/acorn');
          acorn.parse(source, { ecmaVersion: 'latest', sourceType: 'script', locations: true, allowHashBang: true });
        } catch (ae) {
          if (acorn && ae instanceof SyntaxError && ae.loc) {
            m.syntax_error = { line: ae.loc.line, column: ae.loc.column + 1, message: ae.message.replace(/ \(\d+:\d+\)$/, '') };
          }
        }
        return m;
      }
    }
    let tree;
    try {
      const acorn = require('internal/deps/acorn/acorn/dist/acorn');
      tree = acorn.parse(source, { ecmaVersion: 'latest', sourceType: 'script', locations: true, allowHashBang: true });
    } catch (e) {
      return m; // valid, but too deep for acorn here: the lines are all it can tell
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
        for (const y of children(x)) stack.push(y);
      }
      return c;
    };
    // nesting and the walk keep their own stacks: sources nest deep
    const nesting = (n) => {
      let deepest = 0;
      const stack = [[n, 0]];
      while (stack.length) {
        const [x, depth] = stack.pop();
        if (depth > deepest) deepest = depth;
        for (const c of children(x)) stack.push([c, isBlock(c) ? depth + 1 : depth]);
      }
      return deepest;
    };
    const funcs = [];
    let classes = 0;
    const stack = [[tree, '']];
    while (stack.length) {
      const [n, name] = stack.pop();
      if (n.type === 'ClassDeclaration' || n.type === 'ClassExpression') classes++;
      if (isFunc(n)) {
        funcs.push({ name: (n.id && n.id.name) || name || '(anonymous)', line: n.loc.start.line, complexity: complexity(n), nesting: nesting(n) });
      }
      let inner = '';
      if (n.type === 'VariableDeclarator' && n.id.type === 'Identifier') inner = n.id.name;
      if ((n.type === 'MethodDefinition' || n.type === 'Property') && n.key.type === 'Identifier') inner = n.key.name;
      const cs = children(n);
      for (let i = cs.length - 1; i >= 0; i--) stack.push([cs[i], inner]);
    }
    funcs.sort((a, b) => a.line - b.line);
    m.functions = funcs;
    m.classes = classes;
    m.complexity = Math.max(complexity(tree), ...funcs.map((f) => f.complexity));
    m.max_nesting = nesting(tree);
    return m;
  }

  // encode is the value's JSON text, built without recursion (values nest
  // deep); null when it has no JSON form (NaN, Infinity, a BigInt, a
  // function, a cycle) or is longer than room.
  class Close {
    constructor(v) {
      this.v = v;
    }
  }

  function encode(value, room) {
    const CLOSE_LIST = new Close(null), CLOSE_OBJ = new Close(null), COMMA = new Close(null), COLON = new Close(null);
    const marks = new Map([[CLOSE_LIST, ']'], [CLOSE_OBJ, '}'], [COMMA, ','], [COLON, ':']]);
    const out = [];
    const stack = [value === undefined ? null : value];
    const open = new Set();
    let size = 0;
    while (stack.length) {
      const v = stack.pop();
      let s;
      if (marks.has(v)) {
        s = marks.get(v);
      } else if (v instanceof Close) {
        open.delete(v.v);
        continue;
      } else if (v === null) s = 'null';
      else if (typeof v === 'boolean') s = v ? 'true' : 'false';
      else if (typeof v === 'number') {
        if (!Number.isFinite(v)) return null;
        s = JSON.stringify(v);
      } else if (typeof v === 'string') s = JSON.stringify(v);
      else if (typeof v === 'object' && typeof v.toJSON !== 'function' && (Array.isArray(v) || Object.getPrototypeOf(v) === Object.prototype || Object.getPrototypeOf(v) === null)) {
        if (open.has(v)) return null;
        open.add(v);
        const items = [];
        if (Array.isArray(v)) {
          s = '[';
          v.forEach((x, i) => {
            if (i) items.push(COMMA);
            items.push(x === undefined || typeof x === 'function' || typeof x === 'symbol' ? null : x);
          });
          items.push(CLOSE_LIST);
        } else {
          s = '{';
          let first = true;
          for (const k of Object.keys(v)) {
            const x = v[k];
            if (x === undefined || typeof x === 'function' || typeof x === 'symbol') continue;
            if (!first) items.push(COMMA);
            first = false;
            items.push(k, COLON, x);
          }
          items.push(CLOSE_OBJ);
        }
        items.push(new Close(v));
        for (let i = items.length - 1; i >= 0; i--) stack.push(items[i]);
      } else return null;
      out.push(s);
      size += s.length;
      if (size > room) return null;
    }
    return out.join('');
  }

  function text(value, room) {
    let t;
    try {
      t = typeof value === 'bigint' ? String(value) : require('util').inspect(value, { depth: 20, maxArrayLength: 10000, maxStringLength: room, breakLength: Infinity });
    } catch (e) {
      t = '<its text could not be made: ' + (e && e.name) + '>';
    }
    return t.slice(0, room);
  }

  const req = readRequest();
  const source = req.source;
  const file = path.join(process.cwd(), req.file);
  fs.writeFileSync(file, source);
  if (req.metrics) {
    const m = metrics(source, req.file);
    frame('\x1etrellis metrics ' + JSON.stringify(m));
    if (m.syntax_error) process.exit(0);
  }
  const room = (req.limits && req.limits.output) || 65536;

  if (req.mode === 'run') {
    const Module = require('module');
    const m = new Module(file, null);
    m.filename = file;
    m.paths = Module._nodeModulePaths(path.dirname(file));
    process.argv = [process.argv[0], file];
    process.mainModule = m;
    m._compile(source, file);
  } else {
    vm.runInThisContext(source, { filename: file });
    const value = vm.runInThisContext(req.call, { filename: '<call>' });
    Promise.resolve(value).then((v) => {
      const enc = encode(v, room);
      const payload = enc !== null ? '{"value": ' + enc + '}' : JSON.stringify({ text: text(v, room) });
      process.stdout.write('', () => {
        frame('\n\x1etrellis value ' + req.nonce + ' ' + payload);
        process.exit(0);
      });
    }, (e) => {
      process.exitCode = 1;
      throw e;
    });
  }
})();
