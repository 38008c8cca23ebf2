package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"

	"github.com/trellisflow/trellis/runtime/engine"
	"github.com/trellisflow/trellis/runtime/flow"
)

const converseHelp = `Type your reply and press Enter. Commands:
  /ATTACHMENT FILE [message]   attach a file (this flow takes: %s)
  /state                       print the thread's state
  /quit                        leave (end of input does the same)
`

// converse talks with a conversational flow: the first run has no message
// (the flow speaks first), then every line is one run.
func converse(ctx context.Context, env *Env, eng *engine.Engine, g *flow.Graph, thread string, observe engine.Observer, resumed bool) int {
	conv := g.Conversation
	var names []string
	for name := range conv.Attachments {
		names = append(names, "/"+name)
	}
	if len(names) == 0 {
		names = []string{"none"}
	}
	fmt.Fprintf(env.Stdout, converseHelp+"\n", strings.Join(names, ", "))
	turn := func(input map[string]any) (map[string]any, bool) {
		res, err := eng.Run(ctx, g, engine.Request{Thread: thread, Input: input, Observe: observe})
		if err != nil {
			fmt.Fprintf(env.Stderr, "trellis run: %v\n", err)
			return nil, false
		}
		if out, ok := res.State[conv.Output].(string); ok && out != "" {
			fmt.Fprintf(env.Stdout, "%s> %s\n\n", g.Name, out)
		}
		return res.State, true
	}
	var state map[string]any
	if snap, err := eng.Store.Head(ctx, thread); resumed && err == nil && len(snap.Next) > 0 {
		fmt.Fprintf(env.Stderr, "resuming the unfinished turn of thread %s\n", thread)
		if _, err := eng.Run(ctx, g, engine.Request{Thread: thread, Resume: true, Observe: observe}); err != nil {
			fmt.Fprintf(env.Stderr, "trellis run: %v\n", err)
			return 1
		}
	}
	if resumed {
		// an existing thread: show where it stands instead of a new turn
		snap, err := eng.Store.Head(ctx, thread)
		if err != nil {
			fmt.Fprintf(env.Stderr, "trellis run: %v\n", err)
			return 1
		}
		state = snap.Values
		if out, ok := state[conv.Output].(string); ok && out != "" {
			fmt.Fprintf(env.Stdout, "%s> %s\n\n", g.Name, out)
		}
	} else {
		var ok bool
		if state, ok = turn(nil); !ok {
			return 1
		}
	}
	lines := bufio.NewScanner(env.Stdin)
	lines.Buffer(make([]byte, 64*1024), 1<<20)
	for !done(g, state) {
		fmt.Fprint(env.Stdout, "you> ")
		if !lines.Scan() {
			fmt.Fprintln(env.Stdout)
			return 0
		}
		line := strings.TrimSpace(lines.Text())
		input := map[string]any{}
		switch {
		case line == "":
			continue
		case line == "/quit":
			return 0
		case line == "/state":
			b, _ := json.MarshalIndent(state, "", "  ")
			fmt.Fprintf(env.Stdout, "%s\n", b)
			continue
		case strings.HasPrefix(line, "/"):
			name, rest, _ := strings.Cut(line[1:], " ")
			field, ok := conv.Attachments[name]
			if !ok {
				fmt.Fprintf(env.Stdout, "unknown command /%s\n", name)
				continue
			}
			file, msg, _ := strings.Cut(strings.TrimSpace(rest), " ")
			b, err := os.ReadFile(file)
			if err != nil {
				fmt.Fprintf(env.Stdout, "cannot attach: %v\n", err)
				continue
			}
			input[field] = string(b)
			if msg == "" {
				msg = "I have attached " + name + "."
			}
			line = msg
		}
		if conv.Input != "" {
			input[conv.Input] = line
		}
		next, ok := turn(input)
		if !ok {
			return 1
		}
		state = next
	}
	return 0
}

func done(g *flow.Graph, state map[string]any) bool {
	if g.Conversation.Until == nil {
		return false
	}
	ok, err := g.Conversation.Until.EvalBool(g.Vars(state, nil))
	return err == nil && ok
}
