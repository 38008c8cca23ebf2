package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/trellisflow/trellis/nodes/tools/mcptool"
	"github.com/trellisflow/trellis/nodes/tools/mcptool/mcptest"
)

// cmdMCPServer serves the sample MCP tools (mcptest) over stdio, or over
// streamable HTTP at /mcp with --addr; --log appends each call to a file
// as a JSON line.
func cmdMCPServer(ctx context.Context, env *Env, args []string) int {
	fs := flag.NewFlagSet("dev mcp-server", flag.ContinueOnError)
	fs.SetOutput(env.Stderr)
	addr := fs.String("addr", "", "serve streamable HTTP at http://ADDR/mcp instead of stdio")
	logPath := fs.String("log", "", "append each call (tool and arguments) to this file, one JSON line each")
	drift := fs.Bool("drift", false, "serve add with another input schema, as a server changed since a flow pinned it")
	fs.Usage = func() {
		fmt.Fprintln(env.Stderr, "Usage: trellis dev mcp-server [--addr HOST:PORT] [--log FILE] [--drift]")
		fmt.Fprintln(env.Stderr, "\nServe sample MCP tools (add, echo, word_count, delete_note, fail, sleep) over stdio, or over streamable HTTP at /mcp with --addr, beside a sample weather API (GET /weather?city=NAME).")
		fs.PrintDefaults()
	}
	if _, code, ok := parse(fs, args); !ok {
		return code
	}
	cfg := mcptest.Config{Drift: *drift}
	if *logPath != "" {
		f, err := os.OpenFile(*logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return fail(env, "dev mcp-server", err)
		}
		defer f.Close()
		var mu sync.Mutex
		cfg.OnCall = func(tool string, a map[string]any) {
			b, _ := json.Marshal(map[string]any{"tool": tool, "arguments": a})
			mu.Lock()
			defer mu.Unlock()
			f.Write(append(b, '\n'))
			f.Sync()
		}
	}
	if *addr == "" {
		if err := mcptest.New(cfg).Run(ctx, &mcp.StdioTransport{}); err != nil && ctx.Err() == nil {
			return fail(env, "dev mcp-server", err)
		}
		return 0
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return fail(env, "dev mcp-server", err)
	}
	hs := &http.Server{Handler: mcptest.Handler(cfg), ReadHeaderTimeout: 10 * time.Second}
	fmt.Fprintf(env.Stderr, "MCP server of sample tools on http://%s/mcp, a sample weather API on http://%s/weather?city=NAME\n", ln.Addr(), ln.Addr())
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = hs.Shutdown(sctx)
	}()
	if err := hs.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fail(env, "dev mcp-server", err)
	}
	return 0
}

// cmdMCP is `trellis mcp pin FLOW...`: each flow's MCP servers' tools,
// listed from the servers, written to their pinned copies.
func cmdMCP(ctx context.Context, env *Env, args []string) int {
	fs := flags(env, "mcp")
	pos, code, ok := parse(fs, args)
	if !ok {
		return code
	}
	if len(pos) < 2 || pos[0] != "pin" {
		fs.Usage()
		return exitUsage
	}
	defer mcptool.CloseSessions()
	for _, p := range pos[1:] {
		written, err := mcptool.Pin(ctx, p)
		for _, w := range written {
			fmt.Fprintf(env.Stdout, "pinned %s\n", w)
		}
		if err != nil {
			fmt.Fprintf(env.Stderr, "trellis mcp pin: %s: %v\n", p, err)
			return 3
		}
		if len(written) == 0 {
			fmt.Fprintf(env.Stderr, "trellis mcp pin: %s has no mcp tools\n", p)
		}
	}
	return 0
}
