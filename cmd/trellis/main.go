// Command trellis validates, draws, runs and serves Trellis flows.
package main

import (
	"os"

	"github.com/trellisflow/trellis/cmd/trellis/app"
)

func main() { os.Exit(app.Main(os.Args[1:])) }
