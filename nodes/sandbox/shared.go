package sandbox

import (
	"sync"
)

// The process's own pool, configured by the environment (FromEnv), is
// made when a flow first needs it and closed when the process ends its
// work (CloseEnv): reading its statistics never makes it.
var shared struct {
	mu   sync.Mutex
	made bool
	pool *Pool
	err  error
}

// Env returns the pool FromEnv configures, made once per process (until
// CloseEnv): nil when no sandbox is configured, or when the configuration
// is wrong (EnvError says how).
func Env() *Pool {
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if !shared.made {
		shared.pool, shared.err = FromEnv()
		shared.made = true
	}
	return shared.pool
}

// EnvError is what is wrong with the sandbox configuration, if anything.
func EnvError() error {
	Env()
	shared.mu.Lock()
	defer shared.mu.Unlock()
	return shared.err
}

// EnvStats reports the executions running and waiting on the process's
// pool: zeros when it has not been made.
func EnvStats() (running, queued int) {
	shared.mu.Lock()
	p := shared.pool
	shared.mu.Unlock()
	if p == nil {
		return 0, 0
	}
	return p.Stats()
}

// EnvOpen says whether the process's pool has been made (and not closed).
func EnvOpen() bool {
	shared.mu.Lock()
	defer shared.mu.Unlock()
	return shared.made && shared.pool != nil
}

// CloseEnv closes the process's pool, if it was made: the executions
// still running are ended and every warm container removed. The next Env
// makes a new one.
func CloseEnv() error {
	shared.mu.Lock()
	p := shared.pool
	shared.pool, shared.err, shared.made = nil, nil, false
	shared.mu.Unlock()
	if p == nil {
		return nil
	}
	return p.Close()
}
