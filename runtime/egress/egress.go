// Package egress decides where a server connects on someone else's
// behalf (a run's webhook, a flow's call to an HTTP service): a Policy
// lists the host names and the networks its operator permits, and its
// dialer checks every address it connects to as the socket is about to
// connect, so that the address a name resolves to when connecting (not
// when it was checked, which a DNS rebinding changes) is the one judged.
//
// Some addresses are never reached through a host name: the machine's
// own (loopback, unspecified), its networks' (private, link-local, the
// shared address space), a cloud's metadata service, and addresses that
// are no host of the internet (multicast, reserved, documentation), in
// their IPv6 forms too (IPv4-mapped and IPv4-compatible addresses,
// NAT64 and 6to4 addresses carrying them). Forbidden lists them. Only
// an address or a network on the list that lies inside such a block
// opens it (127.0.0.1, 10.1.0.0/16, 169.254.169.254): a host name on the
// list, or a wider network (0.0.0.0/0), never does. The client a Policy
// makes goes through no proxy and follows no redirect.
package egress

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"syscall"
	"time"
)

// Policy is where connections may go: host names (exact, or every name
// under a *.domain), and addresses and networks. The zero Policy, and
// nil, permit nothing.
type Policy struct {
	names []string
	nets  []netip.Prefix
	// Resolver resolves host names as they are connected to (nil: the
	// system's resolver).
	Resolver *net.Resolver
}

// ErrDenied is a connection the policy does not permit; the errors of
// this package that refuse one match it with errors.Is.
var ErrDenied = errors.New("not on the allow-list")

// DeniedError says why a connection is refused.
type DeniedError struct {
	// Host is the host as named (a name, or an address).
	Host string
	// Addr is the address refused; invalid when the name itself is.
	Addr netip.Addr
	// Range is the block no name opens that holds Addr, when that is why.
	Range *Range
	// empty: the policy permits nothing at all.
	empty bool
}

func (e *DeniedError) Error() string {
	literal := e.Addr.IsValid() && e.Host == e.Addr.String()
	switch {
	case e.empty:
		return fmt.Sprintf("%s is %v (it is empty: nothing may be reached)", e.Host, ErrDenied)
	case !e.Addr.IsValid():
		return fmt.Sprintf("%s is %v", e.Host, ErrDenied)
	case e.Range != nil && literal:
		return fmt.Sprintf("%s is %s, which only an address or a network inside %s on the allow-list opens", e.Addr, e.Range.What, e.Range.Prefix)
	case e.Range != nil:
		return fmt.Sprintf("%s resolves to %s, %s, which no host name opens (only an address or a network inside %s on the allow-list does)", e.Host, e.Addr, e.Range.What, e.Range.Prefix)
	case literal:
		return fmt.Sprintf("%s is %v", e.Addr, ErrDenied)
	}
	return fmt.Sprintf("%s resolves to %s, which is %v", e.Host, e.Addr, ErrDenied)
}

// Is makes a DeniedError match ErrDenied.
func (e *DeniedError) Is(target error) bool { return target == ErrDenied }

// Parse reads the entries of an allow-list: a host name
// (hooks.example.com), every name under a domain (*.example.com), an
// address (203.0.113.7, ::1) or a network (10.0.0.0/8, fd00::/8).
func Parse(entries []string) (*Policy, error) {
	p := &Policy{}
	var errs []error
	for _, raw := range entries {
		e := strings.ToLower(strings.TrimSpace(raw))
		if pr, err := netip.ParsePrefix(e); err == nil {
			p.nets = append(p.nets, unmapPrefix(pr.Masked()))
			continue
		}
		if ip, err := netip.ParseAddr(e); err == nil {
			if ip.Zone() != "" {
				errs = append(errs, fmt.Errorf("allow-list entry %q: an address with a zone is not an entry; give the address alone", raw))
				continue
			}
			ip = ip.Unmap()
			p.nets = append(p.nets, netip.PrefixFrom(ip, ip.BitLen()))
			continue
		}
		if err := checkName(e); err != nil {
			errs = append(errs, fmt.Errorf("allow-list entry %q: %w", raw, err))
			continue
		}
		p.names = append(p.names, strings.TrimSuffix(e, "."))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return p, nil
}

// unmapPrefix is an IPv4-mapped network as the IPv4 network it is.
func unmapPrefix(p netip.Prefix) netip.Prefix {
	if p.Addr().Is4In6() && p.Bits() >= 96 {
		return netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
	}
	return p
}

// checkName checks a name entry: a host name, or *. and a domain.
func checkName(e string) error {
	const want = "want a host name, *.domain, an address or a network such as 10.0.0.0/8"
	name := strings.TrimSuffix(strings.TrimPrefix(e, "*."), ".")
	if name == "" || len(name) > 253 {
		return errors.New(want)
	}
	if isLocalhost(name) {
		return errors.New("localhost is this machine's loopback, which no host name opens: list the address (127.0.0.1 or ::1) to reach this machine")
	}
	for _, label := range strings.Split(name, ".") {
		if label == "" || len(label) > 63 {
			return errors.New(want)
		}
		for _, c := range label {
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				if c > 0x7f {
					return errors.New("write an international name in its ASCII form (xn--...)")
				}
				return errors.New(want)
			}
		}
	}
	return nil
}

// Empty reports whether the policy permits nothing.
func (p *Policy) Empty() bool { return p == nil || len(p.names) == 0 && len(p.nets) == 0 }

