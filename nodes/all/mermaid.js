// Parses Mermaid drawings with Mermaid's own parser: reads a JSON list of
// {name, text} on stdin and prints a JSON list of {name, ok, error}.
// MERMAID_DIR and JSDOM_DIR name the installed packages.
const path = require('path');

async function main() {
  const { JSDOM } = require(path.join(process.env.JSDOM_DIR));
  const dom = new JSDOM('<!doctype html><html><body></body></html>');
  globalThis.window = dom.window;
  globalThis.document = dom.window.document;
  const mermaid = (await import(path.join(process.env.MERMAID_DIR, 'dist', 'mermaid.core.mjs'))).default;
  let input = '';
  for await (const chunk of process.stdin) input += chunk;
  const out = [];
  for (const d of JSON.parse(input)) {
    try {
      await mermaid.parse(d.text);
      out.push({ name: d.name, ok: true });
    } catch (e) {
      out.push({ name: d.name, ok: false, error: String(e.message || e).slice(0, 500) });
    }
  }
  process.stdout.write(JSON.stringify(out));
}

main().catch((e) => { console.error(e); process.exit(1); });
