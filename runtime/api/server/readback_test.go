package server

import (
	"io"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/go-json-experiment/json/jsontext"

	"github.com/trellisflow/trellis/runtime/api"
	"github.com/trellisflow/trellis/runtime/value"
)

// The interview picked up by another server: a thread created with the
// quick start's bare values (no resume) takes its turns on a server
// restarted before each (a new runtime on the same store, as after a
// deploy or on another replica, holding nothing of the thread in
// memory). Each turn asks a question the plan made, none repeated, and
// the state each server answers with is the one the next reads back.
func TestInterviewTurnsAcrossRestarts(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			addr := storeAddr(t, b.name)
			key := ""
			var last map[string]any
			for i, answer := range []string{"", "I built a cache in Go.", "It used an LRU with sharded locks \x7f, and I measured p99 fall from 40 ms to 6 ms under a replayed production load."} {
				s := serve(t, openRuntime(t, addr), flowsDir, key)
				if key == "" {
					key = s.acme.Key
					if _, err := s.acme.CreateThread(ctx, api.CreateThread{ID: "c1", Flow: "interview",
						Values: map[string]any{"interview_id": "c1", "user_id": "c1"}}); err != nil {
						t.Fatal(err)
					}
				} else {
					// what the last server answered is what this one reads
					st, err := s.acme.State(ctx, "c1", 0)
					if err != nil || !reflect.DeepEqual(st.Values, last) {
						t.Fatalf("turn %d: read back %s (%v)\nthe last server answered %s", i+1, value.Show(st.Values, 600), err, value.Show(last, 600))
					}
				}
				run, err := s.acme.RunWait(ctx, "c1", api.StartRun{Input: map[string]any{"last_response": answer}})
				if err != nil || run.Status != api.RunSucceeded {
					t.Fatalf("turn %d: %+v %v", i+1, run, err)
				}
				want := []string{"greeting", "question", "question"}[i]
				if run.State["last_node"] != want {
					t.Fatalf("turn %d reached %v, want %s: %v", i+1, run.State["last_node"], want, run.State["next_message"])
				}
				if anchors, _ := run.State["anchors"].([]any); len(anchors) != 3 {
					t.Fatalf("turn %d: anchors %s", i+1, value.Show(run.State["anchors"], 300))
				}
				last = run.State
				rawState(t, s, "c1")
				s.shutdown(time.Minute)
			}
			asked, _ := last["questions_asked"].([]any)
			if len(asked) != 2 || asked[0].(map[string]any)["text"] == asked[1].(map[string]any)["text"] {
				t.Fatalf("questions asked: %s", value.Show(asked, 600))
			}
		})
	}
}

// Two replicas on one PostgreSQL take turns at three interviews created
// with bare values: whichever serves a turn, it goes on from the state
// the other committed, and every interview asks its planned questions.
func TestInterviewsAcrossTwoReplicas(t *testing.T) {
	addr := storeAddr(t, "postgres")
	a := serve(t, openRuntime(t, addr), flowsDir, "")
	b := serve(t, openRuntime(t, addr), flowsDir, a.acme.Key)
	replicas := []*served{a, b}
	threads := []string{"i1", "i2", "i3"}
	for _, id := range threads {
		if _, err := a.acme.CreateThread(ctx, api.CreateThread{ID: id, Flow: "interview", Values: map[string]any{"interview_id": id, "user_id": id}}); err != nil {
			t.Fatal(err)
		}
	}
	for turn, answer := range []string{"", "I built a cache in Go.", "It used an LRU with sharded locks, and I measured p99 fall from 40 ms to 6 ms under load."} {
		for i, id := range threads {
			s := replicas[(turn+i)%2]
			run, err := s.acme.RunWait(ctx, id, api.StartRun{Input: map[string]any{"last_response": answer}})
			if err != nil || run.Status != api.RunSucceeded {
				t.Fatalf("%s, turn %d: %+v %v", id, turn+1, run, err)
			}
			if want := []string{"greeting", "question", "question"}[turn]; run.State["last_node"] != want {
				t.Fatalf("%s, turn %d reached %v, want %s", id, turn+1, run.State["last_node"], want)
			}
		}
	}
}

// rawState reads a thread's state as a client other than the Go client
// does, and holds the body to a strict JSON parser.
func rawState(t *testing.T, s *served, thread string) {
	t.Helper()
	req, _ := http.NewRequest("GET", s.base+"/v1/threads/"+thread+"/state", nil)
	req.Header.Set("Authorization", "Bearer "+s.acme.Key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || !jsontext.Value(body).IsValid() || !strings.Contains(string(body), `"anchors"`) {
		t.Fatalf("state: %d %s", resp.StatusCode, body)
	}
}
