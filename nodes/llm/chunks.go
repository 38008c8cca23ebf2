package llm

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"sync"
	"unicode/utf16"
	"unicode/utf8"

	openai "github.com/sashabaranov/go-openai"
)

// A streamed reply is read here rather than by go-openai's stream, which
// allocates a line, two regular-expression rewrites and a decoded
// response for every chunk: a chunkStream reads the body line by line
// into one buffer, and decodes the few members of a
// chat.completion.chunk the node uses into values it reuses, so a
// streamed token costs no allocation of its own. What go-openai's stream
// reader makes of a stream is kept (stream_test.go compares the two on
// the same bytes over HTTP): `data: [DONE]` ends it; the lines that are
// not data (comments, event: lines) are gathered over the stream and
// read as an error object when it ends after them; a data line that is
// an error object joins them and ends the stream once the next line is
// read, with that error, or, when they do not read as one, with an error
// (a next line) or as the end (none); more than maxEmptyLines lines that
// are not data in a row is an error; a last line with no newline is not
// read; the body's end is the stream's end. Where go-openai fails a
// chunk only because a member the node does not read has another type
// (a "created" that is a string), the chunk is read.

// maxEmptyLines of them in a row is an error, and the body's end is the
// stream's end.

// maxEmptyLines is how many lines that are not data may come in a row
// (go-openai's default EmptyMessagesLimit).
const maxEmptyLines = 300

// maxLine bounds one line of the stream, and what is gathered of lines
// that are not data: a stream is not read into memory without end.
const maxLine = 16 << 20

// chunk is what a chunkStream decoded of one chat.completion.chunk: the
// first choice's delta (its text and tool-call pieces) and the usage the
// last chunk may carry. Its slices are valid until the next chunk.
type chunk struct {
	// choice is set when the chunk had a choice (Content and Calls come
	// from it)
	choice  bool
	Content []byte
	Calls   []callDelta
	// Finished is set when the choice gives a finish_reason: the reply
	// is complete
	Finished bool
	// Usage is set when HasUsage is
	Usage    openai.Usage
	HasUsage bool
}

// callDelta is a piece of a tool call: its index (when HasIndex), and
// the pieces of its id, name and arguments.
type callDelta struct {
	Index     int
	HasIndex  bool
	ID, Name  []byte
	Arguments []byte
}

// chunkStream decodes a streamed chat completion's body.
type chunkStream struct {
	r     *bufio.Reader
	long  []byte // a line longer than r's buffer, put together
	other []byte // the lines that were not data since the last data line
	done  bool
	// closed is set once [DONE] was read: the stream ended as it should,
	// not with its body cut short
	closed  bool
	scratch []byte
	c       chunk
	sc      scanner
}

var chunkStreams = sync.Pool{New: func() any { return &chunkStream{r: bufio.NewReaderSize(nil, 8<<10)} }}

// newChunkStream reads body; release gives it back once read.
func newChunkStream(body io.Reader) *chunkStream {
	s := chunkStreams.Get().(*chunkStream)
	s.r.Reset(body)
	s.done, s.closed = false, false
	s.other = s.other[:0]
	return s
}

func (s *chunkStream) release() {
	s.r.Reset(nil)
	if cap(s.long) > 1<<20 {
		s.long = nil
	}
	if cap(s.other) > 1<<20 {
		s.other = nil
	}
	chunkStreams.Put(s)
}

