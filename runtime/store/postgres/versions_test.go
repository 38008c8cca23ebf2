package postgres_test

import (
	"testing"

	"github.com/trellisflow/trellis/runtime/store"
	"github.com/trellisflow/trellis/runtime/store/storetest"
)

func TestVersionsConformance(t *testing.T) {
	storetest.RunVersions(t, func(t *testing.T) store.Store { return open(t) })
}
