//go:build !amd64 && !arm64

package sandbox

const (
	auditArch = 0 // no filter: the local backend says so
	x32Bit    = 0
)

var (
	deniedArch []uintptr
	fcntlCalls []uintptr
)
