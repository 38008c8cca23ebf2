package voice_test

import (
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/livekit/protocol/auth"
	"github.com/livekit/protocol/livekit"
	lksdk "github.com/livekit/server-sdk-go/v2"

	"github.com/trellisflow/trellis/cmd/trellis/internal/rooms"
	"github.com/trellisflow/trellis/cmd/trellis/internal/voice"
	"github.com/trellisflow/trellis/cmd/trellis/internal/voice/voicetest"
	"github.com/trellisflow/trellis/runtime/api"
	"github.com/trellisflow/trellis/runtime/api/server"
)

// TestSecondCaller: callers get identities of their own (from their key,
// or named), and a thread's session takes one caller at a time: another
// caller is refused (voice_busy) while the first is in the room, the
// first may ask again (a reload) under the same identity, and once it
// has left the other is let in.
func TestSecondCaller(t *testing.T) {
	r := newRig(t)
	ctx := voicetest.Context(t, 2*time.Minute)
	r.interview(ctx, "two", 3)
	first := r.voice(ctx, "two", api.VoiceRequest{Mode: api.VoiceText})
	other, _ := r.newClient("acme", false)
	named, err := other.Voice(ctx, "two", api.VoiceRequest{Mode: api.VoiceText, Identity: "ada-2"})
	// the first has a token but has not joined: its place is kept for it
	if !api.IsCode(err, api.CodeVoiceBusy) {
		t.Fatalf("another caller while the first is joining: %+v %v", named, err)
	}
	caller := voicetest.Join(t, first.URL, first.Token)
	if _, err := other.Voice(ctx, "two", api.VoiceRequest{Mode: api.VoiceText}); !api.IsCode(err, api.CodeVoiceBusy) {
		t.Fatalf("another caller while the first is in the room: %v", err)
	}
	again := r.voice(ctx, "two", api.VoiceRequest{Mode: api.VoiceText})
	if again.Identity != first.Identity || again.Room != first.Room {
		t.Fatalf("the first caller asking again: %s in %s, first %s in %s", again.Identity, again.Room, first.Identity, first.Room)
	}
	caller.Leave()
	var second *api.VoiceSession
	waitFor(t, 30*time.Second, "the other caller to be let in", func() bool {
		second, err = other.Voice(ctx, "two", api.VoiceRequest{Mode: api.VoiceText})
		if err != nil && !api.IsCode(err, api.CodeVoiceBusy) {
			t.Fatal(err)
		}
		return err == nil
	})
	if second.Identity == first.Identity || strings.HasPrefix(second.Identity, "agent") {
		t.Fatalf("two callers with the identities %q and %q", first.Identity, second.Identity)
	}
	for _, id := range []string{first.Identity, second.Identity} {
		if id == "caller" || id == "" {
			t.Errorf("a caller's identity %q is not its own", id)
		}
	}
}

