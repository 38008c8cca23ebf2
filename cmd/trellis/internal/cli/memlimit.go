package cli

import (
	"os"
	"runtime/debug"
	"strconv"
	"strings"
)

// The Go runtime's soft memory limit in a container: nine tenths of the
// container's memory limit, so that the collector works harder before
// the kernel kills the process, unless GOMEMLIMIT says otherwise.

// memoryLimitEnv gives the container's memory limit in bytes (a
// Kubernetes manifest sets it from the container's limits.memory); when
// unset, the limit is read from the process's cgroup.
const memoryLimitEnv = "TRELLIS_MEMORY_LIMIT"

// memoryLimit sets the Go runtime's soft memory limit to nine tenths of
// the container's, when GOMEMLIMIT is not set and the container has a
// limit, and returns it (0: left as it was) and where the limit came
// from.
func memoryLimit(getenv func(string) string, cgroupFiles ...string) (int64, string) {
	if getenv("GOMEMLIMIT") != "" {
		return 0, ""
	}
	limit, from := int64(0), ""
	if v := strings.TrimSpace(getenv(memoryLimitEnv)); v != "" {
		if n, err := strconv.ParseInt(v, 10, 64); err == nil && n > 0 {
			limit, from = n, memoryLimitEnv
		}
	}
	for _, f := range cgroupFiles {
		if limit > 0 {
			break
		}
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		// cgroup v2 says max for no limit; v1, a number near 2^63
		if n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64); err == nil && n > 0 && n < 1<<50 {
			limit, from = n, f
		}
	}
	if limit == 0 {
		return 0, ""
	}
	soft := limit / 10 * 9
	debug.SetMemoryLimit(soft)
	return soft, from
}

// cgroupMemoryFiles are where a container's memory limit is read from:
// cgroup v2's, then v1's.
var cgroupMemoryFiles = []string{"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"}
