// Package server is the Trellis HTTP API as an http.Handler: flows from
// a directory, threads and runs in the runtime's store, every route but
// the probes behind an API key, and every thread and run belonging to its
// creator's tenant. schemas/openapi.yaml describes the routes (the server
// serves it at /openapi.yaml), and runtime/api holds their types and a
// client. `trellis serve` is this package with flags; a Go program mounts
// it in its own server the same way.
//
// # Mounting
//
// New takes a Config: the runtime whose store keeps the threads (a
// store.Catalog: the memory, SQLite and PostgreSQL stores are), the flow
// directory, and the node kinds to build the flows from (nodes/all's
// Registry is the built-in kinds). Handler is the API; mount it at the
// root of a listener, or under a prefix with http.StripPrefix:
//
//	srv, err := server.New(server.Config{Runtime: rt, FlowsDir: "flows", Kinds: all.Registry()})
//	mux.Handle("/trellis/", http.StripPrefix("/trellis", srv.Handler()))
//
// The handler bounds request bodies (MaxBody), gives each request an id
// (X-Request-Id), logs it and counts it at /metrics. What is specific to
// a deployment is given, not built in: Speech serves the speech routes,
// Page the voice page, Studio the studio's page, Voice the rooms' server
// of voice sessions (LiveKit's, in the trellis command); without them
// their routes say they are not served. Metrics adds collectors of the
// program's own to /metrics. The package imports no node kind and no
// provider's SDK.
//
// # Keys and tenants
//
// Callers send an API key as a bearer token. CreateKey makes one in the
// store (the `trellis keys` command and POST /v1/keys with an admin key do
// too) and returns its secret once; the store keeps only its hash. A key
// acts for its tenant: the threads, runs and memory it creates are its
// tenant's, and another tenant's are not found. An admin key may also
// manage keys and reload the flows.
//
// # Runs, replicas and shutdown
//
// Runs are queued in the store and run by the server that claims them;
// servers sharing a PostgreSQL store share the queue, adopt the runs of a
// server whose heartbeat stopped (DeadAfter), and hear each other through
// LISTEN/NOTIFY (NotifyURL) or by polling (PollEvery). Serve runs the
// handler on a listener and stops gracefully when its context ends. A
// program serving the handler itself calls Shutdown once it stops taking
// requests: each run stops at its next step boundary (within
// StopTimeout) and is queued again, for this server's next start or
// another server, and the clients waiting on runs are answered.
package server

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/trellisflow/trellis/runtime/api"
	"github.com/trellisflow/trellis/runtime/engine"
	"github.com/trellisflow/trellis/runtime/kind"
	"github.com/trellisflow/trellis/runtime/store"
	"github.com/trellisflow/trellis/runtime/versions"
)

