package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/trellisflow/trellis"
)

const converseHelp = `Type your reply and press Enter. Commands:
  /ATTACHMENT FILE [message]   attach a file (this flow takes: %s)
  /state                       print the thread's state
  /quit                        leave (end of input does the same)
`

// converse talks with a conversational flow: the first run has no message
// (the flow speaks first), then every line is one run.
func converse(ctx context.Context, env *Env, rt *trellis.Runtime, f *trellis.Flow, at where, opts []trellis.RunOption, resumed bool) int {
	conv := f.Conversation()
	thread := at.id
	code := exitOK // of a failed turn
	var names []string
	for name := range conv.Attachments {
		names = append(names, "/"+name)
	}
	if len(names) == 0 {
		names = []string{"none"}
	}
	fmt.Fprintf(env.Stdout, converseHelp+"\n", strings.Join(names, ", "))
	// refused is set when the flow refused a turn's input (an attachment
	// too large for its field, say): nothing was kept, and the
	// conversation goes on
	refused := false
	turn := func(input map[string]any) (map[string]any, bool) {
		res, err := rt.Run(ctx, f, thread, input, opts...)
		var ie *trellis.InputError
		if err != nil && len(input) > 0 && errors.As(err, &ie) {
			fmt.Fprintf(env.Stdout, "not sent: %v\n\n", err)
			refused = true
			return nil, true
		}
		if err != nil {
			code = failRun(env, "run", at, err)
			return nil, false
		}
		if out, ok := res.State[conv.Output].(string); ok && out != "" {
			fmt.Fprintf(env.Stdout, "%s> %s\n\n", f.Name(), out)
		}
		paused(env, res, at)
		return res.State, true
	}
	var state map[string]any
	if snap, err := rt.State(ctx, thread); resumed && err == nil && len(snap.Next) > 0 {
		if _, err := rt.Resume(ctx, f, thread, opts...); err != nil {
			return failRun(env, "run", at, err)
		}
		// said once it is done: a process that cannot take the thread
		// over says only why
		fmt.Fprintf(env.Stderr, "resumed the unfinished turn of thread %s\n", thread)
	}
	if resumed {
		// an existing thread: show where it stands instead of a new turn
		snap, err := rt.State(ctx, thread)
		if err != nil {
			return fail(env, "run", err)
		}
		state = snap.Values
		if out, ok := state[conv.Output].(string); ok && out != "" {
			fmt.Fprintf(env.Stdout, "%s> %s\n\n", f.Name(), out)
		}
	} else {
		var ok bool
		if state, ok = turn(nil); !ok {
			return code
		}
	}
	lines := bufio.NewScanner(env.Stdin)
	lines.Buffer(make([]byte, 64*1024), 1<<20)
	for !done(env, f, state) {
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
		refused = false
		next, ok := turn(input)
		if !ok {
			return code
		}
		if !refused {
			state = next
		}
	}
	return 0
}

// done reports whether the conversation is over; a condition that cannot
// be evaluated is reported and ends it, rather than looping on.
func done(env *Env, f *trellis.Flow, state map[string]any) bool {
	ok, err := f.Finished(state)
	if err != nil {
		fmt.Fprintf(env.Stderr, "trellis run: %v\n", err)
		return true
	}
	return ok
}
