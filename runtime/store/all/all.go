// Package all registers every built-in store (memory, sqlite, postgres),
// so that store.Open knows their schemes. Import it for its side effect:
//
//	import _ "github.com/trellisflow/trellis/runtime/store/all"
package all

import (
	_ "github.com/trellisflow/trellis/runtime/store/memory"   // memory
	_ "github.com/trellisflow/trellis/runtime/store/postgres" // postgres://, postgresql://
	_ "github.com/trellisflow/trellis/runtime/store/sqlite"   // sqlite:PATH
)