// Config is how a server runs.
type Config struct {
	// Runtime runs the flows; its store keeps threads, runs and keys (it
	// must be a store.Catalog). A *trellis.Runtime is one.
	Runtime Runtime
	// FlowsDir holds the flows the server runs.
	FlowsDir string
	// Promote promotes the versions the server loads from FlowsDir (as
	// it starts, and at each reload) for every server sharing the
	// store: new threads start on them. Without it, a load promotes only
	// the flows the store has no promoted version of yet, and a version
	// is promoted with POST /v1/flows/{name}/versions/{version}/promote.
	Promote bool
	// Root bounds what the validate route reads: the files a posted flow
	// names (its state schema, prompts, subflows) are read as `trellis
	// validate` reads them for the flow as a file of FlowsDir, relative to
	// it, from Root and nothing outside it (not through a symbolic link
	// either). It holds FlowsDir. Empty: the closest directory holding
	// FlowsDir and every file its flows read (their prompts and schemas
	// may sit beside the flow directory).
	Root string
	// Kinds builds the flows' nodes (required: nodes/all.Registry() is
	// the built-in kinds).
	Kinds kind.Registry
	// Logger receives the request and run logs (nil: JSON on stderr).
	Logger *slog.Logger
	// MaxBody bounds a request body (default 4 MiB).
	MaxBody int64
	// BodyTimeout bounds how long a request's body may take to arrive
	// once its headers have (default 30s; negative: no bound): a body
	// that stalls is answered 408 request_timeout, and nothing is done.
	// An upload streamed as it is made (a transcription's audio) is not
	// bound by it.
	BodyTimeout time.Duration
	// HeaderTimeout bounds how long Serve waits for a request's headers
	// (default 10s); a program serving Handler itself sets its own
	// http.Server's ReadHeaderTimeout.
	HeaderTimeout time.Duration
	// StopTimeout bounds how long Shutdown waits for runs to reach a
	// step boundary before cancelling them (default 30s); a shutdown
	// takes as long as the runs need, up to it, and gives up on runs
	// that do not end a few seconds after it.
	StopTimeout time.Duration
	// DeadAfter is how long a server's heartbeat may be silent before
	// another server sharing the store adopts its runs (default 10s).
	DeadAfter time.Duration
	// NotifyURL is the direct PostgreSQL connection the server LISTENs
	// on to hear at once what other servers sharing the store do (run
	// events to stream, queued runs, stop requests): set it when the
	// store's address goes through a pooler in transaction mode
	// (PgBouncer), which does not deliver notifications. Empty: the
	// store's own address; "off": poll only. Stores other than
	// PostgreSQL are polled.
	NotifyURL string
	// PollEvery is how often the server polls the store for what it has
	// not been notified of (default 200ms; ten times less often while
	// notifications are heard).
	PollEvery time.Duration
	// Voice is how the threads' voice sessions run: the server of their
	// rooms, and how long agents' grants live (nil: the voice route says
	// voice is not configured).
	Voice *VoiceConfig
	// Speech serves the OpenAI-compatible speech routes (nil: they answer
	// speech_unavailable).
	Speech Speech
	// Page serves the voice page and its script (nil: none).
	Page http.Handler
	// Studio serves the studio's page and its files: GET /studio,
	// /studio/app.js and /studio/flow.schema.json (nil: none; the
	// studio's API routes are served either way).
	Studio http.Handler
	// Retention is what the server deletes and compacts by itself (the
	// zero value: nothing).
	Retention Retention
	// StoreWait is how long, in all, a run waits for the store through
	// outages (its connections lost, its server restarting, its disk
	// full) before it is queued again to go on once the store is back,
	// and how long the record of its end is tried again (default
	// DefaultStoreWait).
	StoreWait time.Duration
	// Metrics are collectors of the program's own that /metrics reports
	// with the server's (the trellis command gives its code sandbox's).
	Metrics []prometheus.Collector
	// Webhooks is where and how runs' ends are posted (nil: nowhere; a
	// run that names a webhook is refused).
	Webhooks *WebhookConfig
	// MCP makes the Model Context Protocol endpoint, POST /mcp, from the
	// API's own handler: the flows as tools (runtime/api/mcpserver.New).
	// The server checks the caller's key first, as for every route, and
	// the endpoint acts through the API with it. Nil: /mcp is not served.
	MCP func(api http.Handler) http.Handler
	// Schedules bounds what a tenant's schedules may ask of the server.
	Schedules ScheduleLimits
	// Evals is how the server runs evals of its flows (nil: offline, the
	// judges by their recorded replies or rules; see evals.go).
	Evals *EvalConfig

	// clock is the server's clock (nil: time.Now), for tests of servers
	// whose clocks disagree and of the schedules' ticks.
	clock func() time.Time
}

// Runtime is what a server runs flows on: the engine, over the store
// that keeps the threads. *trellis.Runtime is one.
type Runtime interface {
	Engine() *engine.Engine
}

// Speech is an OpenAI-compatible speech engine: POST /v1/audio/speech
// and POST /v1/audio/transcriptions. Its handlers return errors as the
// API's (an *api.Error, or any other as internal).
type Speech interface {
	Speak(w http.ResponseWriter, r *http.Request) error
	Transcribe(w http.ResponseWriter, r *http.Request) error
}

