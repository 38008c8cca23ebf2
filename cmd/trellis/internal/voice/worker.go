package voice

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/gorilla/websocket"
	"github.com/livekit/protocol/auth"
	"github.com/livekit/protocol/livekit"
	"google.golang.org/protobuf/proto"

	"github.com/trellisflow/trellis/runtime/api"
)

// The agent is a LiveKit agent worker: it holds a WebSocket to the LiveKit
// server's /agent endpoint, registers under its agent name, answers the
// server's availability requests for the rooms the Trellis API dispatched
// it to (while it has room for another session), and joins a room when
// the server assigns it the job, with the token that came with it.

// workerConn is one connection to the LiveKit server.
type workerConn struct {
	ws *websocket.Conn
	mu sync.Mutex // writes
}

func (c *workerConn) send(m *livekit.WorkerMessage) error {
	b, err := proto.Marshal(m)
	if err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	_ = c.ws.SetWriteDeadline(time.Now().Add(10 * time.Second))
	return c.ws.WriteMessage(websocket.BinaryMessage, b)
}

func (c *workerConn) read() (*livekit.ServerMessage, error) {
	for {
		typ, b, err := c.ws.ReadMessage()
		if err != nil {
			return nil, err
		}
		if typ != websocket.BinaryMessage {
			continue
		}
		m := &livekit.ServerMessage{}
		if err := proto.Unmarshal(b, m); err != nil {
			return nil, fmt.Errorf("reading the LiveKit server's message: %w", err)
		}
		return m, nil
	}
}

// agentURL is the worker endpoint of the LiveKit server at u.
func agentURL(u string) (string, error) {
	p, err := url.Parse(u)
	if err != nil {
		return "", err
	}
	switch p.Scheme {
	case "http":
		p.Scheme = "ws"
	case "https":
		p.Scheme = "wss"
	case "ws", "wss":
	default:
		return "", fmt.Errorf("the LiveKit URL %q is not ws://, wss://, http:// or https://", u)
	}
	p.Path = strings.TrimRight(p.Path, "/") + "/agent"
	p.RawQuery = "protocol=1"
	return p.String(), nil
}

// errCredentials: the LiveKit server refused the agent's key.
var errCredentials = errors.New("the LiveKit server refused the agent's credentials (LIVEKIT_API_KEY, LIVEKIT_API_SECRET)")

// connect opens a worker connection and registers.
func (a *Agent) connect(ctx context.Context) (*workerConn, string, error) {
	u, err := agentURL(a.cfg.URL)
	if err != nil {
		return nil, "", err
	}
	tok, err := auth.NewAccessToken(a.cfg.APIKey, a.cfg.APISecret).SetValidFor(time.Hour).
		SetVideoGrant(&auth.VideoGrant{Agent: true}).ToJWT()
	if err != nil {
		return nil, "", err
	}
	d := websocket.Dialer{HandshakeTimeout: 10 * time.Second}
	ws, resp, err := d.DialContext(ctx, u, http.Header{"Authorization": {"Bearer " + tok}})
	if err != nil {
		if resp != nil && (resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden) {
			return nil, "", fmt.Errorf("connecting to the LiveKit server as a worker: HTTP %d: %w", resp.StatusCode, errCredentials)
		}
		if resp != nil {
			return nil, "", fmt.Errorf("connecting to the LiveKit server as a worker: HTTP %d: %w", resp.StatusCode, err)
		}
		return nil, "", fmt.Errorf("connecting to the LiveKit server as a worker: %w", err)
	}
	c := &workerConn{ws: ws}
	if err := c.send(&livekit.WorkerMessage{Message: &livekit.WorkerMessage_Register{Register: &livekit.RegisterWorkerRequest{
		Type: livekit.JobType_JT_ROOM, AgentName: a.cfg.AgentName, Version: "trellis",
		AllowedPermissions: &livekit.ParticipantPermission{CanSubscribe: true, CanPublish: true, CanPublishData: true,
			CanPublishSources: []livekit.TrackSource{livekit.TrackSource_MICROPHONE}, CanUpdateMetadata: true},
	}}}); err != nil {
		ws.Close()
		return nil, "", err
	}
	_ = ws.SetReadDeadline(time.Now().Add(10 * time.Second))
	m, err := c.read()
	if err != nil {
		ws.Close()
		return nil, "", fmt.Errorf("registering with the LiveKit server: %w", err)
	}
	_ = ws.SetReadDeadline(time.Time{})
	reg := m.GetRegister()
	if reg == nil {
		ws.Close()
		return nil, "", errors.New("registering with the LiveKit server: it answered something else")
	}
	return c, reg.WorkerId, nil
}

