package server

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/trellisflow/trellis/runtime/api"
)

// An event is encoded once: the bytes a stream sends for it are the
// bytes the store records for it (and a stream joined later, or on
// another server, reads), but for the run's end, recorded without the
// final state and sent with it added; and a state_update repeats no value
// of its step's node events.
func TestAnEventIsTheSameBytesEverywhere(t *testing.T) {
	h := newHarness(t, "sqlite", nil)
	if _, err := h.acme.CreateThread(ctx, api.CreateThread{ID: "ada", Flow: "interview", Values: values(t, flowsDir+"/examples/candidate.yaml")}); err != nil {
		t.Fatal(err)
	}
	_, secret, err := CreateKey(ctx, h.srv.cat, "acme", "raw", false)
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, h.base+"/v1/threads/ada/runs/stream", strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+secret)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	run := resp.Header.Get("Trellis-Run")
	sent := map[int64][]byte{}
	for msg, err := range api.ReadEvents(resp.Body) {
		if err != nil {
			t.Fatal(err)
		}
		seq, _ := strconv.ParseInt(msg.ID, 10, 64)
		sent[seq] = msg.Data
	}
	if _, err := h.acme.Join(ctx, "ada", run); err != nil {
		t.Fatal(err)
	}
	stored, err := h.srv.cat.Events(ctx, run, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(stored) == 0 || len(stored) != len(sent) {
		t.Fatalf("%d events stored, %d sent", len(stored), len(sent))
	}
	updates := 0
	for _, ev := range stored {
		if eventType(ev.Data) == "run_end" {
			// recorded without the final state, sent with it: the same
			// bytes with the state, the event's last member, added
			head := ev.Data[:len(ev.Data)-1]
			st, err := h.acme.State(ctx, "ada", 0)
			if err != nil {
				t.Fatal(err)
			}
			var end struct {
				State map[string]any `json:"state"`
			}
			if !bytes.HasPrefix(sent[ev.Seq], append(bytes.Clone(head), `,"state":{`...)) || json.Unmarshal(sent[ev.Seq], &end) != nil ||
				len(end.State) != len(st.Values) || end.State["user_id"] != st.Values["user_id"] {
				t.Fatalf("the run's end: stored\n%s\nsent\n%s", ev.Data, sent[ev.Seq])
			}
			continue
		}
		if !bytes.Equal(ev.Data, sent[ev.Seq]) {
			t.Fatalf("event %d: stored\n%s\nsent\n%s", ev.Seq, ev.Data, sent[ev.Seq])
		}
		if eventType(ev.Data) == "state_update" {
			updates++
			var su struct {
				Fields []string       `json:"fields"`
				Update map[string]any `json:"update"`
			}
			if err := json.Unmarshal(ev.Data, &su); err != nil {
				t.Fatal(err)
			}
			if _, repeated := su.Update["next_message"]; len(su.Fields) == 0 || repeated {
				t.Fatalf("a state_update names no fields, or repeats a node's value: %s", ev.Data)
			}
		}
	}
	if updates == 0 {
		t.Fatal("no state_update")
	}
}