// TestIdentityBelongsToItsKey: a caller's identity is the key's that
// received it. Another key of the tenant asking for it (as its token's
// identity would push the caller out of the room: LiveKit's
// DUPLICATE_IDENTITY) is refused with 403, while the caller joins and
// while it is in the room, whether the identity is the first key's
// default or one it named; another key's default identity is never to
// be had; the caller stays in the room, joined with its key's id in its
// attributes, and its own key may ask again.
func TestIdentityBelongsToItsKey(t *testing.T) {
	r := newRig(t)
	ctx := voicetest.Context(t, 2*time.Minute)
	rooms, _ := r.livekit()
	other, otherKey := r.newClient("acme", false)
	for _, named := range []string{"", "ada"} {
		thread := "own" + named
		r.interview(ctx, thread, 3)
		first := r.voice(ctx, thread, api.VoiceRequest{Mode: api.VoiceText, Identity: named})
		if named == "" && first.Identity != "caller-"+r.keyID || named != "" && first.Identity != named {
			t.Fatalf("the first caller's identity %q", first.Identity)
		}
		taken := func(when string) {
			t.Helper()
			got, err := other.Voice(ctx, thread, api.VoiceRequest{Mode: api.VoiceText, Identity: first.Identity})
			var ae *api.Error
			if !errors.As(err, &ae) || ae.Code != api.CodeForbidden || ae.Status != 403 || !strings.Contains(ae.Message, first.Identity) {
				t.Fatalf("another key asking for %q %s: %+v %v", first.Identity, when, got, err)
			}
		}
		taken("while its caller joins")
		caller := voicetest.Join(t, first.URL, first.Token)
		taken("while its caller is in the room")
		if _, err := other.Voice(ctx, thread, api.VoiceRequest{Mode: api.VoiceText, Identity: "caller-" + r.keyID}); !api.IsCode(err, api.CodeForbidden) {
			t.Fatalf("another key asking for the first key's default identity: %v", err)
		}
		again := r.voice(ctx, thread, api.VoiceRequest{Mode: api.VoiceText, Identity: named})
		if again.Identity != first.Identity {
			t.Fatalf("the first key asking again: %q", again.Identity)
		}
		ps, err := rooms.ListParticipants(ctx, &livekit.ListParticipantsRequest{Room: first.Room})
		if err != nil {
			t.Fatal(err)
		}
		in := false
		for _, p := range ps.Participants {
			if p.Identity == first.Identity {
				in = p.Attributes[server.CallerKeyAttribute] == r.keyID && p.State != livekit.ParticipantInfo_DISCONNECTED
			}
		}
		if !in || caller.Room.ConnectionState() != lksdk.ConnectionStateConnected {
			t.Fatalf("the first caller is not in the room as its key's: %v", ps.Participants)
		}
		caller.Leave()
	}
	if _, err := other.Voice(ctx, "own", api.VoiceRequest{Mode: api.VoiceText, Identity: "caller-" + otherKey + "x"}); !api.IsCode(err, api.CodeForbidden) {
		t.Fatalf("a caller- identity of no key's: %v", err)
	}
}

