package cli

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
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

	"github.com/jackc/pgx/v5"
	"github.com/trellisflow/trellis"
	"github.com/trellisflow/trellis/nodes/llm/llmtest"
	"github.com/trellisflow/trellis/runtime/api"
	"github.com/trellisflow/trellis/runtime/schema"
	"github.com/trellisflow/trellis/runtime/store/postgres"
)

// cmdLoadtest drives a `trellis serve` process with concurrent interview
// threads against the test model server and reports throughput, turn
// latency, the server's overhead above the model's latency, its CPU time
// per turn and its memory per idle thread; with --before, the same for a
// revision built beside it, and the ratios.
func cmdLoadtest(ctx context.Context, env *Env, args []string) int {
	fs := flag.NewFlagSet("dev loadtest", flag.ContinueOnError)
	fs.SetOutput(env.Stderr)
	threads := fs.Int("threads", 100, "interview threads, all talking at once")
	turns := fs.Int("turns", 3, "turns per thread after the greeting")
	latency := fs.Duration("latency", 200*time.Millisecond, "the test model's latency")
	think := fs.Duration("think", 0, "how long each simulated person thinks before answering (drawn evenly between half and one and a half times it); 0: answer at once")
	before := fs.String("before", "", "also build this git revision's trellis and load it the same way first, and report the ratios")
	storeAddr := fs.String("store", "", "the server's store (default: a new SQLite file); a postgres:// store gets a new database on that server for each run, dropped after")
	flows := fs.String("flows", "flows", "the flow directory (with interview.yaml)")
	values := fs.String("with", "flows/examples/candidate.yaml", "the interview threads' initial values (each thread is another candidate: the user_id and interview_id they hold become the thread's id)")
	profile := fs.String("profile", "", "write the server's CPU profile during the turns to this file, and its heap with the threads idle to FILE.heap (with --prune-beside: the middle half of each round's window to FILE.vV.rR, V 0 without the prune and 1 with it)")
	pruneBeside := fs.Int("prune-beside", 0, "seed this many idle threads (nine-turn interviews, 40 days old), and measure the load with the server's retention pruning them beside it against the same load without it: each candidate takes turns without pause, a new interview after --turns")
	window := fs.Duration("window", time.Minute, "with --prune-beside, how long each round is measured")
	rounds := fs.Int("rounds", 2, "with --prune-beside, how many rounds of each, alternating")
	share := fs.Float64("retain-share", 0.1, "with --prune-beside, the part of the time the retention may work")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	cfg := loadConfig{threads: *threads, turns: *turns, latency: *latency, think: *think, store: *storeAddr,
		flows: *flows, values: *values, profile: *profile}
	if *pruneBeside > 0 {
		report, err := loadtestRetention(ctx, pruneConfig{loadConfig: cfg, idle: *pruneBeside, window: *window, rounds: max(*rounds, 1), share: *share})
		if err != nil {
			return fail(env, "dev loadtest", err)
		}
		fmt.Fprint(env.Stdout, report)
		return 0
	}
	var base *loadResult
	if *before != "" {
		dir, err := os.MkdirTemp("", "trellis-before")
		if err != nil {
			return fail(env, "dev loadtest", err)
		}
		defer os.RemoveAll(dir)
		old := cfg
		var src string
		if old.exe, src, err = buildRevision(ctx, *before, dir); err != nil {
			return fail(env, "dev loadtest", err)
		}
		// the revision serves its own flows and values, as they were
		// then (today's may use what it did not have)
		old.flows, old.values = revisionPath(src, cfg.flows), revisionPath(src, cfg.values)
		old.profile = ""
		if base, err = loadtest(ctx, old); err != nil {
			return fail(env, "dev loadtest", fmt.Errorf("%s: %w", *before, err))
		}
		fmt.Fprintf(env.Stdout, "before (%s):\n%s", *before, base)
		fmt.Fprintln(env.Stdout, "this revision:")
	}
	r, err := loadtest(ctx, cfg)
	if err != nil {
		return fail(env, "dev loadtest", err)
	}
	fmt.Fprint(env.Stdout, r)
	if base != nil {
		fmt.Fprint(env.Stdout, r.against(base))
	}
	return 0
}

type loadConfig struct {
	threads, turns       int
	latency, think       time.Duration
	store, flows, values string
	profile              string
	// exe is the trellis binary that serves (this program when empty)
	exe string
}

// revisionPath is path (a file or directory of the checkout the working
// directory is in) as it is in a revision's source tree src, or path
// itself when it is outside the checkout or the revision has no such
// path.
func revisionPath(src, path string) string {
	top, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		return path
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return path
	}
	rel, err := filepath.Rel(strings.TrimSpace(string(top)), abs)
	if err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		return path
	}
	if _, err := os.Stat(filepath.Join(src, rel)); err != nil {
		return path
	}
	return filepath.Join(src, rel)
}

