// A third party's client of trellis serve, typed only by the types
// openapi-typescript generates from the served /openapi.yaml (schema.d.ts,
// made by the test with the generator's default flags) and run with
// openapi-fetch: it must type-check under tsc --strict with no cast.
//
// The test writes env.ts: the server's address, a key, and what the
// candidate says. The script runs a whole interview, streams one turn,
// forks the thread, filters threads by metadata in the document's
// deepObject style, answers an interrupt and sends a run with an
// idempotency key twice; any failure throws.
import createClient from "openapi-fetch";
import type { components, paths } from "./schema.js";
import { base, key, script } from "./env.js";

type Values = components["schemas"]["Values"];

interface Script {
  candidate: Values;
  turns: { say: string; code: string }[];
  closing: string;
}

function fail(what: string, detail?: unknown): never {
  throw new Error(`${what}: ${JSON.stringify(detail)}`);
}

const interview: Script = script;
const client = createClient<paths>({ baseUrl: base, headers: { Authorization: `Bearer ${key}` } });
const ada = { params: { path: { id: "ada" } } };

// a thread made with a resume and metadata
const made = await client.POST("/v1/threads", {
  body: { id: "ada", flow: "interview", values: interview.candidate, metadata: { candidate: "ada" } },
});
if (!made.data || made.data.checkpoint !== 1 || made.data.status !== "idle") fail("create", made.error);

// the turns until closing, one of them streamed
let last: components["schemas"]["Run"] | undefined;
for (const [i, turn] of interview.turns.entries()) {
  const input: Values = {};
  if (i > 0) input.last_response = turn.say;
  if (turn.code !== "") input.current_code = turn.code;
  if (i === 3) {
    const streamed = await client.POST("/v1/threads/{id}/runs/stream", { ...ada, body: { input }, parseAs: "stream" });
    const run = streamed.response.headers.get("Trellis-Run");
    if (!streamed.data || !run) fail("stream", streamed.error);
    const text = await new Response(streamed.data).text();
    const types = [...text.matchAll(/^event: (\w+)$/gm)].map((m) => m[1]);
    if (types[0] !== "run_start" || types.at(-1) !== "run_end" || !types.includes("node_output")) fail("stream: events", types);
    const ended = await client.GET("/v1/threads/{id}/runs/{run}/wait", { params: { path: { id: "ada", run } } });
    if (!ended.data || ended.data.status !== "succeeded") fail("stream: the run", ended.error ?? ended.data);
    last = ended.data;
    continue;
  }
  const done = await client.POST("/v1/threads/{id}/runs/wait", { ...ada, body: { input } });
  if (!done.data || done.data.status !== "succeeded") fail(`turn ${i}`, done.error ?? done.data);
  last = done.data;
}
if (last?.state?.phase !== "done" || last.state.next_message !== interview.closing) fail("closing", last?.state?.next_message);

// a fork from the thread's second checkpoint
const fork = await client.POST("/v1/threads/{id}/fork", { ...ada, body: { at: 2, id: "ada-2", metadata: { candidate: "ada", copy: "yes" } } });
if (!fork.data || fork.data.id !== "ada-2") fail("fork", fork.error);
const forked = await client.GET("/v1/threads/{id}/state", { params: { path: { id: "ada-2" } } });
if (!forked.data || forked.data.values.phase === "done") fail("the fork's state", forked.error ?? forked.data);

// the metadata filter, as openapi-fetch writes a deepObject: metadata[copy]=yes
const copies = await client.GET("/v1/threads", { params: { query: { metadata: { copy: "yes" } } } });
if (!copies.data || copies.data.threads.map((t) => t.id).join() !== "ada-2") fail("metadata filter", copies.error ?? copies.data);
const none = await client.GET("/v1/threads", { params: { query: { metadata: { candidate: "grace" } } } });
if (!none.data || none.data.threads.length !== 0) fail("metadata filter: no match", none.error ?? none.data);

// a flow that asks: the question in the state, the answer with resume
const approval = { params: { path: { id: "cand-1" } } };
if (!(await client.POST("/v1/threads", { body: { id: "cand-1", flow: "approval" } })).data) fail("create approval");
const asked = await client.POST("/v1/threads/{id}/runs/wait", { ...approval, body: { input: { candidate: "Ada", score: 82 } } });
if (!asked.data || asked.data.status !== "succeeded") fail("approval: first run", asked.error);
const paused = await client.GET("/v1/threads/{id}/state", approval);
const question = paused.data?.interrupts?.[0];
if (!question || question.id !== "recruiter") fail("approval: the question", paused.error ?? paused.data);
const answered = await client.POST("/v1/threads/{id}/runs/wait", {
  ...approval,
  body: { resume: true, answers: { [question.id]: { approve: true, note: "strong" } } },
});
if (!answered.data || answered.data.state?.approved !== true || answered.data.state.note !== "strong") fail("approval: the answer", answered.error ?? answered.data);

// a run started with an idempotency key, sent again after a lost answer:
// the same run, answered as the first time, and not run twice
const keyed = { params: { path: { id: "cand-2" }, header: { "Idempotency-Key": "cand-2-turn-1" } } };
if (!(await client.POST("/v1/threads", { body: { id: "cand-2", flow: "approval" } })).data) fail("create cand-2");
const first = await client.POST("/v1/threads/{id}/runs/wait", { ...keyed, body: { input: { candidate: "Grace", score: 90 } } });
const again = await client.POST("/v1/threads/{id}/runs/wait", { ...keyed, body: { input: { candidate: "Grace", score: 90 } } });
if (!first.data || !again.data || first.data.id !== again.data.id || again.response.headers.get("Idempotent-Replayed") !== "true") {
  fail("a keyed run sent again", again.error ?? again.data);
}
const runs = await client.GET("/v1/threads/{id}/runs", { params: { path: { id: "cand-2" } } });
if (!runs.data || runs.data.runs.length !== 1) fail("the runs of a keyed run sent twice", runs.error ?? runs.data);
const reused = await client.POST("/v1/threads/{id}/runs/wait", { ...keyed, body: { input: { candidate: "Grace", score: 10 } } });
if (reused.error?.error.code !== "idempotency_key_reused") fail("a key sent with another body", reused.error ?? reused.data);

// an error is typed too
const missing = await client.GET("/v1/threads/{id}/state", { params: { path: { id: "nobody" } } });
if (missing.error?.error.code !== "not_found") fail("an unknown thread", missing.error);

console.log("ok");