// TestRoomsWithoutDefaultDispatch: a Trellis room never gets LiveKit's
// default dispatch (an unnamed agent any automatic agent answers),
// neither when the API creates it nor when a caller's token does (a
// caller reconnecting after a LiveKit restart), and a room found already
// made by someone else is brought to the thread's metadata and timeouts.
func TestRoomsWithoutDefaultDispatch(t *testing.T) {
	r := newRig(t)
	rooms, dispatch := r.livekit()
	ctx := voicetest.Context(t, 2*time.Minute)
	check := func(room, when string) {
		t.Helper()
		ds, err := dispatch.ListDispatch(ctx, &livekit.ListAgentDispatchRequest{Room: room})
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range ds.AgentDispatches {
			if d.AgentName == "" {
				t.Errorf("%s: the room has an unnamed dispatch %s", when, d.Id)
			}
		}
		list, err := rooms.ListRooms(ctx, &livekit.ListRoomsRequest{Names: []string{room}})
		if err != nil || len(list.Rooms) != 1 {
			t.Fatalf("%s: listing the room: %v %v", when, list, err)
		}
		rm := list.Rooms[0]
		var meta map[string]string
		if json.Unmarshal([]byte(rm.Metadata), &meta) != nil || meta["topic"] != api.VoiceTopic || meta["thread"] == "" {
			t.Errorf("%s: the room's metadata %q", when, rm.Metadata)
		}
		if rm.EmptyTimeout != 300 || rm.DepartureTimeout != 30 {
			t.Errorf("%s: the room's timeouts: empty %d, departure %d", when, rm.EmptyTimeout, rm.DepartureTimeout)
		}
	}

	r.interview(ctx, "made", 3)
	s := r.voice(ctx, "made", api.VoiceRequest{Mode: api.VoiceText})
	check(s.Room, "made by the API")

	// LiveKit forgets the room; the caller's token makes it again
	if _, err := rooms.DeleteRoom(ctx, &livekit.DeleteRoomRequest{Room: s.Room}); err != nil {
		t.Fatal(err)
	}
	caller := voicetest.Join(t, s.URL, s.Token)
	check(s.Room, "made by the caller's token")
	caller.Leave()

	// a room someone else made first, empty, and one with a participant
	r.interview(ctx, "found", 3)
	r.interview(ctx, "occupied", 3)
	first := r.voice(ctx, "found", api.VoiceRequest{Mode: api.VoiceText}) // to learn the rooms' names
	if _, err := rooms.DeleteRoom(ctx, &livekit.DeleteRoomRequest{Room: first.Room}); err != nil {
		t.Fatal(err)
	}
	if _, err := rooms.CreateRoom(ctx, &livekit.CreateRoomRequest{Name: first.Room, EmptyTimeout: 7, DepartureTimeout: 3, Metadata: "someone else's"}); err != nil {
		t.Fatal(err)
	}
	found := r.voice(ctx, "found", api.VoiceRequest{Mode: api.VoiceText})
	check(found.Room, "an empty room found made")

	occupiedRoom := r.voice(ctx, "occupied", api.VoiceRequest{Mode: api.VoiceText}).Room
	if _, err := rooms.DeleteRoom(ctx, &livekit.DeleteRoomRequest{Room: occupiedRoom}); err != nil {
		t.Fatal(err)
	}
	tok, err := auth.NewAccessToken(r.lk.Key, r.lk.Secret).SetIdentity("early").SetValidFor(time.Minute).
		SetVideoGrant(&auth.VideoGrant{RoomJoin: true, Room: occupiedRoom}).ToJWT()
	if err != nil {
		t.Fatal(err)
	}
	voicetest.Join(t, r.lk.URL, tok)
	if _, err := r.client.Voice(ctx, "occupied", api.VoiceRequest{Mode: api.VoiceText}); !api.IsCode(err, api.CodeVoiceBusy) {
		t.Fatalf("a room another caller is in: %v", err)
	}
	ds, err := dispatch.ListDispatch(ctx, &livekit.ListAgentDispatchRequest{Room: occupiedRoom})
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range ds.AgentDispatches {
		if d.AgentName == "" {
			t.Errorf("a room found made with a participant keeps its unnamed dispatch %s", d.Id)
		}
	}
	list, err := rooms.ListRooms(ctx, &livekit.ListRoomsRequest{Names: []string{occupiedRoom}})
	if err != nil || len(list.Rooms) != 1 || !strings.Contains(list.Rooms[0].Metadata, api.VoiceTopic) {
		t.Errorf("a room found made with a participant: %v %v", list, err)
	}
}

