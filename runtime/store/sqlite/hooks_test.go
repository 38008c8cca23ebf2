package sqlite_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/trellisflow/trellis/runtime/store"
	"github.com/trellisflow/trellis/runtime/store/sqlite"
	"github.com/trellisflow/trellis/runtime/store/storetest"
)

func openHooks(t *testing.T) store.Store {
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "trellis.db"))
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func TestWebhooksConformance(t *testing.T) { storetest.RunWebhooks(t, openHooks) }

func TestSchedulesConformance(t *testing.T) { storetest.RunSchedules(t, openHooks) }

func TestRequestsConformance(t *testing.T) { storetest.RunRequests(t, openHooks) }
