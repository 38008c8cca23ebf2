//go:build !unix

package server

import (
	"errors"
	"io/fs"
)

// writable cannot tell ahead on this system: a save that cannot write
// says so when it tries.
func writable(string) error { return nil }

func isReadOnly(err error) bool { return errors.Is(err, fs.ErrPermission) }