// buildRevision builds rev's trellis command in dir, from the git
// repository the working directory is in, and returns the binary's path
// and the revision's source tree.
func buildRevision(ctx context.Context, rev, dir string) (exe, src string, err error) {
	top, err := exec.CommandContext(ctx, "git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		return "", "", fmt.Errorf("--before needs a git checkout: %w", err)
	}
	// the revision as a commit's hash: what git archive is given is never
	// read as one of its options
	commit, err := exec.CommandContext(ctx, "git", "-C", strings.TrimSpace(string(top)), "rev-parse", "--verify", "--quiet", "--end-of-options", rev+"^{commit}").Output()
	if err != nil {
		return "", "", fmt.Errorf("--before %q: not a commit of this repository", rev)
	}
	src = filepath.Join(dir, "src")
	if err := os.Mkdir(src, 0o755); err != nil {
		return "", "", err
	}
	archive := exec.CommandContext(ctx, "git", "-C", strings.TrimSpace(string(top)), "archive", "--format=tar", strings.TrimSpace(string(commit)))
	untar := exec.CommandContext(ctx, "tar", "-x", "-C", src)
	if untar.Stdin, err = archive.StdoutPipe(); err != nil {
		return "", "", err
	}
	var why strings.Builder
	archive.Stderr, untar.Stderr = &why, &why
	if err := untar.Start(); err != nil {
		return "", "", err
	}
	if err := archive.Run(); err != nil {
		_ = untar.Wait()
		return "", "", fmt.Errorf("revision %s: %w: %s", rev, err, strings.TrimSpace(why.String()))
	}
	if err := untar.Wait(); err != nil {
		return "", "", fmt.Errorf("revision %s: %w: %s", rev, err, strings.TrimSpace(why.String()))
	}
	exe = filepath.Join(dir, "trellis")
	build := exec.CommandContext(ctx, "go", "build", "-o", exe, "./cmd/trellis")
	build.Dir = src
	if out, err := build.CombinedOutput(); err != nil {
		return "", "", fmt.Errorf("building %s: %w\n%s", rev, err, out)
	}
	return exe, src, nil
}

// span is a stretch of time: a model call's, from its node's start to
// its end.
type span struct{ from, to time.Time }

// covered is the time the spans cover together: the model's part of a
// turn whose llm nodes may run at once (summed, two calls side by side
// would count twice, and the turn's overhead show as none).
func covered(spans []span) time.Duration {
	slices.SortFunc(spans, func(a, b span) int { return a.from.Compare(b.from) })
	var total time.Duration
	var cur span
	for i, s := range spans {
		switch {
		case i == 0:
			cur = s
		case !s.from.After(cur.to):
			if s.to.After(cur.to) {
				cur.to = s.to
			}
		default:
			total += cur.to.Sub(cur.from)
			cur = s
		}
	}
	if len(spans) > 0 {
		total += cur.to.Sub(cur.from)
	}
	return total
}

// turnSample is one turn as the client saw it: its latency and the part
// of it the model took (its llm nodes' time, those side by side counted
// once).
type turnSample struct {
	took, model time.Duration
}

// loadResult is what one load run measured.
type loadResult struct {
	cfg                loadConfig
	turns, greetings   int
	elapsed            time.Duration
	lat, over          []time.Duration // sorted
	cpu                time.Duration   // the server's CPU time over the turns
	writes             float64         // the store's write transactions over the turns (-1: not counted)
	before, idle, rest int64           // resident memory
	heapBefore, heap   int64
	errs               int64
	firstErr           string
}

func (r *loadResult) perSecond() float64 { return float64(r.turns) / r.elapsed.Seconds() }

func (r *loadResult) cpuPerTurn() time.Duration {
	if r.turns == 0 {
		return 0
	}
	return r.cpu / time.Duration(r.turns)
}

