package sandbox_test

import (
	"slices"
	"testing"
	"time"

	"github.com/trellisflow/trellis/nodes/sandbox"
	"github.com/trellisflow/trellis/nodes/sandbox/sandboxtest"
)

// BenchmarkTrivial runs a trivial Python program (no tests) on each
// backend, one at a time: executions per second, p50 and p99 latency,
// and the first execution of a new backend (cold) beside the rest; on
// Docker with no started containers kept ready, and with two (warm).
//
//	go test ./nodes/sandbox -run '^$' -bench Trivial -benchtime 40x
func BenchmarkTrivial(b *testing.B) {
	py := sandbox.Builtin()["python"]
	sub := sandbox.Submission{Code: "print('ok')\n"}
	for _, name := range []string{"local", "docker", "docker-warm"} {
		b.Run(name, func(b *testing.B) {
			var pool *sandbox.Pool
			switch name {
			case "local":
				pool = sandboxtest.Local(b, 1)
			case "docker":
				sandboxtest.SetWarm(0)
				pool = sandboxtest.Docker(b, 1)
			default:
				sandboxtest.SetWarm(2)
				pool = sandboxtest.Docker(b, 1)
			}
			start := time.Now()
			if r, err := sandbox.Execute(ctx, pool, py, sub); err != nil || r.Status != sandbox.StatusOK {
				b.Fatalf("%+v %v", r, err)
			}
			cold := time.Since(start)
			lat := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for range b.N {
				t := time.Now()
				r, err := sandbox.Execute(ctx, pool, py, sub)
				if err != nil || r.Status != sandbox.StatusOK {
					b.Fatalf("%+v %v", r, err)
				}
				lat = append(lat, time.Since(t))
			}
			b.StopTimer()
			slices.Sort(lat)
			b.ReportMetric(float64(cold.Microseconds())/1000, "cold-ms")
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
			b.ReportMetric(float64(lat[(len(lat)*99)/100].Microseconds())/1000, "p99-ms")
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "exec/s")
		})
	}
}
