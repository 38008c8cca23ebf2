//go:build unix

package server

import (
	"errors"
	"fmt"
	"syscall"
)

// writable tells whether the process may create files in dir: not on a
// read-only file system, nor without write permission.
func writable(dir string) error {
	if err := syscall.Access(dir, 0x2 /* W_OK */); err != nil {
		return fmt.Errorf("%s: %w", dir, err)
	}
	return nil
}

func isReadOnly(err error) bool {
	return errors.Is(err, syscall.EROFS) || errors.Is(err, syscall.EACCES) || errors.Is(err, syscall.EPERM)
}
