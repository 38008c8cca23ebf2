package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/trellisflow/trellis"
	"github.com/trellisflow/trellis/cmd/trellis/internal/page"
	"github.com/trellisflow/trellis/cmd/trellis/internal/rooms"
	"github.com/trellisflow/trellis/cmd/trellis/internal/speech"
	"github.com/trellisflow/trellis/cmd/trellis/internal/studio"
	"github.com/trellisflow/trellis/runtime/api/mcpserver"
	"github.com/trellisflow/trellis/runtime/api/server"
	"github.com/trellisflow/trellis/runtime/egress"
	"github.com/trellisflow/trellis/runtime/store"
	"github.com/trellisflow/trellis/runtime/telemetry"
	"github.com/trellisflow/trellis/runtime/webhook"
)

func cmdServe(ctx context.Context, env *Env, args []string) int {
	fs := flags(env, "serve")
	flows := fs.String("flows", "flows", "directory of the flows to serve")
	addr := fs.String("addr", "127.0.0.1:8080", "address to listen on")
	root := fs.String("root", "", "the directory holding --flows that POST /v1/flows/validate may read a posted flow's files from, nothing outside it (default: the closest directory holding --flows and every file its flows read)")
	storeAddr := storeFlag(fs)
	stopTimeout := fs.Duration("stop-timeout", 30*time.Second, "on SIGTERM, how long runs may take to reach a step boundary before they are cancelled")
	leaseTTL := fs.Duration("lease-ttl", 0, "how long a thread stays held by a server that stopped renewing it (default 15s)")
	deadAfter := fs.Duration("dead-after", 10*time.Second, "how long a server sharing the store may be silent before its runs are adopted")
	notifyURL := fs.String("notify-url", "", "PostgreSQL: a direct connection to LISTEN on, when --store goes through PgBouncer in transaction mode (default: the store's address; off: poll only)")
	debugAddr := fs.String("debug-addr", "", "serve Go's profiles (/debug/pprof/) on this address too; keep it private")
	promote := fs.Bool("promote", false, "promote the versions loaded from --flows (at start and at each reload): new threads start on them on every server sharing the store (without it, only a flow with no promoted version yet gets one)")
	bodyTimeout := fs.Duration("body-timeout", 30*time.Second, "how long a request's body may take to arrive once its headers have: a body that stalls is answered 408 request_timeout and nothing is done (an upload streamed as it is spoken is not bound)")
	headerTimeout := fs.Duration("header-timeout", 10*time.Second, "how long a request's headers may take to arrive before the connection is dropped")
	storeWait := fs.Duration("store-wait", server.DefaultStoreWait, "how long, in all, a run waits for the store through outages (its connections lost, its server restarting, its disk full) before it is queued again to go on once the store is back")
	retain := server.Retention{Events: 2 * time.Minute}
	fs.Var(daysFlag(&retain.Idle), "retain-idle", "delete the threads not written for this long, a `duration` such as 30d or 720h, each with all of its data: checkpoints, child flows' threads, runs, events, voice sessions (0: keep threads until deleted)")
	fs.Var(daysFlag(&retain.Events), "retain-events", "keep a run's whole event stream, tokens included, this long after the run ends (a `duration` such as 2m, or days such as 1d), for clients to resume streams; then keep its node-level events, packed, and its tokens as --retain-tokens says (0: keep every event as it is)")
	fs.StringVar(&retain.Tokens, "retain-tokens", server.TokensMerge, "what becomes of a run's tokens once --retain-events has passed: merge (one event per node's attempt with its whole text) or drop")
	fs.DurationVar(&retain.Every, "retain-every", time.Minute, "how often the retention sweeps (one server of those sharing a store at a time)")
	fs.Float64Var(&retain.Share, "retain-share", 0.1, "the part of the time a retention sweep may work: it rests the rest, in small batches, so that the runs keep the store")
	var hookAllow, hookFlows multi
	fs.Var(&hookAllow, "webhook-allow", "the `LIST` of where webhooks may be posted: host names, *.domain, addresses or networks such as 10.0.0.0/8, comma-separated or repeated; "+
		"an address outside the list is refused, checked on the address connected to; loopback, private, link-local, metadata and other special addresses are reached only through an address or network entry inside them, never through a host name "+
		"(default: none, and no webhooks are sent); the messages are signed with "+server.WebhookSecretEnv+" (whsec_ and base64)")
	fs.Var(&hookFlows, "webhook", "`FLOW=URL`: post the end of every run of FLOW that names no webhook to URL (repeatable)")
	hookTimeout := fs.Duration("webhook-timeout", 10*time.Second, "how long one webhook attempt may take")
	hookAttempts := fs.Int("webhook-attempts", 8, "how many attempts a webhook gets before it is given up")
	hookBackoff := fs.Duration("webhook-backoff", 5*time.Second, "the wait before a webhook's second attempt, doubled before each one after (up to an hour)")
	var sched server.ScheduleLimits
	fs.IntVar(&sched.PerTenant, "schedules-per-tenant", 100, "how many schedules a tenant may have (-1: no limit)")
	fs.DurationVar(&sched.MinInterval, "schedule-min-interval", time.Second, "the shortest time a schedule's ticks may be apart")
	if _, code, ok := parse(fs, args); !ok {
		return code
	}
	if sched.PerTenant == 0 || sched.MinInterval < time.Second {
		return fail(env, "serve", usagef("--schedules-per-tenant is at least 1 (-1: no limit), --schedule-min-interval at least 1s"))
	}
	hooks, err := webhookConfig(hookAllow, hookFlows, os.Getenv(server.WebhookSecretEnv))
	if err != nil {
		return fail(env, "serve", usagef("%v", err))
	}
	if hooks != nil {
		hooks.Timeout, hooks.Attempts, hooks.Backoff = *hookTimeout, *hookAttempts, *hookBackoff
	}
	if *bodyTimeout <= 0 || *headerTimeout <= 0 {
		return fail(env, "serve", usagef("--body-timeout and --header-timeout are durations above 0"))
	}
	if retain.Share == 0 {
		return fail(env, "serve", usagef("--retain-share 0: want the part of the time a sweep may work, above 0 and at most 1"))
	}
	if err := retain.Check(); err != nil {
		return fail(env, "serve", usagef("%v", err))
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	log := slog.New(slog.NewJSONHandler(env.Stderr, nil))
	if soft, from := memoryLimit(os.Getenv, cgroupMemoryFiles...); soft > 0 {
		log.Info("the Go memory limit is nine tenths of the container's", "bytes", soft, "from", from)
	}
	if _, err := os.Stat(*flows); err != nil {
		return fail(env, "serve", usagef("--flows %s: %v", *flows, errors.Unwrap(err)))
	}
	tracer, flush, code := traced(ctx, env, "serve")
	if code != 0 {
		return code
	}
	defer flush()
	if *storeWait <= 0 {
		return fail(env, "serve", usagef("--store-wait %s: want a positive duration", *storeWait))
	}
	rt, err := openRuntime(ctx, *storeAddr, trellis.WithLeaseTTL(*leaseTTL), trellis.WithStoreWait(*storeWait), tracer)
	if err != nil {
		return fail(env, "serve", err)
	}
	defer rt.Close()
	lkCfg, err := rooms.ConfigFromEnv(os.Getenv)
	if err != nil {
		fmt.Fprintf(env.Stderr, "trellis serve: %v\n", err)
		return exitUsage
	}
	var voiceCfg *server.VoiceConfig
	if lkCfg != nil {
		voiceCfg = &server.VoiceConfig{Rooms: rooms.New(*lkCfg, log)}
	}
	sp := speech.NewOffline()
	defer sp.Close()
	srv, err := server.New(server.Config{Runtime: rt, FlowsDir: *flows, Root: *root, Kinds: env.Registry, Logger: log, StopTimeout: *stopTimeout, DeadAfter: *deadAfter, NotifyURL: *notifyURL,
		Voice: voiceCfg, Speech: sp, Page: page.Handler(), Studio: studio.Handler(), Metrics: SandboxMetrics(), Retention: retain, Webhooks: hooks, Schedules: sched,
		BodyTimeout: *bodyTimeout, HeaderTimeout: *headerTimeout, Promote: *promote, Evals: serverEvals(), MCP: mcpserver.New, StoreWait: *storeWait})
	if err != nil {
		return fail(env, "serve", err)
	}
	if cat, err := store.CatalogOf(rt.Store()); err == nil {
		// an admin key kept in the deployment's secrets, registered by
		// every server (once: the others find it there)
		if key := os.Getenv(adminKeyEnv); key != "" {
			tenant := envOr(adminTenantEnv, "admin")
			made, err := server.ImportKey(ctx, cat, tenant, "admin key from "+adminKeyEnv, true, key)
			if err != nil {
				return fail(env, "serve", usagef("%s: %v", adminKeyEnv, err))
			}
			if made {
				log.Info("the admin key in "+adminKeyEnv+" is recorded", "tenant", tenant)
			}
		}
		if keys, err := cat.Keys(ctx, ""); err == nil && len(keys) == 0 {
			log.Warn("no API keys yet: create one with `trellis keys create --tenant NAME --admin --store " + shellWord(shownStore(*storeAddr)) + "`")
		}
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return fail(env, "serve", err)
	}
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	go func() {
		for range hup {
			_ = srv.Reload()
		}
	}()
	if *debugAddr != "" {
		dln, err := net.Listen("tcp", *debugAddr)
		if err != nil {
			return fail(env, "serve", err)
		}
		defer dln.Close()
		go func() { _ = http.Serve(dln, debugMux()) }()
		log.Info("serving profiles", "addr", dln.Addr().String())
	}
	voiceState := "off (set LIVEKIT_URL, LIVEKIT_API_KEY, LIVEKIT_API_SECRET)"
	if lkCfg != nil {
		voiceState = lkCfg.URL
	}
	log.Info("serving", "server", srv.ID(), "addr", ln.Addr().String(), "flows", *flows, "store", shownStore(*storeAddr), "voice", voiceState)
	if err := srv.Serve(ctx, ln); err != nil {
		return fail(env, "serve", err)
	}
	return 0
}

// The environment of serve's admin key: the key (trellis keys generate
// makes one), kept in a deployment's secrets, and its tenant.
const (
	adminKeyEnv    = "TRELLIS_ADMIN_KEY"
	adminTenantEnv = "TRELLIS_ADMIN_TENANT"
)

// webhookConfig reads the webhook flags and secret (nil: no webhooks).
func webhookConfig(allow, flows []string, secret string) (*server.WebhookConfig, error) {
	var entries []string
	for _, a := range allow {
		for _, e := range strings.Split(a, ",") {
			if e = strings.TrimSpace(e); e != "" {
				entries = append(entries, e)
			}
		}
	}
	if len(entries) == 0 && len(flows) == 0 {
		return nil, nil
	}
	list, err := egress.Parse(entries)
	if err != nil {
		return nil, fmt.Errorf("--webhook-allow: %w", err)
	}
	cfg := &server.WebhookConfig{Allow: list, Flows: map[string]string{}}
	for _, f := range flows {
		name, url, ok := strings.Cut(f, "=")
		if !ok || name == "" || url == "" {
			return nil, fmt.Errorf("--webhook %q: want FLOW=URL", f)
		}
		cfg.Flows[name] = url
	}
	if secret != "" {
		if cfg.Secret, err = webhook.ParseSecret(secret); err != nil {
			return nil, fmt.Errorf("%s: %w", server.WebhookSecretEnv, err)
		}
	}
	return cfg, nil
}

// cmdKeys manages the API keys in a store; the command line is checked
// (--help answered) before the store is opened.
func cmdKeys(ctx context.Context, env *Env, args []string) int {
	fs := flags(env, "keys")
	addr := storeFlag(fs)
	tenant := fs.String("tenant", "", "the key's tenant (create), or whose keys to list")
	name := fs.String("name", "", "a name to recognise the key by")
	admin := fs.Bool("admin", false, "the key manages keys and reloads flows")
	fromEnv := fs.String("from-env", "", "create: record the key held by this environment variable (from a secret; trellis keys generate makes one) instead of making one; nothing is printed, and a key recorded before is left as it is")
	pos, code, ok := parse(fs, args)
	if !ok {
		return code
	}
	if len(pos) == 0 {
		fs.Usage()
		return exitUsage
	}
	sub, pos := pos[0], pos[1:]
	if sub == "generate" {
		// a new key's text, recorded nowhere: kept in a deployment's
		// secrets, and registered by keys create --from-env or by serve
		// (TRELLIS_ADMIN_KEY)
		if len(pos) != 0 {
			return fail(env, "keys", usagef("keys generate takes nothing: it prints a new key, recorded nowhere"))
		}
		fmt.Fprintln(env.Stdout, server.NewKey())
		return 0
	}
	switch {
	case sub != "create" && sub != "list" && sub != "revoke":
		return fail(env, "keys", usagef("unknown keys command %q: create, generate, list or revoke", sub))
	case sub == "revoke" && len(pos) != 1:
		return fail(env, "keys", usagef("want keys revoke ID"))
	case sub != "revoke" && len(pos) > 0:
		return fail(env, "keys", usagef("keys %s takes no argument %q", sub, pos[0]))
	}
	rt, err := openRuntime(ctx, *addr)
	if err != nil {
		return fail(env, "keys", err)
	}
	defer rt.Close()
	cat, err := store.CatalogOf(rt.Store())
	if err != nil {
		return fail(env, "keys", err)
	}
	switch sub {
	case "create":
		if *fromEnv != "" {
			key := os.Getenv(*fromEnv)
			if key == "" {
				return fail(env, "keys", usagef("--from-env %s: the variable is empty or not set", *fromEnv))
			}
			made, err := server.ImportKey(ctx, cat, *tenant, *name, *admin, key)
			if err != nil {
				return fail(env, "keys", usagef("--from-env %s: %v", *fromEnv, err))
			}
			if made {
				fmt.Fprintf(env.Stderr, "the key in %s is recorded for tenant %s\n", *fromEnv, *tenant)
			} else {
				fmt.Fprintf(env.Stderr, "the key in %s was recorded already\n", *fromEnv)
			}
			return 0
		}
		k, secret, err := server.CreateKey(ctx, cat, *tenant, *name, *admin)
		if err != nil {
			return fail(env, "keys", err)
		}
		fmt.Fprintf(env.Stderr, "key %s for tenant %s (shown once; keep it secret):\n", k.ID, k.Tenant)
		fmt.Fprintln(env.Stdout, secret)
	case "list":
		keys, err := cat.Keys(ctx, *tenant)
		if err != nil {
			return fail(env, "keys", err)
		}
		for _, k := range keys {
			state := "active"
			switch {
			case !k.Revoked.IsZero():
				state = "revoked " + k.Revoked.Local().Format(time.DateTime)
			case !k.Expires.IsZero() && !time.Now().Before(k.Expires):
				state = "expired " + k.Expires.Local().Format(time.DateTime)
			case !k.Expires.IsZero():
				state = "active until " + k.Expires.Local().Format(time.DateTime)
			}
			role := "tenant"
			switch {
			case k.Scope != "":
				role = k.Scope
			case k.Admin:
				role = "admin"
			}
			fmt.Fprintf(env.Stdout, "%s\t%s\t%s\t%s\t%s\n", k.ID, k.Tenant, role, k.Name, state)
		}
	case "revoke":
		if err := cat.RevokeKey(ctx, pos[0], time.Now().UTC()); err != nil {
			return fail(env, "keys", missingKey(err, pos[0]))
		}
		fmt.Fprintf(env.Stdout, "revoked %s\n", pos[0])
	}
	return 0
}

func missingKey(err error, id string) error {
	if errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("no key %q (trellis keys list shows them)", id)
	}
	return err
}

// debugMux serves Go's runtime profiles.
func debugMux() *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return mux
}

// traced traces the runtime's runs when the OpenTelemetry environment
// asks for it (see telemetry.FromEnv); flush exports the spans not yet
// exported.
// It comes before the runtime, which takes the tracer as an option.
func traced(ctx context.Context, env *Env, name string) (opt trellis.RuntimeOption, flush func(), code int) {
	tr, shutdown, err := telemetry.FromEnv(ctx, "trellis")
	if err != nil {
		return nil, nil, fail(env, name, err)
	}
	return trellis.WithTracer(tr), func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := shutdown(sctx); err != nil {
			fmt.Fprintf(env.Stderr, "trellis %s: exporting traces: %v\n", name, err)
		}
	}, 0
}