// Server serves the API.
type Server struct {
	cfg     Config
	log     *slog.Logger
	cat     store.Catalog
	flows   *flowSet
	runs    *manager
	notes   *notifier
	metrics *metrics
	// health is whether the store takes writes, as the beat found it
	health  *storeHealth
	livekit *voiceRooms
	// voiceCat keeps the voice sessions and their grants' signing key
	// (nil: a store without them, where no grant is good).
	voiceCat store.VoiceCatalog
	studio   studioState
	// retention runs the retention's sweeps (nil: none).
	retention *retention
	// hooks posts runs' ends (see webhooks.go); sched starts the runs of
	// schedules (see schedules.go).
	hooks *webhooks
	sched *scheduler
	// evals runs the evals of the flows (see evals.go).
	evals *evals
	// stopListening ends the notifications' connection.
	stopListening context.CancelFunc
	mux           *http.ServeMux
	handler       http.Handler
	// mcp serves /mcp (nil: not served)
	mcp http.Handler
	// stopping is closed when Shutdown begins.
	stopping     chan struct{}
	stoppingOnce sync.Once
}

// New returns a server over cfg, with its flows loaded: a flow directory
// with errors is an error (with every diagnostic), so a server never
// starts on a broken set.
func New(cfg Config) (*Server, error) {
	if cfg.MaxBody == 0 {
		cfg.MaxBody = 4 << 20
	}
	if cfg.BodyTimeout == 0 {
		cfg.BodyTimeout = 30 * time.Second
	}
	if cfg.HeaderTimeout <= 0 {
		cfg.HeaderTimeout = 10 * time.Second
	}
	if cfg.StopTimeout == 0 {
		cfg.StopTimeout = 30 * time.Second
	}
	if cfg.DeadAfter == 0 {
		cfg.DeadAfter = 10 * time.Second
	}
	if cfg.PollEvery == 0 {
		cfg.PollEvery = 200 * time.Millisecond
	}
	if cfg.StoreWait == 0 {
		cfg.StoreWait = DefaultStoreWait
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.NewJSONHandler(os.Stderr, nil))
	}
	if err := cfg.Retention.Check(); err != nil {
		return nil, err
	}
	if cfg.Runtime == nil || cfg.Runtime.Engine() == nil {
		return nil, errors.New("server: no runtime to run the flows on")
	}
	if cfg.Kinds == nil {
		return nil, errors.New("server: no node kinds to build the flows from (nodes/all.Registry() has the built-in kinds)")
	}
	st := cfg.Runtime.Engine().Store
	cat, err := store.CatalogOf(st)
	if err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, log: log, cat: cat, stopping: make(chan struct{})}
	s.metrics = newMetrics(st, cat)
	s.health = newStoreHealth(s.metrics.reg)
	// the handler is served once New returns, after s.runs is set
	s.metrics.watchSecrets(func() int { return s.runs.secretCount() })
	if err := s.metrics.add(cfg.Metrics); err != nil {
		return nil, err
	}
	s.voiceCat, _ = store.VoiceCatalogOf(st)
	if cfg.Voice != nil {
		if cfg.Voice.Rooms == nil {
			return nil, errors.New("server: voice has no rooms' server (VoiceConfig.Rooms)")
		}
		s.livekit = newVoiceRooms(*cfg.Voice)
		s.startVoice()
	}
	s.flows = &flowSet{dir: cfg.FlowsDir, kinds: cfg.Kinds}
	if vs, err := versions.New(st, cfg.Kinds); err == nil {
		s.flows.vs = vs
		s.flows.promos, _ = store.PromotionsOf(st)
	}
	if _, err := s.flows.reload(cfg.Promote, "server start"); err != nil {
		return nil, err
	}
	if cfg.Root != "" {
		if _, _, err := s.validateRoot(); err != nil {
			return nil, err
		}
	}
	s.notes = &notifier{log: log, every: cfg.PollEvery}
	if n, ok := st.(store.Notifier); ok && cfg.NotifyURL != "off" {
		s.notes.n = n
	}
	s.runs = newManager(s)
	s.notes.kick, s.notes.kickStops = s.runs.nudge, s.runs.nudgeStops
	lctx, stopListening := context.WithCancel(context.Background())
	s.stopListening = stopListening
	go s.notes.listen(lctx, cfg.NotifyURL)
	if err := s.startWebhooks(lctx); err != nil {
		stopListening()
		s.runs.shutdown(context.Background())
		return nil, err
	}
	s.startSchedules(lctx)
	s.startEvals()
	s.retention = s.startRetention()
	s.mux = http.NewServeMux()
	routes := http.NewServeMux() // the routes alone, to tell 404 from 405
	for _, rt := range s.routes() {
		s.mux.Handle(rt.method+" "+rt.path, s.wrap(rt))
		routes.Handle(rt.method+" "+rt.path, http.NotFoundHandler())
	}
	if cfg.MCP != nil {
		// not a route of the API's document: its body is MCP's JSON-RPC
		// (the document's description names it)
		rt := route{method: "POST", path: "/mcp", access: tenant, stream: true, handle: func(w http.ResponseWriter, r *http.Request, _ *caller) error {
			// a call runs a flow: as long as the run takes, as a wait does
			_ = http.NewResponseController(w).SetWriteDeadline(time.Time{})
			s.mcp.ServeHTTP(w, r)
			return nil
		}}
		s.mux.Handle("POST /mcp", s.wrap(rt))
		routes.Handle("POST /mcp", http.NotFoundHandler())
	}
	s.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		var allowed []string
		for _, m := range []string{"GET", "POST", "PUT", "PATCH", "DELETE"} {
			probe := r.Clone(r.Context())
			probe.Method = m
			if _, pattern := routes.Handler(probe); pattern != "" {
				allowed = append(allowed, m)
			}
		}
		if len(allowed) > 0 {
			w.Header().Set("Allow", strings.Join(allowed, ", "))
			writeError(w, r, &api.Error{Code: api.CodeMethodNotAllowed, Message: r.Method + " is not a method of " + r.URL.Path + "; it takes " + strings.Join(allowed, ", ")})
			return
		}
		writeError(w, r, &api.Error{Code: api.CodeNotFound, Message: "no route " + r.Method + " " + r.URL.Path})
	})
	s.handler = s.requests(cleanPaths(s.mux))
	if cfg.MCP != nil {
		s.mcp = cfg.MCP(s.handler)
	}
	return s, nil
}