// next returns the stream's next chunk, or io.EOF at its end.
func (s *chunkStream) next() (*chunk, error) {
	if s.done {
		return nil, io.EOF
	}
	// an error object on a data line is gathered with the lines that
	// were not data, and read as an error once the next line is read,
	// as go-openai does
	errorLine := false
	for empty := 0; ; {
		line, err := s.line()
		if err != nil || errorLine {
			if e := s.gatheredError(); e != nil {
				return nil, e
			}
			if err == nil {
				// go-openai then decodes nothing as a chunk, and fails
				return nil, fmt.Errorf("the reply stream sent an error that does not read as one: %.200s", s.other)
			}
			if errors.Is(err, io.EOF) {
				s.done = true
			}
			return nil, err
		}
		line = bytes.TrimSpace(line)
		data, ok := bytes.CutPrefix(line, []byte("data:"))
		if ok {
			data = bytes.TrimLeft(data, " \t\r\n\f")
			if bytes.HasPrefix(data, []byte(`{"error":`)) {
				errorLine, line = true, data
			}
		}
		if !ok || errorLine {
			if len(s.other)+len(line) > maxLine {
				return nil, errors.New("the reply stream sent too much that is not data")
			}
			s.other = append(s.other, line...)
			if empty++; empty > maxEmptyLines {
				return nil, openai.ErrTooManyEmptyStreamMessages
			}
			continue
		}
		if string(data) == "[DONE]" {
			s.done, s.closed = true, true
			return nil, io.EOF
		}
		if err := s.decode(data); err != nil {
			return nil, err
		}
		return &s.c, nil
	}
}

// line reads the next line, with its newline; a last line with none is
// not one (go-openai drops it too).
func (s *chunkStream) line() ([]byte, error) {
	line, err := s.r.ReadSlice('\n')
	if !errors.Is(err, bufio.ErrBufferFull) {
		return line, err
	}
	s.long = append(s.long[:0], line...)
	for {
		line, err = s.r.ReadSlice('\n')
		if len(s.long)+len(line) > maxLine {
			return nil, fmt.Errorf("the reply stream sent a line longer than %d bytes", maxLine)
		}
		s.long = append(s.long, line...)
		if !errors.Is(err, bufio.ErrBufferFull) {
			return s.long, err
		}
	}
}

// gatheredError is the error the lines that were not data tell, when
// they are one (a server that answers a stream with a plain error body,
// or an error object on a data line).
func (s *chunkStream) gatheredError() error {
	if len(s.other) == 0 {
		return nil
	}
	var resp openai.ErrorResponse
	if json.Unmarshal(s.other, &resp) != nil || resp.Error == nil {
		return nil
	}
	return fmt.Errorf("error, %w", resp.Error)
}

// decode reads one chunk's JSON into s.c.
func (s *chunkStream) decode(data []byte) error {
	c := &s.c
	c.choice, c.Content, c.Calls, c.HasUsage, c.Usage, c.Finished = false, c.Content[:0], c.Calls[:0], false, openai.Usage{}, false
	sc := &s.sc
	sc.reset(data)
	first := true
	if sc.null() {
		// encoding/json reads null as an empty response
		sc.end()
		if sc.err != nil {
			return fmt.Errorf("decode a reply chunk: %w", sc.err)
		}
		return nil
	}
	if !sc.open('{') {
		return sc.fail("a chunk is not an object")
	}
	for sc.more('}', &first) {
		switch k := sc.key(); {
		case named(k, "choices"):
			s.choices()
		case named(k, "usage"):
			s.usage()
		default:
			sc.skip()
		}
	}
	sc.end()
	if sc.err != nil {
		return fmt.Errorf("decode a reply chunk: %w", sc.err)
	}
	return nil
}

// choices reads the chunk's choices: the first one's delta.
func (s *chunkStream) choices() {
	sc := &s.sc
	s.c.choice, s.c.Content, s.c.Calls, s.c.Finished = false, s.c.Content[:0], s.c.Calls[:0], false
	if sc.null() {
		return
	}
	if !sc.open('[') {
		sc.fail("choices is not a list")
		return
	}
	first := true
	for n := 0; sc.more(']', &first); n++ {
		if n > 0 {
			sc.skip()
			continue
		}
		s.c.choice = true
		if sc.null() {
			continue
		}
		if !sc.open('{') {
			sc.fail("a choice is not an object")
			return
		}
		inner := true
		for sc.more('}', &inner) {
			switch k := sc.key(); {
			case named(k, "delta"):
				s.delta()
			case named(k, "finish_reason"):
				if !sc.null() {
					s.scratch = sc.text(s.scratch[:0])
					s.c.Finished = len(s.scratch) > 0
				}
			default:
				sc.skip()
			}
		}
	}
}

