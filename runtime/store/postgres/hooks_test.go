package postgres_test

import (
	"testing"

	"github.com/trellisflow/trellis/runtime/store"
	"github.com/trellisflow/trellis/runtime/store/storetest"
)

func TestWebhooksConformance(t *testing.T) {
	storetest.RunWebhooks(t, func(t *testing.T) store.Store { return open(t) })
}

func TestSchedulesConformance(t *testing.T) {
	storetest.RunSchedules(t, func(t *testing.T) store.Store { return open(t) })
}

func TestRequestsConformance(t *testing.T) {
	storetest.RunRequests(t, func(t *testing.T) store.Store { return open(t) })
}