// cleanPaths answers a request whose path is not in its clean form (a
// "." or ".." element, a doubled slash) with the JSON error a client
// reads (404 not_found, naming the clean path), where the ServeMux would
// redirect to the clean path: an API client is never sent a redirect
// the API does not document, and a path is never read as another. The
// path is read as the ServeMux matches it, escaped: an escaped slash
// (%2F) is part of its element, not a separator (a thread's id may hold
// one, and is then refused by its route as any id it does not take),
// while an escaped dot is a dot.
func cleanPaths(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if p := escapedDots.Replace(r.URL.EscapedPath()); r.Method != http.MethodConnect && p != "" {
			clean := path.Clean("/" + p)
			if strings.HasSuffix(p, "/") && clean != "/" {
				clean += "/"
			}
			if clean != p {
				writeError(w, r, &api.Error{Code: api.CodeNotFound,
					Message: fmt.Sprintf("no route %s %s: a path has no empty, \".\" or \"..\" element (%s is its clean form)", r.Method, p, clean)})
				return
			}
			// an element that is an escaped slash alone is one the
			// ServeMux cannot match (it stands for its trailing slash):
			// a value no route takes, refused as such
			for _, e := range strings.Split(p, "/") {
				if strings.EqualFold(e, "%2F") {
					writeError(w, r, &api.Error{Code: api.CodeBadRequest,
						Message: fmt.Sprintf("%s %s: an element of the path is an escaped slash alone (%%2F), which names nothing", r.Method, p)})
					return
				}
			}
		}
		next.ServeHTTP(w, r)
	})
}

