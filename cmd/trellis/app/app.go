// Package app is the trellis command as a library, for a program that
// builds the command with more than this module holds: a store of its own,
// registered by importing its package (store.Register), serves and runs
// flows like the built-in ones.
//
//	package main
//
//	import (
//		"os"
//
//		"github.com/trellisflow/trellis/cmd/trellis/app"
//		_ "example.com/mystore" // registers the mystore: scheme
//	)
//
//	func main() { os.Exit(app.Main(os.Args[1:])) }
//
// Then `mytrellis serve --store mystore:...` works as `trellis serve` does.
package app

import (
	"os"

	"github.com/trellisflow/trellis/cmd/trellis/internal/cli"
	"github.com/trellisflow/trellis/nodes/all"
	"github.com/trellisflow/trellis/nodes/llm"
	"github.com/trellisflow/trellis/runtime/kind"
)

// Main runs the trellis command on args (the arguments after the
// program's name) with the process's standard streams and the built-in
// node kinds, and returns its exit status.
func Main(args []string) int {
	return cli.Main(args, &cli.Env{Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr, Registry: all.Registry(), Offline: all.Offline(),
		WithModel: func(p *llm.Provider) kind.Registry { return all.WithProvider(func() *llm.Provider { return p }) }})
}
