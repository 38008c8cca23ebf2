// Package egresstest serves DNS on loopback for tests of egress
// policies: a resolver whose every name resolves to the addresses a test
// chooses, as an attacker's DNS server would answer.
package egresstest

import (
	"context"
	"net"
	"net/netip"
	"sync"
	"testing"

	"golang.org/x/net/dns/dnsmessage"
)

// DNS is a DNS server on loopback UDP that answers every A and AAAA
// question with the addresses of Answer, whatever the name.
type DNS struct {
	mu      sync.Mutex
	answers []netip.Addr
	asked   []string
	conn    net.PacketConn
}

// NewDNS starts a server answering with addrs until the test ends.
func NewDNS(t testing.TB, addrs ...netip.Addr) *DNS {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	d := &DNS{answers: addrs, conn: pc}
	done := make(chan struct{})
	go func() {
		defer close(done)
		d.serve()
	}()
	t.Cleanup(func() { pc.Close(); <-done })
	return d
}

// Answer changes the addresses every name resolves to (a rebinding).
func (d *DNS) Answer(addrs ...netip.Addr) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.answers = addrs
}

// Asked lists the names asked for, in order.
func (d *DNS) Asked() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]string(nil), d.asked...)
}

// Resolver resolves every name through the server (Go's own resolver,
// /etc/hosts aside: it asks the server first).
func (d *DNS) Resolver() *net.Resolver {
	addr := d.conn.LocalAddr().String()
	return &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var nd net.Dialer
		return nd.DialContext(ctx, "udp", addr)
	}}
}

func (d *DNS) serve() {
	buf := make([]byte, 1500)
	for {
		n, from, err := d.conn.ReadFrom(buf)
		if err != nil {
			return
		}
		var p dnsmessage.Parser
		h, err := p.Start(buf[:n])
		if err != nil {
			continue
		}
		q, err := p.Question()
		if err != nil {
			continue
		}
		d.mu.Lock()
		d.asked = append(d.asked, q.Name.String())
		answers := append([]netip.Addr(nil), d.answers...)
		d.mu.Unlock()
		b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: h.ID, Response: true, Authoritative: true, RecursionAvailable: true})
		b.EnableCompression()
		_ = b.StartQuestions()
		_ = b.Question(q)
		_ = b.StartAnswers()
		rh := dnsmessage.ResourceHeader{Name: q.Name, Class: dnsmessage.ClassINET, TTL: 0}
		for _, a := range answers {
			switch {
			case q.Type == dnsmessage.TypeA && a.Is4():
				_ = b.AResource(rh, dnsmessage.AResource{A: a.As4()})
			case q.Type == dnsmessage.TypeAAAA && a.Is6():
				_ = b.AAAAResource(rh, dnsmessage.AAAAResource{AAAA: a.As16()})
			}
		}
		out, err := b.Finish()
		if err != nil {
			continue
		}
		_, _ = d.conn.WriteTo(out, from)
	}
}
