package cli

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/trellisflow/trellis"
	"github.com/trellisflow/trellis/nodes/llm/llmtest"
	"github.com/trellisflow/trellis/runtime/api"
	"github.com/trellisflow/trellis/runtime/schema"
	"github.com/trellisflow/trellis/runtime/store"
	"github.com/trellisflow/trellis/runtime/store/postgres"
)

// pruneConfig is a load run with a retention prune beside it.
type pruneConfig struct {
	loadConfig
	// idle is how many idle threads are seeded, each a copy of a
	// nine-turn interview recorded through the server, 40 days old.
	idle int
	// window is how long the load is measured; rounds how many times
	// each variant runs, alternating.
	window time.Duration
	rounds int
	// share is the part of the time the retention may work.
	share float64
}

// variant is one way the server runs in a retention load test.
type variant struct {
	name string
	args []string
}

// loadRound is what one round measured.
type loadRound struct {
	turns   int
	errs    int64
	lat     []time.Duration
	pruned  [3]float64 // idle threads deleted before and during the window, and left
	work    float64    // the retention's work in the window, in seconds (its metric)
	window  time.Duration
	firstEr string
}

// loadtestRetention measures the served interview's throughput and
// latency with a retention prune of cfg.idle idle threads running
// beside it, against the same load without it: each round starts a
// server on a new store seeded with the idle threads, measures cfg.window
// of load (cfg.threads candidates, each taking turns without pause, a
// new interview after cfg.turns), and reads the retention's metrics.
func loadtestRetention(ctx context.Context, cfg pruneConfig) (string, error) {
	dir, err := os.MkdirTemp("", "trellis-loadtest")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(dir)
	model := llmtest.New()
	model.Latency = cfg.latency
	ms := httptest.NewServer(model)
	defer ms.Close()
	initial, err := schema.ReadFile(cfg.values)
	if err != nil {
		return "", err
	}
	values := initial.(map[string]any)
	// each store is a new SQLite file, or a new database on the
	// PostgreSQL server, dropped at the end
	var made []string
	defer func() {
		for _, name := range made {
			_ = postgres.DropDatabase(context.WithoutCancel(ctx), cfg.store, name)
		}
	}()
	stores := func(name string) (string, error) {
		if cfg.store == "" {
			return "sqlite:" + filepath.Join(dir, name+".db"), nil
		}
		if !strings.HasPrefix(cfg.store, "postgres") {
			return "", fmt.Errorf("--store %s: the store of a retention load test is a new SQLite file (no --store) or a PostgreSQL server, where each round makes a database", cfg.store)
		}
		name = "trellis_load_" + name + "_" + strconv.FormatInt(time.Now().UnixNano(), 36)
		addr, err := postgres.CreateDatabase(ctx, cfg.store, name)
		if err == nil {
			made = append(made, name)
		}
		return addr, err
	}
	// the template: one interview recorded through a server
	tplStore, err := stores("template")
	if err != nil {
		return "", err
	}
	tpl, err := recordTemplate(ctx, cfg.loadConfig, tplStore, ms.URL, values)
	if err != nil {
		return "", fmt.Errorf("record the template interview: %w", err)
	}
	share := strconv.FormatFloat(cfg.share, 'g', -1, 64)
	variants := []variant{
		{"without the prune", []string{"--retain-events", "0"}},
		{fmt.Sprintf("pruning %d idle threads", cfg.idle), []string{"--retain-events", "0", "--retain-idle", "30d", "--retain-every", "1s", "--retain-share", share}},
	}
	results := make([][]loadRound, len(variants))
	for round := range cfg.rounds {
		for i, v := range variants {
			addr, err := stores(fmt.Sprintf("r%dv%d", round, i))
			if err != nil {
				return "", err
			}
			if err := seedIdle(ctx, addr, tpl, cfg.idle); err != nil {
				return "", fmt.Errorf("seed the idle threads: %w", err)
			}
			prof := ""
			if cfg.profile != "" {
				prof = fmt.Sprintf("%s.v%d.r%d", cfg.profile, i, round+1)
			}
			r, err := loadRound1(ctx, cfg, addr, ms.URL, values, v.args, prof)
			if err != nil {
				return "", fmt.Errorf("%s, round %d: %w", v.name, round+1, err)
			}
			results[i] = append(results[i], r)
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "store %s, %d candidates (a new interview after %d turns), model latency %s, %s measured per round, %d rounds; %d idle threads seeded (nine-turn interviews, 40 days old)\n",
		storeKind(cfg.store), cfg.threads, cfg.turns, cfg.latency, cfg.window, cfg.rounds, cfg.idle)
	var base float64
	var baseP99 time.Duration
	for i, v := range variants {
		var turns int
		var lat []time.Duration
		var span time.Duration
		var errs int64
		var pruned [3]float64
		var worked float64
		first := ""
		var each []string
		for _, r := range results[i] {
			rl := slices.Sorted(slices.Values(r.lat))
			each = append(each, fmt.Sprintf("%.1f turns/s p99 %s", float64(r.turns)/r.window.Seconds(), pct(rl, 99)))
			turns += r.turns
			lat = append(lat, r.lat...)
			span += r.window
			errs += r.errs
			worked += r.work
			for k := range pruned {
				pruned[k] += r.pruned[k]
			}
			first = cmp.Or(first, r.firstEr)
		}
		slices.Sort(lat)
		tput := float64(turns) / span.Seconds()
		p99 := pct(lat, 99)
		fmt.Fprintf(&b, "  %-26s %6.1f turns/s  p50 %s  p99 %s  errors %d", v.name, tput, pct(lat, 50), p99, errs)
		if i == 0 {
			base, baseP99 = tput, p99
		} else {
			fmt.Fprintf(&b, "  (throughput %+.1f%%, p99 %.2fx)", 100*(tput/base-1), float64(p99)/float64(baseP99))
		}
		b.WriteString("\n")
		fmt.Fprintf(&b, "  %-26s rounds: %s\n", "", strings.Join(each, "; "))
		if i > 0 {
			fmt.Fprintf(&b, "  %-26s idle threads pruned per round: %.0f before the window, %.0f during it, %.0f left at its end; the retention's work in the window %.1fs\n", "",
				pruned[0]/float64(cfg.rounds), pruned[1]/float64(cfg.rounds), pruned[2]/float64(cfg.rounds), worked/float64(cfg.rounds))
		}
		if first != "" {
			fmt.Fprintf(&b, "  %-26s first error: %s\n", "", first)
		}
	}
	return b.String(), nil
}

func storeKind(addr string) string {
	if addr == "" {
		return "sqlite"
	}
	return strings.SplitN(addr, ":", 2)[0]
}

// servedProc is a `trellis serve` process of a load test.
type servedProc struct {
	cmd  *exec.Cmd
	log  *strings.Builder
	addr string
	key  string
}

// startServe starts `trellis serve` on addr's store with args, and waits
// until it is ready.
// The server is cfg.exe (this program when empty), and its key is made
// by its own `keys create`, as an operator would.
func startServe(ctx context.Context, cfg loadConfig, storeAddr, modelURL string, args []string) (*servedProc, error) {
	exe := cfg.exe
	if exe == "" {
		var err error
		if exe, err = os.Executable(); err != nil {
			return nil, err
		}
	}
	out, err := exec.CommandContext(ctx, exe, "keys", "create", "--tenant", "load", "--store", storeAddr).Output()
	if err != nil {
		return nil, fmt.Errorf("creating the load test's key: %w", err)
	}
	key, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(exe, append([]string{"serve", "--flows", cfg.flows, "--store", storeAddr, "--addr", addr}, args...)...)
	cmd.Env = append(os.Environ(), "OPENAI_BASE_URL="+modelURL+"/v1", "OPENAI_API_KEY=k")
	p := &servedProc{cmd: cmd, log: &strings.Builder{}, addr: addr, key: key}
	cmd.Stderr = &syncWriter{b: p.log}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	c := p.client(1)
	for i := 0; c.Ready(ctx) != nil; i++ {
		if i > 400 {
			p.stop()
			return nil, fmt.Errorf("the server did not start:\n%s", p.log.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	return p, nil
}

func (p *servedProc) client(conns int) *api.Client {
	c := api.NewClient("http://"+p.addr, p.key)
	c.HTTP = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: conns}}
	return c
}

// stop stops the server as SIGTERM does.
func (p *servedProc) stop() {
	_ = p.cmd.Process.Signal(os.Interrupt)
	done := make(chan struct{})
	go func() { _ = p.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		_ = p.cmd.Process.Kill()
		<-done
	}
}

// metric reads one metric of the server (0 when it has none).
func (p *servedProc) metric(ctx context.Context, name string) float64 {
	v, _ := p.metricOf(ctx, name)
	return v
}

// metricOf reads one metric of the server, and whether it has it.
func (p *servedProc) metricOf(ctx context.Context, name string) (float64, bool) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+p.addr+"/metrics", nil)
	if err != nil {
		return 0, false
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, false
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			return f, err == nil
		}
	}
	return 0, false
}