// TestTwoRequestsOneAgent: two requests for a thread's session at once
// (a page loaded twice) dispatch one agent, and a typed message then
// runs one turn.
func TestTwoRequestsOneAgent(t *testing.T) {
	r := newRig(t)
	agent, _ := r.agent(voiceConfigPatient())
	ctx := voicetest.Context(t, 2*time.Minute)
	r.interview(ctx, "twice", 3)
	var wg sync.WaitGroup
	sessions := make([]*api.VoiceSession, 2)
	errs := make([]error, 2)
	for i := range sessions {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sessions[i], errs[i] = r.client.Voice(ctx, "twice", api.VoiceRequest{Mode: api.VoiceText})
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	// and a third once the first agent is on its way
	time.Sleep(500 * time.Millisecond)
	third := r.voice(ctx, "twice", api.VoiceRequest{Mode: api.VoiceText})
	caller := voicetest.Join(t, third.URL, third.Token)
	_, at, err := caller.Message(ctx, 0, voice.MsgReply)
	if err != nil {
		t.Fatal(err)
	}
	// time for a second agent, were there one, to join
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if n := agents(caller); n > 1 || agent.Sessions() > 1 {
			t.Fatalf("%d agents in the room, %d sessions", n, agent.Sessions())
		}
		time.Sleep(100 * time.Millisecond)
	}
	// asked again, the agent is found in the room
	if again := r.voice(ctx, "twice", api.VoiceRequest{Mode: api.VoiceText}); again.Agent != "present" {
		t.Fatalf("asked again with the agent in the room: agent %s", again.Agent)
	}
	// four requests, one grant
	_, dispatch := r.livekit()
	ds, err := dispatch.ListDispatch(ctx, &livekit.ListAgentDispatchRequest{Room: third.Room})
	if err != nil {
		t.Fatal(err)
	}
	grants := 0
	for _, d := range ds.AgentDispatches {
		if strings.Contains(d.Metadata, "trv_") {
			grants++
		}
	}
	if grants != 1 {
		t.Fatalf("%d dispatches with a grant after four requests, want 1", grants)
	}
	if err := caller.Send(api.VoiceTopic, voice.Message{Type: voice.MsgText, Text: "I write compilers."}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := caller.Message(ctx, at, voice.MsgReply); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	runs, err := r.client.Runs(ctx, "twice")
	if err != nil {
		t.Fatal(err)
	}
	if len(runs) != 2 {
		t.Fatalf("%d runs, want 2: the greeting and the one message", len(runs))
	}
}

func agents(p *voicetest.Participant) int {
	n := 0
	for _, rp := range p.Room.GetRemoteParticipants() {
		if rp.Kind() == lksdk.ParticipantAgent {
			n++
		}
	}
	return n
}

// TestReadiness: /readyz reports voice unavailable (and the rest ready)
// when LiveKit refuses the server's credentials or does not answer, and
// the agent stops at once, saying why, when LiveKit refuses its own.
func TestReadiness(t *testing.T) {
	type health struct {
		Status     string `json:"status"`
		Voice      string `json:"voice"`
		VoiceError string `json:"voice_error"`
	}
	ready := func(r *rig) (int, health) {
		resp, b := r.get("/readyz")
		var h health
		if err := json.Unmarshal(b, &h); err != nil {
			t.Fatalf("/readyz: %s", b)
		}
		return resp.StatusCode, h
	}
	good := newRig(t)
	if code, h := ready(good); code != 200 || h.Status != "ok" || h.Voice != "ok" {
		t.Errorf("with LiveKit answering: %d %+v", code, h)
	}
	wrong := newRig(t, func(c *server.Config) {
		lk := c.Voice.Rooms.(*rooms.LiveKit).Config()
		lk.APISecret = "not-the-secret-of-this-livekit-server"
		c.Voice.Rooms = rooms.New(lk, c.Logger)
	})
	code, h := ready(wrong)
	if code != 200 || h.Status != "degraded" || h.Voice != "unavailable" || !strings.Contains(h.VoiceError, "credentials") {
		t.Errorf("with a wrong secret: %d %+v", code, h)
	}
	gone := newRig(t, func(c *server.Config) {
		lk := c.Voice.Rooms.(*rooms.LiveKit).Config()
		lk.URL = "ws://127.0.0.1:1"
		c.Voice.Rooms = rooms.New(lk, c.Logger)
	})
	if code, h := ready(gone); code != 200 || h.Status != "degraded" || h.Voice != "unavailable" || h.VoiceError == "" {
		t.Errorf("with no LiveKit server: %d %+v", code, h)
	}
	if strings.Contains(wrong.log.String(), "voice") == false {
		t.Errorf("the server's log says nothing of voice being unavailable:\n%s", wrong.log.String())
	}

	a, err := voice.New(voice.Config{URL: good.lk.URL, APIKey: good.lk.Key, APISecret: "not-the-secret-of-this-livekit-server", API: good.base})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- a.Run(voicetest.Context(t, time.Minute)) }()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "credentials") {
			t.Fatalf("the agent with a wrong secret: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the agent with a wrong secret did not stop")
	}
}
