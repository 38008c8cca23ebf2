// A run's secret configuration is kept in this server's memory only,
// until the run ends here or another server takes it, and never in the
// store.

package server

import (
	"context"
	"errors"

	"github.com/trellisflow/trellis/runtime/store"
)

// secretConfig is a run's secret configuration, with its tenant.
// Queuing is set until the run's record is in the store: a run the store
// does not know yet is not one that ended.
type secretConfig struct {
	tenant  string
	values  map[string]any
	queuing bool
}

// keepSecret keeps a run's secret configuration for when it runs here;
// it is queuing until queued says its record is in the store.
func (m *manager) keepSecret(run, tenant string, values map[string]any) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.secrets[run] = secretConfig{tenant: tenant, values: values, queuing: true}
}

// queued says the run's record is in the store: from now on, the secret
// goes when the store says the run will not run here.
func (m *manager) queued(run string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if sc, ok := m.secrets[run]; ok {
		sc.queuing = false
		m.secrets[run] = sc
	}
}

// secretCount is how many runs' secrets the server keeps.
func (m *manager) secretCount() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.secrets)
}

func (m *manager) dropSecret(run string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.secrets, run)
}

// forgetSecrets forgets the secrets of the runs that will not run here:
// those that ended, and those another server runs.
func (m *manager) forgetSecrets(ctx context.Context) {
	m.mu.Lock()
	waiting := map[string]string{}
	for id, sc := range m.secrets {
		if _, ok := m.live[id]; !ok && !sc.queuing {
			waiting[id] = sc.tenant
		}
	}
	m.mu.Unlock()
	for id, tenant := range waiting {
		rec, err := m.s.cat.Run(ctx, tenant, id)
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			continue
		}
		if err == nil && !rec.Status.Done() && (rec.Status == store.RunQueued || rec.Server == m.id) {
			continue
		}
		m.mu.Lock()
		if _, ok := m.live[id]; !ok {
			delete(m.secrets, id)
		}
		m.mu.Unlock()
	}
}
