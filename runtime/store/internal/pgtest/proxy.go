package pgtest

import (
	"bytes"
	"net"
	"net/url"
	"sync"
	"testing"
)

// Proxy is a loopback TCP proxy between a test's store and a PostgreSQL
// server that loses replies: armed (Lose), it forwards a request and
// cuts the connection as the server's reply comes back, so that the
// server has done the work (a write, committed) and the client hears
// only that its connection was lost, as when a server goes away after a
// commit and before its reply reaches the client.
type Proxy struct {
	ln     net.Listener
	target string

	mu    sync.Mutex
	rules []*loseRule
	lost  int
	conns map[net.Conn]bool
	down  bool
}

type loseRule struct {
	trigger func(request []byte) bool
	then    []byte // nil for the trigger's own reply
	n       int
}

// NewProxy starts a proxy to the server of url, a postgres:// URL, and
// returns the URL through it; it stops when the test ends.
func NewProxy(t testing.TB, addr string) (string, *Proxy) {
	t.Helper()
	u, err := url.Parse(addr)
	if err != nil {
		t.Fatalf("proxy: %v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("proxy: %v", err)
	}
	p := &Proxy{ln: ln, target: u.Host, conns: map[net.Conn]bool{}}
	go p.serve()
	t.Cleanup(p.close)
	u.Host = ln.Addr().String()
	return u.String(), p
}

// Lose arms the proxy: the next n requests that hold trigger (bytes of
// the protocol's messages, such as a statement's text) have their reply
// lost; with then set, it is the reply of the next request after the
// trigger's on the same connection that holds then (a transaction's
// COMMIT).
func (p *Proxy) Lose(trigger, then string, n int) {
	p.LoseIf(func(req []byte) bool { return bytes.Contains(req, []byte(trigger)) }, then, n)
}

// LoseIf is Lose for the requests trigger picks.
func (p *Proxy) LoseIf(trigger func(request []byte) bool, then string, n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	r := &loseRule{trigger: trigger, n: n}
	if then != "" {
		r.then = []byte(then)
	}
	p.rules = append(p.rules, r)
}

// Disarm forgets the requests Lose armed the proxy for.
func (p *Proxy) Disarm() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.rules = nil
}

// Lost is how many replies the proxy has lost.
func (p *Proxy) Lost() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.lost
}

// SetDown cuts every connection and refuses new ones (down), or lets
// them through again.
func (p *Proxy) SetDown(down bool) {
	p.mu.Lock()
	p.down = down
	var cut []net.Conn
	if down {
		for c := range p.conns {
			cut = append(cut, c)
		}
	}
	p.mu.Unlock()
	for _, c := range cut {
		c.Close()
	}
}

func (p *Proxy) close() {
	p.ln.Close()
	p.SetDown(true)
}

func (p *Proxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		if p.down {
			p.mu.Unlock()
			c.Close()
			continue
		}
		p.mu.Unlock()
		go p.relay(c)
	}
}

// relay forwards one client's connection.
func (p *Proxy) relay(client net.Conn) {
	server, err := net.Dial("tcp", p.target)
	if err != nil {
		client.Close()
		return
	}
	p.mu.Lock()
	p.conns[client], p.conns[server] = true, true
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		delete(p.conns, client)
		delete(p.conns, server)
		p.mu.Unlock()
		client.Close()
		server.Close()
	}()
	var doomMu sync.Mutex
	doomed := false
	var waiting *loseRule // a rule whose trigger passed, waiting for its then
	go func() {
		buf := make([]byte, 64<<10)
		for {
			n, err := client.Read(buf)
			if n > 0 {
				chunk := buf[:n]
				p.mu.Lock()
				switch {
				case waiting != nil && bytes.Contains(chunk, waiting.then):
					waiting = nil
					doomMu.Lock()
					doomed = true
					doomMu.Unlock()
				case waiting == nil:
					for i, r := range p.rules {
						if r.n > 0 && r.trigger(chunk) {
							if r.n--; r.n == 0 {
								p.rules = append(p.rules[:i], p.rules[i+1:]...)
							}
							if r.then == nil {
								doomMu.Lock()
								doomed = true
								doomMu.Unlock()
							} else {
								waiting = r
							}
							break
						}
					}
				}
				p.mu.Unlock()
				if _, werr := server.Write(chunk); werr != nil {
					break
				}
			}
			if err != nil {
				break
			}
		}
		server.Close()
	}()
	buf := make([]byte, 64<<10)
	for {
		n, err := server.Read(buf)
		if n > 0 {
			doomMu.Lock()
			d := doomed
			doomMu.Unlock()
			if d {
				// the server answered: whatever it did is done, and the
				// client never hears of it
				p.mu.Lock()
				p.lost++
				p.mu.Unlock()
				return
			}
			if _, werr := client.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}
