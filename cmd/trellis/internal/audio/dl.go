//go:build !static

package audio

import "github.com/ebitengine/purego"

// The C library's loader, through purego (no cgo): the binary starts
// with the system's dynamic loader, which it asks for libopus at run
// time. A static build (the build tag static: the server's image, which
// has no C library) goes without it: see dl_static.go.

func dlopen(name string) (uintptr, error) {
	return purego.Dlopen(name, purego.RTLD_NOW|purego.RTLD_LOCAL)
}

func dlsym(h uintptr, name string) (uintptr, error) { return purego.Dlsym(h, name) }

func syscallN(fn uintptr, args ...uintptr) (r1, r2, err uintptr) {
	return purego.SyscallN(fn, args...)
}
