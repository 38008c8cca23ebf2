package trellis_test

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"os"

	"github.com/trellisflow/trellis"
)

// The interview flow with the prompts and schemas it names (and the
// resume review it can run as a subflow), compiled into the program.
//
//go:embed flows/interview.yaml flows/resume_review.yaml prompts schemas/*.json
var interviewFiles embed.FS

func Example() {
	ctx := context.Background()
	f, err := trellis.Load("flows/examples/greet.yaml")
	if err != nil {
		panic(err)
	}
	rt, err := trellis.Open(ctx, "memory")
	if err != nil {
		panic(err)
	}
	defer rt.Close()
	for _, name := range []string{"Ada", "Grace"} {
		res, err := rt.Run(ctx, f, "t1", map[string]any{"name": name})
		if err != nil {
			panic(err)
		}
		fmt.Println(res.State["greeting"], res.State["greetings"])
	}
	// Output:
	// Hello, Ada! 1
	// Hello, Grace! 2
}

func ExampleLoad() {
	f, err := trellis.Load("flows/examples/greet.yaml")
	if err != nil {
		panic(err)
	}
	fmt.Println(f.Name(), f.Inputs())
	// Output: greet [name]
}

// A flow with errors reports every one of them, with its position.
func ExampleLoadError() {
	src := []byte(`version: 1
name: broken
state:
  schema: {type: object, properties: {n: {type: integer, default: 0}}}
nodes:
  inc: {kind: assign, set: {n: "state.m + 1"}}
edges:
  - {from: START, to: inc}
  - {from: inc, to: ned}
`)
	_, err := trellis.LoadSource("broken.yaml", src)
	var le *trellis.LoadError
	if errors.As(err, &le) {
		for _, d := range le.Diagnostics {
			fmt.Println(d)
		}
	}
	// Output:
	// broken.yaml:6:39: error[E003]: state has no field "m"; did you mean "n"?
	// broken.yaml:9:21: error[G001]: edge target "ned" is not a node
}

// A flow compiled into the program reads its prompts and schemas from the
// same file system. Offline, its model nodes use their prompts' fallbacks.
func ExampleLoadFS() {
	ctx := context.Background()
	f, err := trellis.LoadFS(interviewFiles, "flows/interview.yaml", trellis.Offline())
	if err != nil {
		panic(err)
	}
	rt, err := trellis.Open(ctx, "memory")
	if err != nil {
		panic(err)
	}
	defer rt.Close()
	if _, err := rt.Create(ctx, f, "ada", map[string]any{
		"interview_id": "demo", "user_id": "ada",
		"resume_structured": map[string]any{"name": "Ada", "target_role": "Backend Engineer"},
	}); err != nil {
		panic(err)
	}
	res, err := rt.Run(ctx, f, "ada", nil)
	if err != nil {
		panic(err)
	}
	fmt.Println(res.State[f.Conversation().Output])
	// Output: Hi Ada, thanks for joining. I will be interviewing you for the Backend Engineer role. We will talk through your experience, and there may be a short coding exercise. To start, tell me a little about yourself and what you are working on.
}

func ExampleRuntime_Stream() {
	ctx := context.Background()
	f, _ := trellis.Load("flows/examples/greet.yaml")
	rt, _ := trellis.Open(ctx, "memory")
	defer rt.Close()
	for ev, err := range rt.Stream(ctx, f, "t1", map[string]any{"name": "Ada"}) {
		if err != nil {
			panic(err)
		}
		switch ev.Type {
		case trellis.NodeEnd:
			fmt.Println(ev.Type, ev.Node, ev.Update["greeting"])
		case trellis.StateUpdate:
			fmt.Println(ev.Type, "checkpoint", ev.Checkpoint)
		default:
			fmt.Println(ev.Type)
		}
	}
	// Output:
	// run_start
	// node_start
	// node_end greet Hello, Ada!
	// state_update checkpoint 3
	// run_end
}

// Every step is a checkpoint: read any of them, and fork a thread from one.
func ExampleRuntime_Fork() {
	ctx := context.Background()
	f, _ := trellis.Load("flows/examples/greet.yaml")
	rt, _ := trellis.Open(ctx, "memory")
	defer rt.Close()
	for _, name := range []string{"Ada", "Grace", "Edsger"} {
		if _, err := rt.Run(ctx, f, "t1", map[string]any{"name": name}); err != nil {
			panic(err)
		}
	}
	// the step that greeted Grace
	steps, _ := rt.History(ctx, "t1", trellis.HistoryOptions{Source: trellis.SourceStep})
	grace := steps[1]
	if _, err := rt.Fork(ctx, "t1", grace.Seq, "t2"); err != nil {
		panic(err)
	}
	res, _ := rt.Run(ctx, f, "t2", map[string]any{"name": "Barbara"})
	fmt.Println(res.State["log"])
	// Output: [Ada Grace Barbara]
}

// Open takes a store's address; a SQLite file needs no server.
func ExampleOpen() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "trellis")
	defer os.RemoveAll(dir)
	rt, err := trellis.Open(ctx, "sqlite:"+dir+"/app.db")
	if err != nil {
		panic(err)
	}
	defer rt.Close()
	f, _ := trellis.Load("flows/examples/greet.yaml")
	rt.Run(ctx, f, "t1", map[string]any{"name": "Ada"})
	threads, _ := rt.Threads(ctx, trellis.ThreadOptions{})
	fmt.Println(len(threads), threads[0].ID)
	// Output: 1 t1
}