func (s *chunkStream) delta() {
	sc := &s.sc
	if sc.null() {
		return
	}
	if !sc.open('{') {
		sc.fail("a delta is not an object")
		return
	}
	first := true
	for sc.more('}', &first) {
		switch k := sc.key(); {
		case named(k, "content"):
			if !sc.null() {
				s.c.Content = sc.text(s.c.Content[:0])
			}
		case named(k, "tool_calls"):
			s.calls()
		default:
			sc.skip()
		}
	}
}

func (s *chunkStream) calls() {
	sc := &s.sc
	s.c.Calls = s.c.Calls[:0]
	if sc.null() {
		return
	}
	if !sc.open('[') {
		sc.fail("tool_calls is not a list")
		return
	}
	first := true
	for sc.more(']', &first) {
		c := &s.c
		if n := len(c.Calls); n < cap(c.Calls) {
			c.Calls = c.Calls[:n+1]
		} else {
			c.Calls = append(c.Calls, callDelta{})
		}
		d := &c.Calls[len(c.Calls)-1]
		d.Index, d.HasIndex, d.ID, d.Name, d.Arguments = 0, false, d.ID[:0], d.Name[:0], d.Arguments[:0]
		if sc.null() {
			continue
		}
		if !sc.open('{') {
			sc.fail("a tool call is not an object")
			return
		}
		inner := true
		for sc.more('}', &inner) {
			switch k := sc.key(); {
			case named(k, "index"):
				if sc.null() {
					d.Index, d.HasIndex = 0, false
				} else {
					d.Index, d.HasIndex = sc.int(), true
				}
			case named(k, "id"):
				if !sc.null() {
					d.ID = sc.text(d.ID[:0])
				}
			case named(k, "function"):
				if sc.null() {
					continue
				}
				if !sc.open('{') {
					sc.fail("a tool call's function is not an object")
					return
				}
				fn := true
				for sc.more('}', &fn) {
					switch k := sc.key(); {
					case named(k, "name"):
						if !sc.null() {
							d.Name = sc.text(d.Name[:0])
						}
					case named(k, "arguments"):
						if !sc.null() {
							d.Arguments = sc.text(d.Arguments[:0])
						}
					default:
						sc.skip()
					}
				}
			default:
				sc.skip()
			}
		}
	}
}

func (s *chunkStream) usage() {
	sc := &s.sc
	if sc.null() {
		s.c.HasUsage, s.c.Usage = false, openai.Usage{}
		return
	}
	if !sc.open('{') {
		sc.fail("usage is not an object")
		return
	}
	if !s.c.HasUsage {
		s.c.HasUsage, s.c.Usage = true, openai.Usage{}
	}
	u := &s.c.Usage
	first := true
	for sc.more('}', &first) {
		switch k := sc.key(); {
		case named(k, "prompt_tokens"):
			u.PromptTokens = sc.int()
		case named(k, "completion_tokens"):
			u.CompletionTokens = sc.int()
		case named(k, "total_tokens"):
			u.TotalTokens = sc.int()
		default:
			sc.skip()
		}
	}
}

// scanner reads JSON from a buffer without allocating: strings with no
// escape come back as parts of the buffer, others decoded into buffers
// the caller reuses. The first error stops it (err).
type scanner struct {
	b   []byte
	i   int
	err error
	kb  []byte // a key with escapes, decoded
}

func (s *scanner) reset(b []byte) { s.b, s.i, s.err = b, 0, nil }

func (s *scanner) fail(msg string) error {
	if s.err == nil {
		s.err = fmt.Errorf("%s (at byte %d)", msg, s.i)
	}
	return s.err
}