// serve runs one worker connection until it fails or ctx ends.
func (a *Agent) serve(ctx context.Context, c *workerConn) error {
	stop := context.AfterFunc(ctx, func() { c.ws.Close() })
	defer stop()
	a.mu.Lock()
	a.conn = c
	a.mu.Unlock()
	defer func() {
		a.mu.Lock()
		a.conn = nil
		a.mu.Unlock()
	}()
	a.report()
	// a status now and then keeps the connection known to be alive
	done := make(chan struct{})
	defer close(done)
	go func() {
		tick := time.NewTicker(5 * time.Second)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
				a.report()
			}
		}
	}()
	defer c.ws.Close()
	for {
		m, err := c.read()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		switch msg := m.Message.(type) {
		case *livekit.ServerMessage_Availability:
			a.availability(c, msg.Availability)
		case *livekit.ServerMessage_Assignment:
			a.assigned(msg.Assignment)
		case *livekit.ServerMessage_Termination:
			a.terminate(msg.Termination.JobId)
		}
	}
}

// send sends a message on the current connection, if there is one.
func (a *Agent) send(m *livekit.WorkerMessage) {
	a.mu.Lock()
	c := a.conn
	a.mu.Unlock()
	if c != nil {
		_ = c.send(m)
	}
}

// report tells the server how loaded the worker is; a full worker is
// offered no job.
func (a *Agent) report() {
	a.mu.Lock()
	n := len(a.sessions) + a.reserved
	a.mu.Unlock()
	status := livekit.WorkerStatus_WS_AVAILABLE
	if n >= a.cfg.Capacity {
		status = livekit.WorkerStatus_WS_FULL
	}
	a.send(&livekit.WorkerMessage{Message: &livekit.WorkerMessage_UpdateWorker{UpdateWorker: &livekit.UpdateWorkerStatus{
		Status: &status, Load: float32(n) / float32(a.cfg.Capacity), JobCount: uint32(n)}}})
}

// availability answers whether the worker takes a job: yes while it has
// room (the place is held until the assignment comes, or briefly; a job
// offered again holds the place it holds). A job that names no voice
// session is ended at once: it is the placeholder dispatch a Trellis
// room is made with (so that LiveKit gives it no default dispatch), or
// not the Trellis API's.
func (a *Agent) availability(c *workerConn, req *livekit.AvailabilityRequest) {
	job := req.Job
	var d api.VoiceDispatch
	if json.Unmarshal([]byte(job.Metadata), &d) != nil || d.Session == "" || d.Grant == "" {
		_ = c.send(&livekit.WorkerMessage{Message: &livekit.WorkerMessage_Availability{Availability: &livekit.AvailabilityResponse{
			JobId: job.Id, Terminate: true}}})
		return
	}
	a.mu.Lock()
	held := a.pending[job.Id]
	ok := held || !a.stopping && len(a.sessions)+a.reserved < a.cfg.Capacity
	if ok && !held {
		a.reserved++
		if a.pending == nil {
			a.pending = map[string]bool{}
		}
		a.pending[job.Id] = true
		// a place held for an assignment that never comes is given back
		time.AfterFunc(15*time.Second, func() { a.unreserve(job.Id) })
	}
	a.mu.Unlock()
	_ = c.send(&livekit.WorkerMessage{Message: &livekit.WorkerMessage_Availability{Availability: &livekit.AvailabilityResponse{
		JobId: job.Id, Available: ok, ParticipantIdentity: agentIdentity(job.Id), ParticipantName: a.cfg.ParticipantName,
		ParticipantAttributes: map[string]string{SessionAttribute: d.Session}}}})
	a.report()
}

// agentIdentity is the agent's identity in a job's room.
func agentIdentity(jobID string) string {
	id := jobID
	if len(id) > 12 {
		id = id[len(id)-12:]
	}
	return "agent-" + id
}

func (a *Agent) unreserve(jobID string) {
	a.mu.Lock()
	if a.pending[jobID] {
		delete(a.pending, jobID)
		a.reserved--
	}
	a.mu.Unlock()
	a.report()
}

// jobStatus reports a job's status to the server.
func (a *Agent) jobStatus(jobID string, status livekit.JobStatus, errText string) {
	a.send(&livekit.WorkerMessage{Message: &livekit.WorkerMessage_UpdateJob{UpdateJob: &livekit.UpdateJobStatus{
		JobId: jobID, Status: status, Error: errText}}})
}
