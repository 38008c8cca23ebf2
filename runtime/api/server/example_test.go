package server_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"

	"github.com/trellisflow/trellis"
	"github.com/trellisflow/trellis/nodes/all"
	"github.com/trellisflow/trellis/runtime/api"
	"github.com/trellisflow/trellis/runtime/api/server"
	"github.com/trellisflow/trellis/runtime/store"
)

// A program mounts the API under a path of its own mux, next to its own
// routes, on a runtime over its store (here the memory store), and makes
// a tenant's key; a client of the API then creates a thread and runs a
// turn of a flow on it.
func Example() {
	ctx := context.Background()

	// the flows the API runs: one that greets whoever a run names
	flows, _ := os.MkdirTemp("", "flows")
	defer os.RemoveAll(flows)
	_ = os.WriteFile(filepath.Join(flows, "greet.yaml"), []byte(`version: 1
name: greet
state:
  schema:
    type: object
    properties:
      name: {type: string, default: ""}
      greeting: {type: string, default: ""}
      greetings: {type: integer, default: 0}
input: [name]
nodes:
  greet:
    kind: assign
    set:
      greeting: "'Hello, ' + input.name + '!'"
      greetings: "state.greetings + 1"
edges:
  - {from: START, to: greet}
  - {from: greet, to: END}
`), 0o644)

	rt, err := trellis.Open(ctx, "memory")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer rt.Close()
	srv, err := server.New(server.Config{
		Runtime:  rt,
		FlowsDir: flows,
		Kinds:    all.Offline(), // the built-in node kinds, llm nodes writing their fallbacks
		Logger:   slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	mux := http.NewServeMux()
	mux.Handle("/trellis/", http.StripPrefix("/trellis", srv.Handler()))
	mux.HandleFunc("GET /hello", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "the program's own route") })
	hs := httptest.NewServer(mux)
	defer func() {
		hs.Close()                         // no more requests
		srv.Shutdown(context.Background()) // then the runs stop at a step boundary
	}()

	// a key of tenant acme: its threads are its own
	cat, _ := store.CatalogOf(rt.Store())
	_, key, err := server.CreateKey(ctx, cat, "acme", "example", false)
	if err != nil {
		fmt.Println(err)
		return
	}

	c := api.NewClient(hs.URL+"/trellis", key)
	if _, err := c.CreateThread(ctx, api.CreateThread{ID: "t1", Flow: "greet"}); err != nil {
		fmt.Println(err)
		return
	}
	run, err := c.RunWait(ctx, "t1", api.StartRun{Input: map[string]any{"name": "Ada"}})
	if err != nil {
		fmt.Println(err)
		return
	}
	st, err := c.State(ctx, "t1", 0)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(run.Status, st.Values["greeting"], st.Values["greetings"])

	// another tenant does not see acme's thread
	_, other, _ := server.CreateKey(ctx, cat, "globex", "example", false)
	_, err = api.NewClient(hs.URL+"/trellis", other).Thread(ctx, "t1")
	fmt.Println(err)
	// Output:
	// succeeded Hello, Ada! 1
	// not_found: no thread "t1"
}
