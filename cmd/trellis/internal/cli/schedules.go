package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/trellisflow/trellis/runtime/api"
)

// cmdSchedules manages a server's schedules through its API: the server
// checks a schedule's flow, thread, input and new threads' values as it
// creates it.
func cmdSchedules(ctx context.Context, env *Env, args []string) int {
	fs := flags(env, "schedules")
	apiURL := fs.String("api", envOr("TRELLIS_API_URL", "http://127.0.0.1:8080"), "the Trellis API (TRELLIS_API_URL); the key is TRELLIS_API_KEY")
	id := fs.String("id", "", "create: the schedule's id (default: one is made)")
	flowName := fs.String("flow", "", "create: the flow each tick starts a new thread of")
	thread := fs.String("thread", "", "create: the thread every tick's run goes to (instead of --flow); list: only its schedules")
	cron := fs.String("cron", "", "create: the cron expression: minute hour day-of-month month day-of-week, six fields with seconds first, or @hourly, @daily, @every 10m...")
	zone := fs.String("zone", "", "create: the IANA time zone the expression is read in (default UTC)")
	input := fs.String("input", "", "create: each run's input, a JSON object")
	with := fs.String("with", "", "create: each new thread's initial values (YAML or JSON file; with --flow)")
	missed := fs.String("missed", "", "create: what becomes of ticks missed by more than --grace while no server ran: skip (default) or run_once")
	grace := fs.Duration("grace", 0, "create: how late a tick may fire before it counts as missed (default 10s)")
	hook := fs.String("webhook", "", "create: where each run's end is posted (the server's --webhook-allow must permit it)")
	paused := fs.Bool("paused", false, "create: create it paused")
	var metadata multi
	fs.Var(&metadata, "metadata", "create: `KEY=VALUE` of each new thread's metadata (repeatable)")
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
		return fail(env, "schedules", usagef("set TRELLIS_API_KEY to an API key of the tenant whose schedules these are"))
	}
	c := api.NewClient(strings.TrimSuffix(*apiURL, "/"), key)
	sub, rest := pos[0], pos[1:]
	one := func() (string, error) {
		if len(rest) != 1 {
			return "", usagef("want schedules %s ID", sub)
		}
		return rest[0], nil
	}
	var err error
	switch sub {
	case "create":
		in := api.CreateSchedule{ID: *id, Flow: *flowName, Thread: *thread, Cron: *cron, Zone: *zone, Missed: *missed, Webhook: *hook, Paused: *paused}
		if *grace != 0 {
			ms := grace.Milliseconds()
			in.GraceMS = &ms
		}
		if *input != "" {
			if err := json.Unmarshal([]byte(*input), &in.Input); err != nil {
				return fail(env, "schedules", usagef("--input: want a JSON object: %v", err))
			}
		}
		if *with != "" {
			if in.Values, err = readValues(*with); err != nil {
				return fail(env, "schedules", err)
			}
		}
		for _, kv := range metadata {
			k, v, ok := strings.Cut(kv, "=")
			if !ok || k == "" {
				return fail(env, "schedules", usagef("--metadata %q: want KEY=VALUE", kv))
			}
			if in.Metadata == nil {
				in.Metadata = map[string]string{}
			}
			in.Metadata[k] = v
		}
		var sc *api.Schedule
		if sc, err = c.CreateSchedule(ctx, in); err == nil {
			printSchedule(env, sc)
		}
	case "list":
		after := ""
		for {
			var page *api.Schedules
			if page, err = c.Schedules(ctx, after, 0); err != nil {
				break
			}
			for i := range page.Schedules {
				if *thread == "" || page.Schedules[i].Thread == *thread {
					printSchedule(env, &page.Schedules[i])
				}
			}
			if after = page.Next; after == "" {
				break
			}
		}
	case "get", "pause", "resume":
		var sid string
		if sid, err = one(); err != nil {
			break
		}
		var sc *api.Schedule
		switch sub {
		case "get":
			sc, err = c.Schedule(ctx, sid)
		default:
			sc, err = c.PauseSchedule(ctx, sid, sub == "pause")
		}
		if err == nil {
			printSchedule(env, sc)
		}
	case "ticks":
		var sid string
		if sid, err = one(); err != nil {
			break
		}
		var ticks *api.ScheduleTicks
		if ticks, err = c.ScheduleTicks(ctx, sid); err == nil {
			for _, t := range ticks.Ticks {
				what := t.Status
				switch {
				case t.Run != "":
					what += " " + t.Run
					if t.RunStatus != "" {
						what += " (" + t.RunStatus + ")"
					}
				case t.MissedFrom != nil && t.MissedTo != nil:
					what += " " + t.MissedFrom.Local().Format(time.DateTime) + " to " + t.MissedTo.Local().Format(time.DateTime)
				}
				if t.Error != "" {
					what += ": " + t.Error
				}
				fmt.Fprintf(env.Stdout, "%s\t%s\n", t.Tick.Local().Format(time.DateTime), what)
			}
		}
	case "delete":
		var sid string
		if sid, err = one(); err == nil {
			if err = c.DeleteSchedule(ctx, sid); err == nil {
				fmt.Fprintf(env.Stdout, "deleted %s\n", sid)
			}
		}
	default:
		err = usagef("unknown schedules command %q: create, list, get, ticks, pause, resume or delete", sub)
	}
	if err != nil {
		return fail(env, "schedules", err)
	}
	return 0
}

// printSchedule prints a schedule on one line: id, what it starts, cron
// and zone, state and next tick, and what its last tick did.
func printSchedule(env *Env, sc *api.Schedule) {
	target := "flow " + sc.Flow
	if sc.Thread != "" {
		target = "thread " + sc.Thread
	}
	state := "paused"
	if !sc.Paused {
		state = "next -"
		if sc.Next != nil {
			state = "next " + sc.Next.Local().Format(time.DateTime)
		}
	}
	last := ""
	if sc.LastTick != nil {
		last = "last " + sc.LastTick.Local().Format(time.DateTime) + " " + sc.LastRun
	}
	if sc.LastError != "" {
		last += " (" + sc.LastError + ")"
	}
	fmt.Fprintf(env.Stdout, "%s\t%s\t%s\t%s\tmissed %s\t%s\t%s\n", sc.ID, target, sc.Cron, sc.Zone, sc.Missed, state, strings.TrimSpace(last))
}
