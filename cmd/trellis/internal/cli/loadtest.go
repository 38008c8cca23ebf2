package cli

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
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
	"github.com/trellisflow/trellis/runtime/api/server"
	"github.com/trellisflow/trellis/runtime/schema"
	"github.com/trellisflow/trellis/runtime/store"
)

// cmdLoadtest drives a `trellis serve` process with concurrent interview
// threads against the test model server and reports throughput, turn
// latency, the server's overhead above the model's latency, and the
// server's memory per idle thread.
func cmdLoadtest(ctx context.Context, env *Env, args []string) int {
	fs := flag.NewFlagSet("dev loadtest", flag.ContinueOnError)
	fs.SetOutput(env.Stderr)
	threads := fs.Int("threads", 100, "interview threads, all talking at once")
	turns := fs.Int("turns", 3, "turns per thread after the greeting")
	latency := fs.Duration("latency", 200*time.Millisecond, "the test model's latency")
	storeAddr := fs.String("store", "", "the server's store (default: a new SQLite file)")
	flows := fs.String("flows", "flows", "the flow directory (with interview.yaml)")
	values := fs.String("with", "flows/examples/candidate.yaml", "the interview threads' initial values")
	profile := fs.String("profile", "", "write the server's CPU profile during the turns to this file, and its heap with the threads idle to FILE.heap (with --prune-beside: the middle half of each round's window to FILE.vV.rR, V 0 without the prune and 1 with it)")
	pruneBeside := fs.Int("prune-beside", 0, "seed this many idle threads (nine-turn interviews, 40 days old), and measure the load with the server's retention pruning them beside it against the same load without it: each candidate takes turns without pause, a new interview after --turns")
	window := fs.Duration("window", time.Minute, "with --prune-beside, how long each round is measured")
	rounds := fs.Int("rounds", 2, "with --prune-beside, how many rounds of each, alternating")
	share := fs.Float64("retain-share", 0.1, "with --prune-beside, the part of the time the retention may work")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *pruneBeside > 0 {
		report, err := loadtestRetention(ctx, pruneConfig{loadConfig: loadConfig{threads: *threads, turns: *turns, latency: *latency, store: *storeAddr,
			flows: *flows, values: *values, profile: *profile}, idle: *pruneBeside, window: *window, rounds: max(*rounds, 1), share: *share})
		if err != nil {
			return fail(env, "dev loadtest", err)
		}
		fmt.Fprint(env.Stdout, report)
		return 0
	}
	report, err := loadtest(ctx, env, loadConfig{threads: *threads, turns: *turns, latency: *latency, store: *storeAddr,
		flows: *flows, values: *values, profile: *profile})
	if err != nil {
		return fail(env, "dev loadtest", err)
	}
	fmt.Fprint(env.Stdout, report)
	return 0
}

type loadConfig struct {
	threads, turns       int
	latency              time.Duration
	store, flows, values string
	profile              string
}

// turnSample is one turn as the client saw it: its latency and the part
// of it the model took (its llm nodes' time).
type turnSample struct {
	took, model time.Duration
}

