// Command trellis validates, draws and runs Trellis flows.
package main

import (
	"os"

	"github.com/trellisflow/trellis/cmd/trellis/internal/cli"
	"github.com/trellisflow/trellis/nodes/all"
)

func main() {
	os.Exit(cli.Main(os.Args[1:], &cli.Env{Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr, Registry: all.Registry(), Offline: all.Offline()}))
}
