//go:build static

package audio

import "errors"

// A static build (the build tag static, with CGO_ENABLED=0: no dynamic
// loader, no C library) loads no library at run time: the Opus codec is
// not available, and the voice agent says so. The server's image is such
// a build; the voice agent runs from a build with the system's libopus.

var errStatic = errors.New("this trellis is a static build, which loads no C library (build it without the tag static)")

func dlopen(string) (uintptr, error) { return 0, errStatic }

func dlsym(uintptr, string) (uintptr, error) { return 0, errStatic }

func syscallN(uintptr, ...uintptr) (r1, r2, err uintptr) { return 0, 0, 0 }
