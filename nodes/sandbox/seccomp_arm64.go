package sandbox

import "golang.org/x/sys/unix"

const (
	auditArch = 0xc00000b7 // AUDIT_ARCH_AARCH64
	x32Bit    = 0
)

var deniedArch []uintptr

var fcntlCalls = []uintptr{unix.SYS_FCNTL}