func (r *loadResult) String() string {
	var b strings.Builder
	cfg := r.cfg
	fmt.Fprintf(&b, "store %s, %d threads x %d turns, model latency %s", strings.SplitN(cfg.store, ":", 2)[0], cfg.threads, cfg.turns, cfg.latency)
	if cfg.think > 0 {
		fmt.Fprintf(&b, ", thinking %s", cfg.think)
	}
	b.WriteString("\n")
	fmt.Fprintf(&b, "  turns           %d in %s: %.1f turns/s (greetings: %d)\n", r.turns, r.elapsed.Round(time.Millisecond), r.perSecond(), r.greetings)
	fmt.Fprintf(&b, "  turn latency    p50 %s  p99 %s\n", pct(r.lat, 50), pct(r.lat, 99))
	fmt.Fprintf(&b, "  overhead        p50 %s  p99 %s  (latency minus the model's time in the turn)\n", pct(r.over, 50), pct(r.over, 99))
	if r.cpu > 0 {
		fmt.Fprintf(&b, "  server CPU      %s per turn (%.2f s over the turns, its own accounting)\n", r.cpuPerTurn().Round(time.Microsecond), r.cpu.Seconds())
	}
	if r.writes >= 0 && r.turns > 0 {
		how := "the store's count"
		if strings.HasPrefix(cfg.store, "postgres") {
			how = "transaction ids PostgreSQL handed out"
		}
		fmt.Fprintf(&b, "  store writes    %.1f write transactions per turn (%s)\n", r.writes/float64(r.turns), how)
	}
	if r.before > 0 && r.idle > 0 {
		fmt.Fprintf(&b, "  server memory   resident %.1f MiB before, %.1f MiB with the threads idle (%.1f KiB per thread), %.1f MiB after the turns\n",
			mib(r.before), mib(r.idle), float64(r.idle-r.before)/1024/float64(cfg.threads), mib(r.rest))
	}
	if r.heapBefore > 0 && r.heap > 0 {
		fmt.Fprintf(&b, "                  live heap %.1f MiB before, %.1f MiB with the threads idle (%.1f KiB per thread)\n",
			mib(r.heapBefore), mib(r.heap), float64(r.heap-r.heapBefore)/1024/float64(cfg.threads))
	}
	fmt.Fprintf(&b, "  errors          %d", r.errs)
	if r.firstErr != "" {
		fmt.Fprintf(&b, " (first: %s)", r.firstErr)
	}
	b.WriteString("\n")
	return b.String()
}

// against is r's figures as ratios to base's (this revision over the
// one before).
func (r *loadResult) against(base *loadResult) string {
	ratio := func(now, then float64) string {
		if then == 0 {
			return "-"
		}
		return fmt.Sprintf("%.2fx", now/then)
	}
	d := func(x time.Duration) float64 { return float64(x) }
	var b strings.Builder
	b.WriteString("this revision / before:\n")
	fmt.Fprintf(&b, "  turns/s %s, server CPU per turn %s, overhead p50 %s, p99 %s\n", ratio(r.perSecond(), base.perSecond()),
		ratio(d(r.cpuPerTurn()), d(base.cpuPerTurn())), ratio(d(pct(r.over, 50)), d(pct(base.over, 50))), ratio(d(pct(r.over, 99)), d(pct(base.over, 99))))
	return b.String()
}

