package postgres

import (
	"errors"
	"io"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/trellisflow/trellis/runtime/store"
)

func init() { store.RegisterClassifier(classify) }

// classify is what PostgreSQL's errors say of the store (store.Classify):
// the server's own, by SQLSTATE; a connection that could not be made, or
// was lost, by pgx's errors.
func classify(err error) store.Class {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch {
		case pe.Code == "53100": // disk_full
			return store.Full
		case strings.HasPrefix(pe.Code, "08"), // connection exceptions
			pe.Code == "57P01", pe.Code == "57P02", pe.Code == "57P03", // admin or crash shutdown, cannot connect now
			pe.Code == "53300", pe.Code == "53200", // too many connections, out of memory
			pe.Code == "40001", pe.Code == "40P01", // serialization failure, deadlock
			pe.Code == "55P03": // lock not available
			return store.Unavailable
		}
		return store.Permanent
	}
	var ce *pgconn.ConnectError
	switch {
	case errors.As(err, &ce), errors.Is(err, pgconn.ErrConnClosed), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF),
		pgconn.SafeToRetry(err):
		return store.Unavailable
	}
	return store.Permanent
}
