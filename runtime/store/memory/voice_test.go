package memory_test

import (
	"testing"

	"github.com/trellisflow/trellis/runtime/store"
	"github.com/trellisflow/trellis/runtime/store/memory"
	"github.com/trellisflow/trellis/runtime/store/storetest"
)

func TestVoiceCatalogConformance(t *testing.T) {
	storetest.RunVoiceCatalog(t, func(*testing.T) store.Store { return memory.New() })
}