func (s *scanner) ws() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// open consumes c (an object's or a list's start).
func (s *scanner) open(c byte) bool {
	if s.err != nil {
		return false
	}
	s.ws()
	if s.i < len(s.b) && s.b[s.i] == c {
		s.i++
		return true
	}
	return false
}

// more reports whether an object or a list goes on with another member,
// consuming its end (end) or the comma before the member.
func (s *scanner) more(end byte, first *bool) bool {
	if s.err != nil {
		return false
	}
	s.ws()
	if s.i >= len(s.b) {
		s.fail("the chunk ends early")
		return false
	}
	if s.b[s.i] == end {
		s.i++
		return false
	}
	if !*first {
		if s.b[s.i] != ',' {
			s.fail("expected a comma")
			return false
		}
		s.i++
	}
	*first = false
	return true
}

// end checks that nothing but space follows the value.
func (s *scanner) end() {
	s.ws()
	if s.err == nil && s.i != len(s.b) {
		s.fail("something follows the chunk")
	}
}

// key reads a member's name and its colon.
func (s *scanner) key() []byte {
	k := s.str(&s.kb)
	s.ws()
	if s.err == nil && (s.i >= len(s.b) || s.b[s.i] != ':') {
		s.fail("expected a colon")
		return nil
	}
	s.i++
	return k
}

// null consumes a null, reporting whether there was one.
func (s *scanner) null() bool {
	s.ws()
	if s.err == nil && bytes.HasPrefix(s.b[s.i:], []byte("null")) {
		s.i += 4
		return true
	}
	return false
}

// named reports whether a member's name is name, as encoding/json
// matches them (case folded).
func named(k []byte, name string) bool {
	return string(k) == name || bytes.EqualFold(k, []byte(name))
}

// text appends a string to dst.
func (s *scanner) text(dst []byte) []byte {
	scratch := dst[len(dst):]
	v := s.str(&scratch)
	return append(dst, v...)
}

// str reads a string: a part of the buffer when it has no escape, else
// decoded into *scratch (reused).
func (s *scanner) str(scratch *[]byte) []byte {
	if s.err != nil {
		return nil
	}
	s.ws()
	if s.i >= len(s.b) || s.b[s.i] != '"' {
		s.fail("expected a string")
		return nil
	}
	s.i++
	start := s.i
	for s.i < len(s.b) {
		c := s.b[s.i]
		switch {
		case c == '"':
			s.i++
			return s.b[start : s.i-1]
		case c == '\\' || c >= utf8.RuneSelf:
			return s.slowStr(start, scratch)
		case c < ' ':
			s.fail("a control character in a string")
			return nil
		}
		s.i++
	}
	s.fail("a string does not end")
	return nil
}

// slowStr decodes a string with escapes or bytes beyond ASCII as
// encoding/json does: invalid UTF-8 and lone surrogates become U+FFFD.
func (s *scanner) slowStr(start int, scratch *[]byte) []byte {
	out := append((*scratch)[:0], s.b[start:s.i]...)
	for s.i < len(s.b) {
		c := s.b[s.i]
		switch {
		case c == '"':
			s.i++
			*scratch = out
			return out
		case c < ' ':
			s.fail("a control character in a string")
			return nil
		case c == '\\':
			if s.i+1 >= len(s.b) {
				s.fail("a string does not end")
				return nil
			}
			e := s.b[s.i+1]
			s.i += 2
			switch e {
			case '"', '\\', '/':
				out = append(out, e)
			case 'b':
				out = append(out, '\b')
			case 'f':
				out = append(out, '\f')
			case 'n':
				out = append(out, '\n')
			case 'r':
				out = append(out, '\r')
			case 't':
				out = append(out, '\t')
			case 'u':
				r, ok := s.hex4()
				if !ok {
					s.fail("a bad \\u escape")
					return nil
				}
				if utf16.IsSurrogate(r) {
					// the low half when a \u escape follows, else U+FFFD
					// and the escape that follows read on its own
					save, low := s.i, rune(-1)
					if s.i+1 < len(s.b) && s.b[s.i] == '\\' && s.b[s.i+1] == 'u' {
						s.i += 2
						if x, ok := s.hex4(); ok {
							low = x
						}
					}
					if dec := utf16.DecodeRune(r, low); dec != utf8.RuneError {
						r = dec
					} else {
						s.i, r = save, utf8.RuneError
					}
				}
				out = utf8.AppendRune(out, r)
			default:
				s.fail("a bad escape")
				return nil
			}
		case c < utf8.RuneSelf:
			out = append(out, c)
			s.i++
		default:
			r, size := utf8.DecodeRune(s.b[s.i:])
			if r == utf8.RuneError && size == 1 {
				out = utf8.AppendRune(out, utf8.RuneError)
			} else {
				out = append(out, s.b[s.i:s.i+size]...)
			}
			s.i += size
		}
	}
	s.fail("a string does not end")
	return nil
}