// escapedDots turns a path's escaped dots into dots (RFC 3986: an
// escaped unreserved character is that character).
var escapedDots = strings.NewReplacer("%2E", ".", "%2e", ".")

// eng is the engine the flows run on.
func (s *Server) eng() *engine.Engine { return s.cfg.Runtime.Engine() }

// ID names this server in the store's run queue (and in its logs).
func (s *Server) ID() string { return s.runs.id }

// Handler is the server's HTTP handler.
func (s *Server) Handler() http.Handler { return s.handler }

// Serve accepts connections on ln until ctx ends, then shuts down
// gracefully: it lets every run reach its next step boundary and
// checkpoint (within StopTimeout) and queues it again to resume, answers
// the clients waiting on runs and ends their streams, and returns.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	hs := &http.Server{
		Handler: s.handler,
		// the body has its own deadline (BodyTimeout), lifted once it is
		// read, so that a route may wait or stream as long as it needs
		ReadHeaderTimeout: s.cfg.HeaderTimeout,
		WriteTimeout:      2 * time.Minute, // streams and waits lift it
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
	}
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	s.log.Info("shutting down: finishing the runs' current steps")
	sctx, cancel := context.WithTimeout(context.Background(), s.cfg.StopTimeout)
	defer cancel()
	s.beginStop()
	s.retention.stop()
	// the runs end at a step boundary; their waiters are answered and
	// their streams end as they do
	s.runs.shutdown(sctx)
	s.stopEvals(sctx)
	hctx, hcancel := context.WithTimeout(context.Background(), httpGrace)
	defer hcancel()
	if err := hs.Shutdown(hctx); err != nil {
		hs.Close()
	}
	s.stopListening()
	s.log.Info("stopped")
	return nil
}

// httpGrace is how long a shutdown waits, once the runs have stopped,
// for the requests under way to be answered.
const httpGrace = 2 * time.Second

func (s *Server) beginStop() { s.stoppingOnce.Do(func() { close(s.stopping) }) }

// isStopping reports whether the server's shutdown has begun.
func (s *Server) isStopping() bool {
	select {
	case <-s.stopping:
		return true
	default:
		return false
	}
}

// Shutdown stops the runs as Serve does when its context ends, for a
// server whose handler is served by someone else, which calls it once it
// stops serving: the server claims, runs and adopts runs, and listens for
// other servers, until then.
func (s *Server) Shutdown(ctx context.Context) {
	s.beginStop()
	s.retention.stop()
	s.runs.shutdown(ctx)
	s.stopEvals(ctx)
	s.stopListening()
}

// access is who may call a route.
type access int

const (
	public access = iota // no key
	tenant               // any valid key, acting for its tenant
	admin                // an admin key
	agent                // a voice agent's grant only
	edit                 // an admin key, or a studio's page's: changing the flows
)

// route is one route of the API; routes() is the table every route is
// registered, documented and tested from.
type route struct {
	method, path string
	access       access
	// stream marks a route that answers with Server-Sent Events.
	stream bool
	// idempotence is what the route does with an idempotency key (see
	// requests.go).
	idempotence idempotence
	// streamsBody marks a route that reads an upload as it is made, so
	// its body has no deadline.
	streamsBody bool
	handle      func(w http.ResponseWriter, r *http.Request, c *caller) error
}

