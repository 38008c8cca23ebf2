//go:build !unix

package browser

import "os/exec"

func ownGroup(*exec.Cmd) {}

func kill(cmd *exec.Cmd) { _ = cmd.Process.Kill() }