func loadtest(ctx context.Context, env *Env, cfg loadConfig) (string, error) {
	dir, err := os.MkdirTemp("", "trellis-loadtest")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(dir)
	if cfg.store == "" {
		cfg.store = "sqlite:" + filepath.Join(dir, "trellis.db")
	}
	model := llmtest.New()
	model.Latency = cfg.latency
	ms := httptest.NewServer(model)
	defer ms.Close()
	rt, err := trellis.Open(ctx, cfg.store)
	if err != nil {
		return "", err
	}
	cat, err := store.CatalogOf(rt.Store())
	if err != nil {
		return "", err
	}
	_, key, err := server.CreateKey(ctx, cat, "load", "", false)
	rt.Close()
	if err != nil {
		return "", err
	}
	initial, err := schema.ReadFile(cfg.values)
	if err != nil {
		return "", err
	}
	addr, err := freeAddr()
	if err != nil {
		return "", err
	}
	exe, err := os.Executable()
	if err != nil {
		return "", err
	}
	args := []string{"serve", "--flows", cfg.flows, "--store", cfg.store, "--addr", addr}
	debugAddr, err := freeAddr()
	if err != nil {
		return "", err
	}
	args = append(args, "--debug-addr", debugAddr)
	srv := exec.Command(exe, args...)
	srv.Env = append(os.Environ(), "OPENAI_BASE_URL="+ms.URL+"/v1", "OPENAI_API_KEY=k")
	var serveLog strings.Builder
	srv.Stderr = &serveLog
	if err := srv.Start(); err != nil {
		return "", err
	}
	defer func() { _ = srv.Process.Kill(); _ = srv.Wait() }()
	c := api.NewClient("http://"+addr, key)
	c.HTTP = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: cfg.threads, MaxConnsPerHost: 0}}
	for i := 0; c.Ready(ctx) != nil; i++ {
		if i > 200 {
			return "", fmt.Errorf("the server did not start:\n%s", serveLog.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	// memory per idle thread: the server's resident memory before and
	// after the threads exist (each greeted once)
	time.Sleep(500 * time.Millisecond)
	before, heapBefore := rss(srv.Process.Pid), liveHeap(ctx, debugAddr)
	var mu sync.Mutex
	var samples []turnSample
	var errs atomic.Int64
	var firstErr atomic.Value
	turn := func(thread string, in map[string]any) {
		start := time.Now()
		var model time.Duration
		var failed error
		for ev, err := range c.StreamRun(ctx, thread, api.StartRun{Input: in}) {
			if err != nil {
				failed = err
				break
			}
			if ev.Event.Type == trellis.NodeEnd && ev.Event.Kind == "llm" {
				model += ev.Event.Duration
			}
			if ev.Event.Type == trellis.RunError {
				failed = errors.New(ev.Event.Error)
			}
		}
		took := time.Since(start)
		if failed != nil {
			errs.Add(1)
			firstErr.CompareAndSwap(nil, failed.Error())
			return
		}
		mu.Lock()
		samples = append(samples, turnSample{took: took, model: model})
		mu.Unlock()
	}
	var wg sync.WaitGroup
	for i := range cfg.threads {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id := "load-" + strconv.Itoa(i)
			if _, err := c.CreateThread(ctx, api.CreateThread{ID: id, Flow: "interview", Values: initial.(map[string]any)}); err != nil {
				errs.Add(1)
				firstErr.CompareAndSwap(nil, err.Error())
				return
			}
			turn(id, nil) // the greeting
		}()
	}
	wg.Wait()
	time.Sleep(500 * time.Millisecond)
	idle, heapIdle := rss(srv.Process.Pid), liveHeap(ctx, debugAddr)
	if cfg.profile != "" {
		if err := fetch(ctx, "http://"+debugAddr+"/debug/pprof/heap?gc=1", cfg.profile+".heap"); err != nil {
			return "", err
		}
	}
	greetings := len(samples)
	samples = samples[:0]
	profiled := make(chan error, 1)
	if cfg.profile != "" {
		go func() { profiled <- fetchProfile(ctx, debugAddr, cfg.profile) }()
	} else {
		profiled <- nil
	}
	start := time.Now()
	answers := []string{"I build data pipelines in Go at Northwind.", "Backpressure was the hard part; we added bounded queues.",
		"I would test the ties first.", "We cut search latency tenfold.", "The flag service served forty teams."}
	for i := range cfg.threads {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range cfg.turns {
				turn("load-"+strconv.Itoa(i), map[string]any{"last_response": answers[(i+k)%len(answers)]})
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	after := rss(srv.Process.Pid)
	if err := <-profiled; err != nil {
		return "", err
	}

	lat := make([]time.Duration, len(samples))
	over := make([]time.Duration, len(samples))
	for i, s := range samples {
		lat[i], over[i] = s.took, max(s.took-s.model, 0)
	}
	slices.Sort(lat)
	slices.Sort(over)
	var b strings.Builder
	fmt.Fprintf(&b, "store %s, %d threads x %d turns, model latency %s\n", strings.SplitN(cfg.store, ":", 2)[0], cfg.threads, cfg.turns, cfg.latency)
	fmt.Fprintf(&b, "  turns           %d in %s: %.1f turns/s (greetings: %d)\n", len(samples), elapsed.Round(time.Millisecond),
		float64(len(samples))/elapsed.Seconds(), greetings)
	fmt.Fprintf(&b, "  turn latency    p50 %s  p99 %s\n", pct(lat, 50), pct(lat, 99))
	fmt.Fprintf(&b, "  overhead        p50 %s  p99 %s  (latency minus the model's time in the turn)\n", pct(over, 50), pct(over, 99))
	if before > 0 && idle > 0 {
		fmt.Fprintf(&b, "  server memory   resident %.1f MiB before, %.1f MiB with the threads idle (%.1f KiB per thread), %.1f MiB after the turns\n",
			mib(before), mib(idle), float64(idle-before)/1024/float64(cfg.threads), mib(after))
	}
	if heapBefore > 0 && heapIdle > 0 {
		fmt.Fprintf(&b, "                  live heap %.1f MiB before, %.1f MiB with the threads idle (%.1f KiB per thread)\n",
			mib(heapBefore), mib(heapIdle), float64(heapIdle-heapBefore)/1024/float64(cfg.threads))
	}
	if errs.Load() > 0 && os.Getenv("TRELLIS_LOADTEST_LOG") != "" {
		_ = os.WriteFile(os.Getenv("TRELLIS_LOADTEST_LOG"), []byte(serveLog.String()), 0o644)
	}
	fmt.Fprintf(&b, "  errors          %d", errs.Load())
	if e, _ := firstErr.Load().(string); e != "" {
		fmt.Fprintf(&b, " (first: %s)", e)
	}
	b.WriteString("\n")
	return b.String(), nil
}

func pct(sorted []time.Duration, p int) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := min(len(sorted)*p/100, len(sorted)-1)
	return sorted[i].Round(100 * time.Microsecond)
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }

// rss is a process's resident memory in bytes, from /proc (0 when it
// cannot be read).
func rss(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.Fields(v)[0], 10, 64)
			return kb * 1024
		}
	}
	return 0
}

// freeAddr is a loopback address with a free port.
func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// fetchProfile writes five seconds of the server's CPU profile to file.
func fetchProfile(ctx context.Context, addr, file string) error {
	return fetch(ctx, "http://"+addr+"/debug/pprof/profile?seconds=5", file)
}

// fetch writes what url answers to file.
func fetch(ctx context.Context, url, file string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// liveHeap is the server's live heap in bytes, after a collection (0 when
// it cannot be read).
func liveHeap(ctx context.Context, debugAddr string) int64 {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+debugAddr+"/debug/pprof/heap?gc=1&debug=1", nil)
	if err != nil {
		return 0
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "# HeapAlloc = "); ok {
			n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			return n
		}
	}
	return 0
}