func loadtest(ctx context.Context, cfg loadConfig) (*loadResult, error) {
	dir, err := os.MkdirTemp("", "trellis-loadtest")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	if cfg.store == "" {
		cfg.store = "sqlite:" + filepath.Join(dir, "trellis.db")
	}
	storeAddr := cfg.store
	if strings.HasPrefix(storeAddr, "postgres") {
		addr, drop, err := freshDatabase(ctx, storeAddr)
		if err != nil {
			return nil, err
		}
		defer drop()
		storeAddr = addr
	}
	model := llmtest.New()
	model.Latency = cfg.latency
	ms := httptest.NewServer(model)
	defer ms.Close()
	initial, err := schema.ReadFile(cfg.values)
	if err != nil {
		return nil, err
	}
	debugAddr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	srv, err := startServe(ctx, cfg, storeAddr, ms.URL, []string{"--debug-addr", debugAddr})
	if err != nil {
		return nil, err
	}
	defer srv.stop()
	pid := srv.cmd.Process.Pid
	c := srv.client(cfg.threads)
	r := &loadResult{cfg: cfg}
	// memory per idle thread: the server's resident memory before and
	// after the threads exist (each greeted once)
	time.Sleep(500 * time.Millisecond)
	r.before, r.heapBefore = rss(pid), liveHeap(ctx, debugAddr)
	var mu sync.Mutex
	var samples []turnSample
	var errs atomic.Int64
	var firstErr atomic.Value
	turn := func(thread string, in map[string]any) {
		start := time.Now()
		var calls []span
		var failed error
		for ev, err := range c.StreamRun(ctx, thread, api.StartRun{Input: in}) {
			if err != nil {
				failed = err
				break
			}
			if ev.Event.Type == trellis.NodeEnd && ev.Event.Kind == "llm" {
				calls = append(calls, span{ev.Event.Time.Add(-ev.Event.Duration), ev.Event.Time})
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
		samples = append(samples, turnSample{took: took, model: covered(calls)})
		mu.Unlock()
	}
	var wg sync.WaitGroup
	for i := range cfg.threads {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id := "load-" + strconv.Itoa(i)
			if _, err := c.CreateThread(ctx, api.CreateThread{ID: id, Flow: "interview", Values: person(initial.(map[string]any), id)}); err != nil {
				errs.Add(1)
				firstErr.CompareAndSwap(nil, err.Error())
				return
			}
			turn(id, nil) // the greeting
		}()
	}
	wg.Wait()
	time.Sleep(500 * time.Millisecond)
	r.idle, r.heap = rss(pid), liveHeap(ctx, debugAddr)
	if cfg.profile != "" {
		if err := fetch(ctx, "http://"+debugAddr+"/debug/pprof/heap?gc=1", cfg.profile+".heap"); err != nil {
			return nil, err
		}
	}
	r.greetings = len(samples)
	samples = samples[:0]
	profiled := make(chan error, 1)
	if cfg.profile != "" {
		go func() { profiled <- fetchProfile(ctx, debugAddr, cfg.profile) }()
	} else {
		profiled <- nil
	}
	writesStart, counted := writeCount(ctx, srv, storeAddr)
	cpuStart := cpuTime(pid)
	start := time.Now()
	for i := range cfg.threads {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// each person thinks for their own while, so that the
			// turns are not in step
			rnd := rand.New(rand.NewPCG(uint64(i), 1))
			for k := range cfg.turns {
				if cfg.think > 0 {
					select {
					case <-time.After(cfg.think/2 + time.Duration(rnd.Int64N(int64(cfg.think)+1))):
					case <-ctx.Done():
						return
					}
				}
				turn("load-"+strconv.Itoa(i), map[string]any{"last_response": interviewAnswers[(i+k)%len(interviewAnswers)]})
			}
		}()
	}
	wg.Wait()
	r.elapsed = time.Since(start)
	r.cpu = cpuTime(pid) - cpuStart
	r.writes = -1
	if writesEnd, ok := writeCount(ctx, srv, storeAddr); ok && counted {
		r.writes = writesEnd - writesStart
	}
	r.rest = rss(pid)
	if err := <-profiled; err != nil {
		return nil, err
	}
	r.turns = len(samples)
	r.lat = make([]time.Duration, len(samples))
	r.over = make([]time.Duration, len(samples))
	for i, s := range samples {
		r.lat[i], r.over[i] = s.took, max(s.took-s.model, 0)
	}
	slices.Sort(r.lat)
	slices.Sort(r.over)
	r.errs = errs.Load()
	r.firstErr, _ = firstErr.Load().(string)
	if r.errs > 0 && os.Getenv("TRELLIS_LOADTEST_LOG") != "" {
		_ = os.WriteFile(os.Getenv("TRELLIS_LOADTEST_LOG"), []byte(srv.log.String()), 0o644)
	}
	return r, nil
}

// writeCount is how many write transactions the server's store has
// committed: the server's count (SQLite), or PostgreSQL's own, the
// transaction ids it has handed out (each transaction that writes takes
// one; the load test's cluster serves nothing else).
func writeCount(ctx context.Context, srv *servedProc, storeAddr string) (float64, bool) {
	if !strings.HasPrefix(storeAddr, "postgres") {
		return srv.metricOf(ctx, "trellis_store_write_transactions_total")
	}
	conn, err := pgx.Connect(ctx, storeAddr)
	if err != nil {
		return 0, false
	}
	defer conn.Close(ctx)
	var next int64
	if err := conn.QueryRow(ctx, `SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint`).Scan(&next); err != nil {
		return 0, false
	}
	return float64(next), true
}

// cpuTime is a process's CPU time (user and system) so far, from /proc (0
// when it cannot be read).
func cpuTime(pid int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// the fields after the command's name, which is in parentheses
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0
	}
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(utime+stime) * time.Second / clockTicks
}

// clockTicks is the kernel's USER_HZ, the unit of /proc's CPU times: 100
// on every Linux the Go runtime supports.
const clockTicks = 100

// freshDatabase creates a new database on the PostgreSQL server addr
// names, and returns its address and how to drop it.
func freshDatabase(ctx context.Context, addr string) (string, func(), error) {
	name := fmt.Sprintf("trellis_load_%d_%d", os.Getpid(), time.Now().UnixNano())
	made, err := postgres.CreateDatabase(ctx, addr, name)
	if err != nil {
		return "", nil, err
	}
	return made, func() { _ = postgres.DropDatabase(context.Background(), addr, name) }, nil
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

// person is the initial values of a thread of its own candidate: each
// simulated person is another one (the user_id and interview_id the
// values hold are the thread's id), so that the threads neither share
// the memory of the questions asked nor write the same memory items.
func person(values map[string]any, id string) map[string]any {
	out := maps.Clone(values)
	for _, k := range []string{"user_id", "interview_id"} {
		if _, ok := out[k]; ok {
			out[k] = id
		}
	}
	return out
}
