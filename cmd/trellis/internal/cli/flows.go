package cli

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/trellisflow/trellis/runtime/api"
)

// cmdFlows reads a server's flows and their versions, and promotes a
// version (new threads start on it on every server sharing the store),
// through the server's API.
func cmdFlows(ctx context.Context, env *Env, args []string) int {
	fs := flags(env, "flows")
	apiURL := fs.String("api", envOr("TRELLIS_API_URL", "http://127.0.0.1:8080"), "the Trellis API (TRELLIS_API_URL); the key is TRELLIS_API_KEY (an admin key to promote)")
	pos, code, ok := parse(fs, args)
	if !ok {
		return code
	}
	if len(pos) == 0 {
		fs.Usage()
		return exitUsage
	}
	key := os.Getenv("TRELLIS_API_KEY")
	if key == "" {
		return fail(env, "flows", usagef("set TRELLIS_API_KEY to an API key of the server (an admin key to promote)"))
	}
	c := api.NewClient(strings.TrimSuffix(*apiURL, "/"), key)
	sub, rest := pos[0], pos[1:]
	var err error
	switch sub {
	case "list":
		var flows []api.Flow
		if flows, err = c.Flows(ctx); err == nil {
			for _, f := range flows {
				fmt.Fprintf(env.Stdout, "%s\tloaded %s\tpromoted %s\n", f.Name, f.Version, orNone(f.Promoted))
			}
		}
	case "versions":
		if len(rest) != 1 {
			err = usagef("want flows versions NAME")
			break
		}
		var vs *api.FlowVersions
		if vs, err = c.FlowVersions(ctx, rest[0]); err == nil {
			for _, v := range vs.Versions {
				var marks []string
				if v.Promoted {
					marks = append(marks, "promoted")
				}
				if v.Loaded {
					marks = append(marks, "loaded here")
				}
				fmt.Fprintf(env.Stdout, "%s\t%s\t%d threads\t%s\n", v.Version, v.Created.Local().Format(time.DateTime), v.Threads, strings.Join(marks, ", "))
			}
		}
	case "promote":
		if len(rest) != 2 {
			err = usagef("want flows promote NAME VERSION (flows versions NAME lists them)")
			break
		}
		var p *api.Promoted
		if p, err = c.PromoteVersion(ctx, rest[0], rest[1]); err == nil {
			fmt.Fprintf(env.Stdout, "flow %s: new threads start on version %s (was %s) on every server sharing the store\n", p.Flow, p.Version, orNone(p.Previous))
		}
	default:
		err = usagef("unknown flows command %q: list, versions or promote", sub)
	}
	if err != nil {
		return fail(env, "flows", err)
	}
	return 0
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}
