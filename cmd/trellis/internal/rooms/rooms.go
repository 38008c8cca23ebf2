// Package rooms is the LiveKit server that the API's voice sessions run
// on: a server.Rooms over LiveKit's server SDK, which `trellis serve`
// gives the API when LIVEKIT_URL is set.
package rooms

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"time"

	"github.com/livekit/protocol/auth"
	"github.com/livekit/protocol/livekit"
	lksdk "github.com/livekit/server-sdk-go/v2"
	"github.com/twitchtv/twirp"

	"github.com/trellisflow/trellis/runtime/api"
	"github.com/trellisflow/trellis/runtime/api/server"
)

// Config is the LiveKit server that a thread's voice session runs on.
type Config struct {
	// URL is the LiveKit server (ws:// or wss://), and APIKey and
	// APISecret the key the server signs tokens and calls its API with.
	URL, APIKey, APISecret string
	// PublicURL is the LiveKit address given to callers, when they reach
	// it by another name than the server does (default URL).
	PublicURL string
	// AgentName is the name the voice agents register under (default
	// DefaultAgentName).
	AgentName string
	// TokenTTL is how long a caller's token may be used to join (default
	// 10 minutes); a joined caller's connection is kept up by LiveKit.
	TokenTTL time.Duration
}

// DefaultAgentName is the name voice agents register under.
const DefaultAgentName = "trellis-voice"

// A room's timeouts: how long it waits for its first participant, and
// how long it stays after the last one left.
const (
	roomEmptyTimeout     = 300
	roomDepartureTimeout = 30
)

// ConfigFromEnv reads LIVEKIT_URL, LIVEKIT_API_KEY, LIVEKIT_API_SECRET
// (and LIVEKIT_PUBLIC_URL, LIVEKIT_AGENT_NAME); nil when LIVEKIT_URL is
// unset.
func ConfigFromEnv(getenv func(string) string) (*Config, error) {
	url := getenv("LIVEKIT_URL")
	if url == "" {
		return nil, nil
	}
	c := &Config{URL: url, APIKey: getenv("LIVEKIT_API_KEY"), APISecret: getenv("LIVEKIT_API_SECRET"),
		PublicURL: getenv("LIVEKIT_PUBLIC_URL"), AgentName: getenv("LIVEKIT_AGENT_NAME")}
	if c.APIKey == "" || c.APISecret == "" {
		return nil, errors.New("LIVEKIT_URL is set but LIVEKIT_API_KEY or LIVEKIT_API_SECRET is not")
	}
	return c, nil
}

// DevelopmentKey reports whether key and secret are the pair `livekit-server
// --dev` runs with, which is published: whoever reaches that LiveKit
// server can use it.
func DevelopmentKey(key, secret string) bool { return key == "devkey" && secret == "secret" }

func (c *Config) defaults() {
	if c.PublicURL == "" {
		c.PublicURL = c.URL
	}
	if c.AgentName == "" {
		c.AgentName = DefaultAgentName
	}
	if c.TokenTTL == 0 {
		c.TokenTTL = 10 * time.Minute
	}
}

// LiveKit is what the voice routes ask of a LiveKit server.
type LiveKit struct {
	cfg      Config
	log      *slog.Logger
	rooms    *lksdk.RoomServiceClient
	dispatch *lksdk.AgentDispatchClient
}

// New returns the LiveKit server of cfg, logging to log (nil: nowhere); it
// warns of a development key.
func New(cfg Config, log *slog.Logger) *LiveKit {
	cfg.defaults()
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if DevelopmentKey(cfg.APIKey, cfg.APISecret) {
		log.Warn("LiveKit's development key (devkey, secret) is in use: it is published, so whoever reaches the LiveKit server can join and manage every room; set a key of your own")
	}
	return &LiveKit{cfg: cfg, log: log, rooms: lksdk.NewRoomServiceClient(cfg.URL, cfg.APIKey, cfg.APISecret),
		dispatch: lksdk.NewAgentDispatchServiceClient(cfg.URL, cfg.APIKey, cfg.APISecret)}
}

// Config is the configuration the server was made with, its defaults
// applied.
func (lk *LiveKit) Config() Config { return lk.cfg }

// Addr is the LiveKit server's address.
func (lk *LiveKit) Addr() string { return lk.cfg.URL }

