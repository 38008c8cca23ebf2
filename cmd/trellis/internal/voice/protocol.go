package voice

// The agent and the caller exchange JSON data messages on the session's
// topic (api.VoiceTopic), reliably. Every message has a type:
//
// from the caller:
//
//	{"type": "text", "text": "..."}         a message typed instead of spoken: one turn
//
// from the agent:
//
//	{"type": "state", "state": "listening" | "thinking" | "speaking"}
//	{"type": "transcript", "text": "...", "identity": "caller"}   what it heard the caller say
//	{"type": "reply", "text": "...", "turn": 3}                   the flow's reply (also spoken in audio mode)
//	{"type": "interrupted"}                                       the caller spoke over the reply: it stopped
//	{"type": "notice", "text": "..."}                             something the caller should know (text only: no speech engine)
//	{"type": "error", "text": "..."}                              a turn failed
//	{"type": "end", "text": "..."}                                the conversation is over; the agent leaves
const (
	MsgText        = "text"
	MsgState       = "state"
	MsgTranscript  = "transcript"
	MsgReply       = "reply"
	MsgInterrupted = "interrupted"
	MsgNotice      = "notice"
	MsgError       = "error"
	MsgEnd         = "end"
)

// Message is one data message.
type Message struct {
	Type     string `json:"type"`
	Text     string `json:"text,omitempty"`
	State    string `json:"state,omitempty"`
	Identity string `json:"identity,omitempty"`
	Turn     int    `json:"turn,omitempty"`
}

// The agent's states.
const (
	Listening = "listening"
	Thinking  = "thinking"
	Speaking  = "speaking"
)