// String lists the entries.
func (p *Policy) String() string {
	var out []string
	if p != nil {
		out = append(out, p.names...)
		for _, n := range p.nets {
			out = append(out, n.String())
		}
	}
	return strings.Join(out, ",")
}

// nameAllowed reports whether a host name is on the list (itself, or
// under a *.domain on it).
func (p *Policy) nameAllowed(host string) bool {
	host = strings.ToLower(strings.TrimSuffix(host, "."))
	for _, n := range p.names {
		if d, ok := strings.CutPrefix(n, "*."); ok {
			if strings.HasSuffix(host, "."+d) {
				return true
			}
		} else if host == n {
			return true
		}
	}
	return false
}

// checkAddr reports whether ip may be connected to, for a host named
// host (a name, or ip itself); byName says the name is on the list.
func (p *Policy) checkAddr(host string, ip netip.Addr, byName bool) error {
	ip = ip.WithZone("").Unmap()
	if p.Empty() {
		return &DeniedError{Host: host, Addr: ip, empty: true}
	}
	if in := Forbidden(ip); len(in) > 0 {
		// every block holding it must be opened by an entry inside it
		for i := len(in) - 1; i >= 0; i-- {
			if !p.opens(in[i].Prefix, ip) {
				return &DeniedError{Host: host, Addr: ip, Range: &in[i]}
			}
		}
		return nil
	}
	if byName {
		return nil
	}
	for _, n := range p.nets {
		if n.Contains(ip) {
			return nil
		}
	}
	return &DeniedError{Host: host, Addr: ip}
}

// opens reports whether an entry inside block holds ip.
func (p *Policy) opens(block netip.Prefix, ip netip.Addr) bool {
	for _, n := range p.nets {
		if n.Contains(ip) && n.Bits() >= block.Bits() && block.Contains(n.Addr()) {
			return true
		}
	}
	return false
}

// CheckAddr reports whether the policy permits connecting to ip named
// as itself (no host name).
func (p *Policy) CheckAddr(ip netip.Addr) error {
	ip = ip.WithZone("").Unmap()
	return p.checkAddr(ip.String(), ip, false)
}

// CheckURL checks an address as far as it can be without resolving it:
// an absolute http or https URL with no user information, whose host is
// an address the policy permits, a name on the list, or a name the
// list's networks may hold once resolved (checked again as it is
// connected to, as every address is).
func (p *Policy) CheckURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil || u.Scheme != "http" && u.Scheme != "https" || u.Host == "" || u.Opaque != "" {
		return errors.New("want an absolute http or https URL")
	}
	if u.User != nil {
		return errors.New("the URL carries a user name or password, which is not sent: give the URL without them")
	}
	host := u.Hostname()
	if ip, err := netip.ParseAddr(host); err == nil {
		return p.checkAddr(host, ip, false)
	}
	if err := p.checkHost(host); err != nil {
		return err
	}
	if isLocalhost(host) {
		// RFC 6761: this machine's loopback, whatever a resolver says
		err := p.checkAddr(host, netip.AddrFrom4([4]byte{127, 0, 0, 1}), false)
		if err != nil && p.checkAddr(host, netip.IPv6Loopback(), false) == nil {
			err = nil
		}
		return err
	}
	return nil
}

// isLocalhost reports whether a host name is localhost or under it.
func isLocalhost(host string) bool {
	name := strings.ToLower(strings.TrimSuffix(host, "."))
	return name == "localhost" || strings.HasSuffix(name, ".localhost")
}

// checkHost refuses a host name before it is resolved when no address
// it resolves to could be permitted.
func (p *Policy) checkHost(host string) error {
	if p.Empty() {
		return &DeniedError{Host: host, empty: true}
	}
	if !p.nameAllowed(host) && len(p.nets) == 0 {
		return &DeniedError{Host: host}
	}
	return nil
}

// DialContext connects as a net.Dialer with the timeout does, only
// where the policy permits: a host name not on the list only to the
// list's networks, and every address (a name's resolved ones each as
// it is tried) checked as the socket is about to connect.
func (p *Policy) DialContext(timeout time.Duration) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		host, _, err := net.SplitHostPort(addr)
		if err != nil {
			return nil, err
		}
		byName := false
		if _, err := netip.ParseAddr(host); err != nil {
			if err := p.checkHost(host); err != nil {
				return nil, err
			}
			byName = p.nameAllowed(host)
		}
		d := &net.Dialer{Timeout: timeout, Resolver: p.Resolver,
			Control: func(network, address string, _ syscall.RawConn) error {
				ap, err := netip.ParseAddrPort(address)
				if err != nil || !strings.HasPrefix(network, "tcp") && !strings.HasPrefix(network, "udp") {
					return &DeniedError{Host: host}
				}
				return p.checkAddr(host, ap.Addr(), byName)
			}}
		return d.DialContext(ctx, network, addr)
	}
}

// Client returns an HTTP client that connects only where the policy
// permits, through no proxy, follows no redirect (a redirect is the
// answer, for the caller to judge), and gives up on a request after
// timeout.
func (p *Policy) Client(timeout time.Duration) *http.Client {
	tr := &http.Transport{
		Proxy:                 nil,
		DialContext:           p.DialContext(timeout),
		TLSHandshakeTimeout:   timeout,
		ResponseHeaderTimeout: timeout,
		MaxIdleConnsPerHost:   4,
		IdleConnTimeout:       time.Minute,
	}
	return &http.Client{Transport: tr, Timeout: timeout,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}