// URL is the address callers join at.
func (lk *LiveKit) URL() string { return lk.cfg.PublicURL }

// Agent is the name the voice agents register under.
func (lk *LiveKit) Agent() string { return lk.cfg.AgentName }

// roomConfig is how a thread's room is made, by the API or by a caller's
// token (a caller reconnecting after LiveKit restarted makes the room
// again before anyone asks the API): its metadata and timeouts, and a
// dispatch of the Trellis agent that names no session, which keeps
// LiveKit from giving the room its default dispatch (an unnamed agent,
// which any automatically dispatched agent of the LiveKit project
// answers) and which Trellis agents decline.
func (lk *LiveKit) roomConfig(room, meta string) *livekit.RoomConfiguration {
	return &livekit.RoomConfiguration{Name: room, EmptyTimeout: roomEmptyTimeout, DepartureTimeout: roomDepartureTimeout, Metadata: meta,
		Agents: []*livekit.RoomAgentDispatch{{AgentName: lk.cfg.AgentName}}}
}

// CallerToken mints a caller's token: it may join the room (making it,
// as roomConfig says, if LiveKit lost it) with attrs as its attributes
// (which it may not change: no metadata updates) and publish a
// microphone (none in text mode) and data.
func (lk *LiveKit) CallerToken(room, meta string, in api.VoiceRequest, attrs map[string]string) (string, time.Time, error) {
	exp := time.Now().Add(lk.cfg.TokenTTL).UTC().Truncate(time.Second)
	yes, no, audio := true, false, in.Mode == api.VoiceAudio
	grant := &auth.VideoGrant{RoomJoin: true, Room: room, CanSubscribe: &yes, CanPublish: &audio, CanPublishData: &yes, CanUpdateOwnMetadata: &no}
	if audio {
		grant.SetCanPublishSources([]livekit.TrackSource{livekit.TrackSource_MICROPHONE})
	}
	tok, err := auth.NewAccessToken(lk.cfg.APIKey, lk.cfg.APISecret).SetIdentity(in.Identity).SetName(in.Name).SetAttributes(attrs).
		SetKind(livekit.ParticipantInfo_STANDARD).SetValidFor(lk.cfg.TokenTTL).SetVideoGrant(grant).
		SetRoomConfig(lk.roomConfig(room, meta)).ToJWT()
	return tok, exp, err
}

func failed(doing string, err error) error { return &server.RoomsError{Doing: doing, Err: err} }

// Ensure makes the thread's room, or finds it and puts it right: its
// metadata, its timeouts (an empty room made otherwise is made again; a
// room someone is in keeps its timeouts until it closes, and says so in
// the log), and no unnamed dispatch. It returns the room's participants
// and its agent dispatches.
func (lk *LiveKit) Ensure(ctx context.Context, room, meta string) ([]server.Participant, []server.Dispatch, error) {
	cfg := lk.roomConfig(room, meta)
	create := &livekit.CreateRoomRequest{Name: room, EmptyTimeout: cfg.EmptyTimeout, DepartureTimeout: cfg.DepartureTimeout,
		Metadata: meta, Agents: cfg.Agents}
	rm, err := lk.rooms.CreateRoom(ctx, create)
	if err != nil {
		return nil, nil, failed("creating the room", err)
	}
	ps, err := lk.rooms.ListParticipants(ctx, &livekit.ListParticipantsRequest{Room: room})
	if err != nil {
		return nil, nil, failed("listing the room's participants", err)
	}
	if rm.EmptyTimeout != cfg.EmptyTimeout || rm.DepartureTimeout != cfg.DepartureTimeout {
		if len(ps.Participants) == 0 {
			lk.log.Info("making a voice room again: it was made with other timeouts", "room", room,
				"empty_timeout", rm.EmptyTimeout, "departure_timeout", rm.DepartureTimeout)
			if _, err := lk.rooms.DeleteRoom(ctx, &livekit.DeleteRoomRequest{Room: room}); err != nil {
				return nil, nil, failed("removing a room made with other timeouts", err)
			}
			if rm, err = lk.rooms.CreateRoom(ctx, create); err != nil {
				return nil, nil, failed("creating the room", err)
			}
		} else {
			lk.log.Warn("a voice room was made with other timeouts, and has participants: it keeps them until it closes", "room", room,
				"empty_timeout", rm.EmptyTimeout, "departure_timeout", rm.DepartureTimeout)
		}
	}
	if rm.Metadata != meta {
		if _, err := lk.rooms.UpdateRoomMetadata(ctx, &livekit.UpdateRoomMetadataRequest{Room: room, Metadata: meta}); err != nil {
			return nil, nil, failed("setting the room's metadata", err)
		}
	}
	ds, err := lk.dispatch.ListDispatch(ctx, &livekit.ListAgentDispatchRequest{Room: room})
	if err != nil {
		return nil, nil, failed("listing the room's agent dispatches", err)
	}
	var kept []server.Dispatch
	for _, d := range ds.AgentDispatches {
		if d.AgentName != "" {
			kept = append(kept, server.Dispatch{ID: d.Id, Agent: d.AgentName, Metadata: d.Metadata, Jobs: len(d.GetState().GetJobs())})
			continue
		}
		// LiveKit's default dispatch, of a room made without Trellis's configuration
		if _, err := lk.dispatch.DeleteDispatch(ctx, &livekit.DeleteAgentDispatchRequest{DispatchId: d.Id, Room: room}); err != nil && !notFound(err) {
			return nil, nil, failed("removing the room's default dispatch", err)
		}
	}
	out := make([]server.Participant, len(ps.Participants))
	for i, p := range ps.Participants {
		out[i] = server.Participant{Identity: p.Identity, Agent: p.Kind == livekit.ParticipantInfo_AGENT, Attributes: p.Attributes}
	}
	return out, kept, nil
}

