package memory_test

import (
	"os"
	"testing"

	"github.com/trellisflow/trellis/runtime/store/storetest"
)

// TestMain fails the tests when a goroutine outlives them.
func TestMain(m *testing.M) { os.Exit(storetest.MainNoLeaks(m)) }