// syncWriter is a strings.Builder written from the process's pipe.
type syncWriter struct {
	mu sync.Mutex
	b  *strings.Builder
}

func (w *syncWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

// interviewAnswers are what the candidates say.
var interviewAnswers = []string{"I build data pipelines in Go at Northwind.", "Backpressure was the hard part; we added bounded queues.",
	"I would test the ties first.", "We cut search latency tenfold.", "The flag service served forty teams."}

// streamTurn takes one turn and returns how long it took.
func streamTurn(ctx context.Context, c *api.Client, thread string, in map[string]any) (time.Duration, error) {
	start := time.Now()
	for ev, err := range c.StreamRun(ctx, thread, api.StartRun{Input: in}) {
		if err != nil {
			return 0, err
		}
		if ev.Event.Type == trellis.RunError {
			return 0, errors.New(ev.Event.Error)
		}
	}
	return time.Since(start), nil
}

// recorded is a thread recorded through the server, to copy.
type recorded struct {
	cps    []*store.Checkpoint // oldest first
	rec    *store.ThreadRecord
	runs   []*store.RunRecord // oldest first
	events map[string][]store.EventRecord
}

// recordTemplate records one nine-turn interview through a server.
func recordTemplate(ctx context.Context, cfg loadConfig, addr, modelURL string, values map[string]any) (*recorded, error) {
	p, err := startServe(ctx, cfg, addr, modelURL, []string{"--retain-events", "0"})
	if err != nil {
		return nil, err
	}
	c := p.client(1)
	if _, err := c.CreateThread(ctx, api.CreateThread{ID: "template", Flow: "interview", Values: values}); err != nil {
		p.stop()
		return nil, err
	}
	for turn := range 9 {
		in := map[string]any{}
		if turn > 0 {
			in["last_response"] = interviewAnswers[turn%len(interviewAnswers)]
		}
		if _, err := streamTurn(ctx, c, "template", in); err != nil {
			p.stop()
			return nil, err
		}
	}
	p.stop()
	rt, err := trellis.Open(ctx, addr)
	if err != nil {
		return nil, err
	}
	defer rt.Close()
	cat, err := store.CatalogOf(rt.Store())
	if err != nil {
		return nil, err
	}
	const key = "load/template"
	tpl := &recorded{events: map[string][]store.EventRecord{}}
	if tpl.cps, err = rt.History(ctx, key, store.HistoryOptions{}); err != nil {
		return nil, err
	}
	slices.Reverse(tpl.cps)
	if tpl.rec, err = cat.Thread(ctx, "load", key); err != nil {
		return nil, err
	}
	if tpl.runs, err = cat.Runs(ctx, store.RunQuery{Tenant: "load", Thread: key}); err != nil {
		return nil, err
	}
	slices.Reverse(tpl.runs)
	for _, r := range tpl.runs {
		if tpl.events[r.ID], err = cat.Events(ctx, r.ID, 0, 0); err != nil {
			return nil, err
		}
	}
	return tpl, nil
}

// seedIdle writes n copies of the template into the store at addr, each
// shifted 40 days back, a few at once.
func seedIdle(ctx context.Context, addr string, tpl *recorded, n int) error {
	rt, err := trellis.Open(ctx, addr)
	if err != nil {
		return err
	}
	defer rt.Close()
	st := rt.Store()
	cat, err := store.CatalogOf(st)
	if err != nil {
		return err
	}
	const ago = 40 * 24 * time.Hour
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for w := range errs {
		wg.Go(func() {
			for i := int(next.Add(1)) - 1; i < n && errs[w] == nil; i = int(next.Add(1)) - 1 {
				errs[w] = tpl.copyTo(ctx, st, cat, fmt.Sprint("load/idle-", i), ago)
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// copyTo writes the template as thread id, its times shifted back by ago.
func (tpl *recorded) copyTo(ctx context.Context, st store.Store, cat store.Catalog, id string, ago time.Duration) error {
	runIDs := map[string]string{}
	for i, r := range tpl.runs {
		runIDs[r.ID] = fmt.Sprintf("%s-run-%d", strings.TrimPrefix(id, "load/"), i)
	}
	for _, cp := range tpl.cps {
		c := *cp
		c.Thread, c.Time = id, cp.Time.Add(-ago)
		if r, ok := runIDs[cp.Run]; ok {
			c.Run = r
		}
		if err := st.Commit(ctx, &c); err != nil {
			return err
		}
	}
	rec := *tpl.rec
	rec.ID, rec.Created = id, tpl.rec.Created.Add(-ago)
	if err := cat.CreateThread(ctx, &rec); err != nil {
		return err
	}
	for _, r := range tpl.runs {
		c := *r
		c.ID, c.Thread = runIDs[r.ID], id
		c.Created, c.Started, c.Finished = r.Created.Add(-ago), r.Started.Add(-ago), r.Finished.Add(-ago)
		if err := cat.CreateRun(ctx, &c); err != nil {
			return err
		}
		if err := cat.AppendEvents(ctx, c.ID, "", tpl.events[r.ID]); err != nil {
			return err
		}
	}
	return nil
}

// loadRound1 runs one round: a server with args on the seeded store, the
// candidates' load for the window, the retention's metrics read at its
// start and end.
func loadRound1(ctx context.Context, cfg pruneConfig, addr, modelURL string, values map[string]any, args []string, profile string) (loadRound, error) {
	var debugAddr string
	if profile != "" {
		var err error
		if debugAddr, err = freeAddr(); err != nil {
			return loadRound{}, err
		}
		args = append(slices.Clip(args), "--debug-addr", debugAddr)
	}
	p, err := startServe(ctx, cfg.loadConfig, addr, modelURL, args)
	if err != nil {
		return loadRound{}, err
	}
	defer p.stop()
	const deleted = "trellis_retention_threads_deleted_total"
	const work = "trellis_retention_work_seconds_total"
	c := p.client(cfg.threads)
	var r loadRound
	var mu sync.Mutex
	var errs atomic.Int64
	var firstErr atomic.Value
	measuring := atomic.Bool{}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := range cfg.threads {
		wg.Go(func() {
			for k := 0; ; k++ {
				id := fmt.Sprintf("live-%d-%d", i, k)
				if _, err := c.CreateThread(ctx, api.CreateThread{ID: id, Flow: "interview", Values: values}); err != nil {
					errs.Add(1)
					firstErr.CompareAndSwap(nil, err.Error())
					return
				}
				for turn := range cfg.turns {
					select {
					case <-stop:
						return
					default:
					}
					in := map[string]any{}
					if turn > 0 {
						in["last_response"] = interviewAnswers[(i+turn)%len(interviewAnswers)]
					}
					took, err := streamTurn(ctx, c, id, in)
					if !measuring.Load() {
						continue
					}
					if err != nil {
						errs.Add(1)
						firstErr.CompareAndSwap(nil, err.Error())
						continue
					}
					mu.Lock()
					r.lat = append(r.lat, took)
					mu.Unlock()
				}
			}
		})
	}
	// a few seconds for the candidates to get going
	time.Sleep(3 * time.Second)
	r.pruned[0] = p.metric(ctx, deleted)
	r.work = -p.metric(ctx, work)
	mu.Lock()
	r.lat = r.lat[:0]
	mu.Unlock()
	measuring.Store(true)
	start := time.Now()
	profiled := make(chan error, 1)
	if profile != "" {
		// the middle half of the window
		go func() {
			time.Sleep(cfg.window / 4)
			profiled <- fetch(ctx, fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", debugAddr, max(int(cfg.window.Seconds()/2), 1)), profile)
		}()
	} else {
		profiled <- nil
	}
	time.Sleep(cfg.window)
	if err := <-profiled; err != nil {
		return loadRound{}, fmt.Errorf("profile: %w", err)
	}
	measuring.Store(false)
	r.window = time.Since(start)
	at := p.metric(ctx, deleted)
	r.work += p.metric(ctx, work)
	close(stop)
	wg.Wait()
	r.pruned[1] = at - r.pruned[0]
	r.pruned[2] = float64(cfg.idle) - at
	mu.Lock()
	r.turns = len(r.lat)
	mu.Unlock()
	r.errs = errs.Load()
	if e, _ := firstErr.Load().(string); e != "" {
		r.firstEr = e
	}
	return r, nil
}