// Dispatch sends the voice agent to room with meta.
func (lk *LiveKit) Dispatch(ctx context.Context, room, meta string) error {
	if _, err := lk.dispatch.CreateDispatch(ctx, &livekit.CreateAgentDispatchRequest{AgentName: lk.cfg.AgentName, Room: room, Metadata: meta}); err != nil {
		return failed("dispatching the voice agent", err)
	}
	return nil
}

// Undispatch deletes a dispatch of room; one that is gone is no error.
func (lk *LiveKit) Undispatch(ctx context.Context, room, id string) error {
	if _, err := lk.dispatch.DeleteDispatch(ctx, &livekit.DeleteAgentDispatchRequest{DispatchId: id, Room: room}); err != nil && !notFound(err) {
		return failed("removing a dispatch of no live session", err)
	}
	return nil
}

// Remove removes a participant from room; one that is gone is no error.
func (lk *LiveKit) Remove(ctx context.Context, room, identity string) error {
	if _, err := lk.rooms.RemoveParticipant(ctx, &livekit.RoomParticipantIdentity{Room: room, Identity: identity}); err != nil && !notFound(err) {
		return failed("removing an agent of no live session", err)
	}
	return nil
}

// Close closes room with whoever is in it; a room that is gone is no
// error.
func (lk *LiveKit) Close(ctx context.Context, room string) error {
	if _, err := lk.rooms.DeleteRoom(ctx, &livekit.DeleteRoomRequest{Room: room}); err != nil && !notFound(err) {
		return failed("closing the room", err)
	}
	return nil
}

// Check asks the LiveKit server something that needs valid
// credentials; nil when it answers.
func (lk *LiveKit) Check(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	_, err := lk.rooms.ListRooms(ctx, &livekit.ListRoomsRequest{Names: []string{"trellis-health"}})
	return err
}

func notFound(err error) bool {
	var te twirp.Error
	return errors.As(err, &te) && te.Code() == twirp.NotFound
}

// Reason says, in words fit for a tenant, why LiveKit failed: never its
// error's text, which names internal addresses.
func (lk *LiveKit) Reason(err error) string {
	var te twirp.Error
	var ne net.Error
	switch {
	case errors.As(err, &te) && (te.Code() == twirp.Unauthenticated || te.Code() == twirp.PermissionDenied):
		return "it refused the server's credentials (LIVEKIT_API_KEY, LIVEKIT_API_SECRET)"
	case errors.Is(err, context.DeadlineExceeded):
		return "it did not answer in time"
	case errors.As(err, &ne):
		return "it does not answer"
	case errors.As(err, &te) && te.Code() == twirp.Unavailable:
		return "it is unavailable"
	}
	return "it answered with an error"
}

var _ server.Rooms = (*LiveKit)(nil)