func (s *Server) routes() []route {
	return append([]route{
		{method: "GET", path: "/healthz", access: public, handle: s.healthz},
		{method: "GET", path: "/readyz", access: public, handle: s.readyz},
		{method: "GET", path: "/metrics", access: public, handle: s.metricsHandler},
		{method: "GET", path: "/openapi.yaml", access: public, handle: s.openapi},

		{method: "GET", path: "/v1/flows", access: tenant, handle: s.listFlows},
		{method: "GET", path: "/v1/flows/{name}", access: tenant, handle: s.getFlow},
		{method: "GET", path: "/v1/flows/{name}/graph", access: tenant, handle: s.flowGraph},
		{method: "POST", path: "/v1/flows/validate", access: tenant, handle: s.validateFlow},
		{method: "POST", path: "/v1/flows/reload", access: edit, handle: s.reloadFlows},
		{method: "GET", path: "/v1/flows/{name}/files", access: tenant, handle: s.flowFiles},
		{method: "PUT", path: "/v1/flows/{name}/files", access: edit, handle: s.saveFlow},
		{method: "POST", path: "/v1/flows/{name}/check", access: tenant, handle: s.checkFlow},
		{method: "GET", path: "/v1/flows/{name}/nodes/{node}/prompt", access: tenant, handle: s.previewPrompt},

		{method: "GET", path: "/v1/flows/{name}/versions", access: tenant, handle: s.listVersions},
		{method: "GET", path: "/v1/flows/{name}/versions/{version}/threads", access: tenant, handle: s.versionThreads},
		{method: "POST", path: "/v1/flows/{name}/versions/{version}/promote", access: admin, handle: s.promoteVersion},
		{method: "POST", path: "/v1/threads/{id}/migrate", access: tenant, handle: s.moveThread},

		{method: "POST", path: "/v1/threads", access: tenant, idempotence: keyedAnswer, handle: s.createThread},
		{method: "GET", path: "/v1/threads", access: tenant, handle: s.listThreads},
		{method: "GET", path: "/v1/threads/{id}", access: tenant, handle: s.getThread},
		{method: "DELETE", path: "/v1/threads/{id}", access: tenant, handle: s.deleteThread},
		{method: "GET", path: "/v1/threads/{id}/state", access: tenant, handle: s.threadState},
		{method: "GET", path: "/v1/threads/{id}/history", access: tenant, handle: s.threadHistory},
		{method: "POST", path: "/v1/threads/{id}/fork", access: tenant, idempotence: keyedAnswer, handle: s.forkThread},
		{method: "POST", path: "/v1/threads/{id}/update", access: tenant, idempotence: keyedAnswer, handle: s.updateThread},
		{method: "POST", path: "/v1/threads/{id}/replay", access: tenant, idempotence: keyedAnswer, handle: s.replayThread},
		{method: "POST", path: "/v1/threads/{id}/flow-test", access: tenant, idempotence: keyedAnswer, handle: s.flowTest},
		{method: "POST", path: "/v1/threads/{id}/voice", access: tenant, handle: s.voice},
		{method: "DELETE", path: "/v1/threads/{id}/voice", access: tenant, handle: s.endVoice},
		{method: "POST", path: "/v1/threads/{id}/voice/grant", access: agent, handle: s.renewGrant},
		{method: "DELETE", path: "/v1/threads/{id}/voice/grant", access: agent, handle: s.endGrant},
		{method: "POST", path: "/v1/voice/signing-key", access: admin, handle: s.rotateSigningKey},

		{method: "POST", path: "/v1/threads/{id}/runs", access: tenant, idempotence: keyedRun, handle: s.startRun},
		{method: "POST", path: "/v1/threads/{id}/runs/wait", access: tenant, idempotence: keyedRun, handle: s.startRunWait},
		{method: "POST", path: "/v1/threads/{id}/runs/stream", access: tenant, stream: true, idempotence: keyedRun, handle: s.startRunStream},
		{method: "GET", path: "/v1/threads/{id}/runs", access: tenant, handle: s.listRuns},
		{method: "GET", path: "/v1/threads/{id}/runs/{run}", access: tenant, handle: s.getRun},
		{method: "GET", path: "/v1/threads/{id}/runs/{run}/wait", access: tenant, handle: s.joinRun},
		{method: "GET", path: "/v1/threads/{id}/runs/{run}/stream", access: tenant, stream: true, handle: s.joinStream},
		{method: "POST", path: "/v1/threads/{id}/runs/{run}/cancel", access: tenant, handle: s.cancelRun},

		{method: "PUT", path: "/v1/memory/items", access: tenant, idempotence: keyedAnswer, handle: s.putMemory},
		{method: "GET", path: "/v1/memory/items", access: tenant, handle: s.getMemory},
		{method: "DELETE", path: "/v1/memory/items", access: tenant, handle: s.deleteMemory},
		{method: "POST", path: "/v1/memory/items/search", access: tenant, handle: s.searchMemory},
		{method: "POST", path: "/v1/memory/namespaces", access: tenant, handle: s.memoryNamespaces},

		{method: "POST", path: "/v1/audio/speech", access: tenant, handle: s.speak},
		{method: "POST", path: "/v1/audio/transcriptions", access: tenant, streamsBody: true, handle: s.transcribe},

		{method: "GET", path: "/voice", access: public, handle: s.page},
		{method: "GET", path: "/voice/app.js", access: public, handle: s.page},

		{method: "GET", path: "/studio", access: public, handle: s.studioPage},
		{method: "GET", path: "/studio/app.js", access: public, handle: s.studioPage},
		{method: "GET", path: "/studio/flow.schema.json", access: public, handle: s.studioPage},
		{method: "POST", path: "/studio/signin", access: public, handle: s.studioFormSignIn},
		{method: "POST", path: "/v1/studio/session", access: public, handle: s.studioSignIn},
		{method: "GET", path: "/v1/studio/session", access: tenant, handle: s.studioWhoAmI},
		{method: "POST", path: "/v1/studio/session/renew", access: tenant, handle: s.studioRenew},

		{method: "POST", path: "/v1/keys", access: admin, idempotence: refusesKey, handle: s.createKey},
		{method: "GET", path: "/v1/keys", access: admin, handle: s.listKeys},
		{method: "DELETE", path: "/v1/keys/{key}", access: admin, handle: s.revokeKey},
	}, append(append(s.webhookRoutes(), s.scheduleRoutes()...), s.evalRoutes()...)...)
}

