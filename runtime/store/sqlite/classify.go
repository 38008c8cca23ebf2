package sqlite

import (
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/trellisflow/trellis/runtime/store"
)

func init() { store.RegisterClassifier(classify) }

// classify is what SQLite's errors say of the store (store.Classify): a
// database another connection or process holds past the busy timeout,
// or an I/O error, may pass; a full disk fails every write, committing
// nothing, until space is freed (SQLite rolls the transaction back).
func classify(err error) store.Class {
	switch code(err) {
	case sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED, sqlite3.SQLITE_IOERR, sqlite3.SQLITE_PROTOCOL:
		return store.Unavailable
	case sqlite3.SQLITE_FULL:
		return store.Full
	}
	return store.Permanent
}