func (s *scanner) hex4() (rune, bool) {
	if s.i+4 > len(s.b) {
		return 0, false
	}
	var r rune
	for _, c := range s.b[s.i : s.i+4] {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c = c - 'a' + 10
		case 'A' <= c && c <= 'F':
			c = c - 'A' + 10
		default:
			return 0, false
		}
		r = r*16 + rune(c)
	}
	s.i += 4
	return r, true
}

// int reads an integer.
func (s *scanner) int() int {
	if s.err != nil {
		return 0
	}
	s.ws()
	start := s.i
	s.number()
	if s.err != nil {
		return 0
	}
	digits, neg := s.b[start:s.i], false
	if digits[0] == '-' {
		digits, neg = digits[1:], true
	}
	n := 0
	for _, c := range digits {
		if c < '0' || c > '9' || n > (math.MaxInt-9)/10 {
			s.fail("expected a whole number")
			return 0
		}
		n = n*10 + int(c-'0')
	}
	if neg {
		n = -n
	}
	return n
}

// number consumes a JSON number.
func (s *scanner) number() {
	start := s.i
	if s.i < len(s.b) && s.b[s.i] == '-' {
		s.i++
	}
	digits := func() int {
		n := 0
		for s.i < len(s.b) && '0' <= s.b[s.i] && s.b[s.i] <= '9' {
			s.i++
			n++
		}
		return n
	}
	d := s.i
	if digits() == 0 || (s.b[d] == '0' && s.i-d > 1) {
		s.fail("a bad number")
		return
	}
	if s.i < len(s.b) && s.b[s.i] == '.' {
		s.i++
		if digits() == 0 {
			s.fail("a bad number")
			return
		}
	}
	if s.i < len(s.b) && (s.b[s.i] == 'e' || s.b[s.i] == 'E') {
		s.i++
		if s.i < len(s.b) && (s.b[s.i] == '+' || s.b[s.i] == '-') {
			s.i++
		}
		if digits() == 0 {
			s.fail("a bad number")
			return
		}
	}
	if s.i == start {
		s.fail("expected a value")
	}
}

// skip consumes any value.
func (s *scanner) skip() {
	if s.err != nil {
		return
	}
	s.ws()
	if s.i >= len(s.b) {
		s.fail("expected a value")
		return
	}
	switch c := s.b[s.i]; {
	case c == '"':
		var none []byte
		s.skipStr(&none)
	case c == '{':
		s.i++
		first := true
		for s.more('}', &first) {
			s.key()
			s.skip()
		}
	case c == '[':
		s.i++
		first := true
		for s.more(']', &first) {
			s.skip()
		}
	case c == '-' || ('0' <= c && c <= '9'):
		s.number()
	default:
		for _, lit := range [...]string{"true", "false", "null"} {
			if bytes.HasPrefix(s.b[s.i:], []byte(lit)) {
				s.i += len(lit)
				return
			}
		}
		s.fail("expected a value")
	}
}

// skipStr consumes a string, checking it as str does, keeping nothing.
func (s *scanner) skipStr(scratch *[]byte) {
	s.str(scratch)
}
