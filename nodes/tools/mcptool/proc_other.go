//go:build !linux

package mcptool

import "os/exec"

// dieWithParent: only Linux kills a child with its parent; elsewhere a
// server ends when its standard input closes.
func dieWithParent(*exec.Cmd) {}
