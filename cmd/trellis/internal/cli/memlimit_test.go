package cli

import (
	"os"
	"path/filepath"
	"runtime/debug"
	"testing"
)

// The soft memory limit is nine tenths of the container's: from
// TRELLIS_MEMORY_LIMIT, else from the cgroup's file (not its "max"); an
// explicit GOMEMLIMIT, or no limit, leaves it as it was.
func TestMemoryLimit(t *testing.T) {
	prev := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetMemoryLimit(prev) })
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	v2, unlimited := write("memory.max", "536870912\n"), write("max", "max\n")
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	for _, c := range []struct {
		name  string
		env   map[string]string
		files []string
		want  int64
		from  string
	}{
		{"from the manifest", map[string]string{memoryLimitEnv: "1073741824"}, []string{v2}, 966367638, memoryLimitEnv},
		{"from the cgroup", nil, []string{unlimited, v2}, 483183819, v2},
		{"GOMEMLIMIT set", map[string]string{"GOMEMLIMIT": "100MiB", memoryLimitEnv: "1073741824"}, []string{v2}, 0, ""},
		{"no limit", nil, []string{unlimited, filepath.Join(dir, "none")}, 0, ""},
	} {
		debug.SetMemoryLimit(prev)
		got, from := memoryLimit(env(c.env), c.files...)
		if got != c.want || from != c.from {
			t.Errorf("%s: %d from %q, want %d from %q", c.name, got, from, c.want, c.from)
		}
		if set := debug.SetMemoryLimit(-1); c.want > 0 && set != c.want || c.want == 0 && set != prev {
			t.Errorf("%s: the runtime's limit is %d", c.name, set)
		}
	}
}