// caller is who makes a request.
type caller struct {
	key    *store.KeyRecord
	tenant string
	// scope, for a voice agent's grant, is the one thread it may reach,
	// scopeFlow that thread's flow, and session the grant's voice session.
	scope, scopeFlow, session string
}

type ctxKey int

const requestIDKey ctxKey = 0

// requests gives every request an id, a body limit and a log line.
func (s *Server) requests(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := r.Header.Get("X-Request-Id")
		if !validRequestID(id) {
			id = newID("req")
		}
		w.Header().Set("X-Request-Id", id)
		r = r.WithContext(context.WithValue(r.Context(), requestIDKey, id))
		if r.Body != nil {
			r.Body = http.MaxBytesReader(w, r.Body, s.cfg.MaxBody)
		}
		rec := &statusRecorder{ResponseWriter: w, status: http.StatusOK}
		start := time.Now()
		next.ServeHTTP(rec, r)
		pattern := r.Pattern
		if pattern == "" {
			pattern = "unmatched"
		}
		s.metrics.request(pattern, rec.status, time.Since(start))
		msg := "request"
		if rec.status == statusClientGone {
			msg = "client disconnected"
		}
		s.log.LogAttrs(r.Context(), slog.LevelInfo, msg, slog.String("id", id), slog.String("method", r.Method),
			slog.String("path", r.URL.Path), slog.Int("status", rec.status), slog.Duration("took", time.Since(start)))
	})
}

// statusClientGone is the status a request is counted and logged with
// when its client left before it was answered (nginx's 499): it was not
// answered, and no fault of the server's.
const statusClientGone = 499

// clientGone records that the request's client left before its answer,
// which is not written.
func clientGone(w http.ResponseWriter) {
	for {
		switch x := w.(type) {
		case *statusRecorder:
			x.status = statusClientGone
			return
		case interface{ Unwrap() http.ResponseWriter }:
			w = x.Unwrap()
		default:
			return
		}
	}
}

