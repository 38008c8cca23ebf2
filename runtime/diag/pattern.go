package diag

import (
	"regexp"
	"sync"
)

// Pattern is a regular expression compiled when it is first used. Most
// read the messages of the errors a diagnostic rewrites, which most
// programs never meet: they do not compile and keep them from the start.
func Pattern(expr string) func() *regexp.Regexp {
	return sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(expr) })
}
