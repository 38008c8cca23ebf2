package sandbox_test

import (
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/trellisflow/trellis/nodes/sandbox"
	"github.com/trellisflow/trellis/nodes/sandbox/sandboxtest"
)

// benchPool is a pool of n places on a backend: local, docker with no
// warm container, docker-warm with warm ones (as many as places, two at
// least), runsc-warm the same under gVisor.
func benchPool(b *testing.B, name string, n int) *sandbox.Pool {
	defer sandboxtest.SetWarm(2)
	switch name {
	case "local":
		return sandboxtest.Local(b, n)
	case "docker":
		sandboxtest.SetWarm(0)
		return sandboxtest.Docker(b, n)
	case "runsc-warm":
		sandboxtest.SetWarm(max(n, 2))
		p, why := sandboxtest.Runsc(b, n)
		if p == nil {
			b.Skip(why)
		}
		return p
	default:
		sandboxtest.SetWarm(max(n, 2))
		return sandboxtest.Docker(b, n)
	}
}

var trivial = sandbox.Submission{Code: "print('ok')\n"}

func execute(b *testing.B, pool *sandbox.Pool) time.Duration {
	t := time.Now()
	r, err := sandbox.Execute(ctx, pool, sandbox.Builtin()["python"], trivial)
	if err != nil || r.Status != sandbox.StatusOK {
		b.Fatalf("%+v %v", r, err)
	}
	return time.Since(t)
}

// report reports latencies' p50 and p99 in milliseconds.
func report(b *testing.B, lat []time.Duration) {
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(lat[(len(lat)*99)/100].Microseconds())/1000, "p99-ms")
}

// BenchmarkTrivial runs a trivial Python program (no tests) on each
// backend, one at a time: the first execution of a new backend (cold),
// then p50 and p99 latency and executions per second; on Docker with no
// started container kept ready, and with two (warm), and on gVisor.
//
//	go test ./nodes/sandbox -run '^$' -bench Trivial -benchtime 40x
func BenchmarkTrivial(b *testing.B) {
	for _, name := range []string{"local", "docker", "docker-warm", "runsc-warm"} {
		b.Run(name, func(b *testing.B) {
			pool := benchPool(b, name, 1)
			cold := execute(b, pool)
			if name != "docker" {
				time.Sleep(time.Second) // the warm containers start
			}
			lat := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for range b.N {
				lat = append(lat, execute(b, pool))
				if name != "local" && name != "docker" {
					// the next warm container starts, as it would
					// between one candidate's submission and the next
					b.StopTimer()
					time.Sleep(300 * time.Millisecond)
					b.StartTimer()
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(cold.Microseconds())/1000, "cold-ms")
			report(b, lat)
		})
	}
}

// BenchmarkConcurrent runs rounds of 8 trivial executions at once on each
// backend (8 places, and as many warm containers on Docker): p50 and p99
// latency of an execution, and executions per second.
//
//	go test ./nodes/sandbox -run '^$' -bench Concurrent -benchtime 5x
func BenchmarkConcurrent(b *testing.B) {
	const n = 8
	for _, name := range []string{"local", "docker-warm"} {
		b.Run(name, func(b *testing.B) {
			pool := benchPool(b, name, n)
			execute(b, pool)
			time.Sleep(2 * time.Second) // the warm containers start
			var mu sync.Mutex
			lat := make([]time.Duration, 0, n*b.N)
			b.ResetTimer()
			for range b.N {
				var wg sync.WaitGroup
				for range n {
					wg.Add(1)
					go func() {
						defer wg.Done()
						d := execute(b, pool)
						mu.Lock()
						lat = append(lat, d)
						mu.Unlock()
					}()
				}
				wg.Wait()
			}
			b.StopTimer()
			report(b, lat)
			b.ReportMetric(float64(len(lat))/b.Elapsed().Seconds(), "exec/s")
		})
	}
}