func validRequestID(id string) bool {
	if id == "" || len(id) > 128 {
		return false
	}
	for _, c := range id {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune("-_.:", c)) {
			return false
		}
	}
	return true
}

// statusRecorder keeps the status a handler sent, and passes flushes on.
type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (r *statusRecorder) WriteHeader(code int) {
	r.status = code
	r.ResponseWriter.WriteHeader(code)
}

func (r *statusRecorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

// wrap authenticates a route's caller and turns its error into the error
// shape.
func (s *Server) wrap(rt route) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// an error is answered, unless the client left: its context
		// ended, and what failed then failed for it
		body := s.bodyDeadline(w, r, rt)
		fail := func(err error) {
			if bodyTimedOut(w, r, body, err) {
				return
			}
			if r.Context().Err() != nil {
				clientGone(w)
				return
			}
			if code := s.errorCode(err); code == api.CodeInternal {
				s.log.Error("request failed", "id", r.Context().Value(requestIDKey), "error", err.Error())
			}
			writeError(w, r, err)
		}
		c := &caller{}
		if rt.access != public {
			var err error
			if c, err = s.authenticate(r); err != nil {
				fail(err)
				return
			}
			if rt.access == admin && !c.admin() {
				fail(&api.Error{Code: api.CodeForbidden, Message: "this route takes an admin key"})
				return
			}
			if rt.access == edit && !c.edits() {
				fail(&api.Error{Code: api.CodeForbidden, Message: "changing the flows takes an admin key (or the key trellis studio signs its page in with)"})
				return
			}
			if err := reach(c, rt, r); err != nil {
				fail(err)
				return
			}
		}
		if strings.HasPrefix(rt.path, "/v1/") {
			if err := checkQuery(rt, r); err != nil {
				fail(err)
				return
			}
		}
		if key := r.Header.Get(api.IdempotencyKeyHeader); key != "" && rt.idempotence != notKeyed {
			s.keyedRequest(w, r, c, rt, key, fail)
			return
		}
		if err := rt.handle(w, r, c); err != nil {
			fail(err)
		}
	})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
}

// newID makes an id: a prefix and 16 random hex digits.
func newID(prefix string) string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return prefix + "_" + hex.EncodeToString(b)
}

func (s *Server) healthz(w http.ResponseWriter, _ *http.Request, _ *caller) error {
	writeJSON(w, http.StatusOK, api.Health{Status: "ok"})
	return nil
}

func (s *Server) readyz(w http.ResponseWriter, r *http.Request, _ *caller) error {
	select {
	case <-s.stopping:
		writeJSON(w, http.StatusServiceUnavailable, api.Health{Status: "stopping"})
		return nil
	default:
	}
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	if _, err := s.eng().Store.Threads(ctx, store.ThreadOptions{Limit: 1}); err != nil {
		s.log.Warn("not ready", "error", err.Error())
		writeJSON(w, http.StatusServiceUnavailable, api.Health{Status: "unavailable", Error: "the store does not answer"})
		return nil
	}
	// it answers reads; whether it takes writes, the beat says
	switch class, _ := s.health.state(); class {
	case store.Unavailable:
		writeJSON(w, http.StatusServiceUnavailable, api.Health{Status: "unavailable", Error: "the store does not take writes: runs wait for it"})
		return nil
	case store.Full:
		writeJSON(w, http.StatusServiceUnavailable, api.Health{Status: "unavailable", Error: "the store's disk is full: writes fail until space is freed, and runs wait for it"})
		return nil
	}
	h := api.Health{Status: "ok"}
	if s.livekit != nil {
		// voice is a part of the server: without it, the rest is ready
		h.Voice = "ok"
		if err := s.voiceHealth(ctx); err != nil {
			h.Status, h.Voice, h.VoiceError = "degraded", "unavailable", "the LiveKit server failed: "+s.livekit.rooms.Reason(err)
		}
	}
	writeJSON(w, http.StatusOK, h)
	return nil
}
