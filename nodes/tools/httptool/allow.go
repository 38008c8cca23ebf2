package httptool

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
)

// allowList is where an http tool may connect: host names (and every name
// under a *.domain), and networks of addresses. It is checked on the
// address actually dialled, after the name is resolved, so a name that
// resolves somewhere else by then reaches nothing it should not. Nothing
// is allowed by default; and the ranges that reach this machine or its
// private networks (loopback, private, link-local, shared, unspecified,
// multicast) are reached only through a network entry that holds the
// address, never through a name: a name on the list that resolves into
// them (localhost, a rebinding DNS name) is refused.
//
// dial is the one function the tool connects through.
type allowList struct {
	names []string
	nets  []netip.Prefix
}

// errNotAllowed is an address the allow-list does not permit.
var errNotAllowed = errors.New("not on the tool's allow-list")

// parseAllow reads allow-list entries: a host name (api.example.com),
// every name under a domain (*.example.com), an address (203.0.113.7,
// ::1) or a network (10.0.0.0/8, fd00::/8).
func parseAllow(entries []string) (*allowList, error) {
	a := &allowList{}
	for _, e := range entries {
		e = strings.ToLower(strings.TrimSpace(e))
		if p, err := netip.ParsePrefix(e); err == nil {
			a.nets = append(a.nets, p.Masked())
			continue
		}
		if ip, err := netip.ParseAddr(e); err == nil {
			a.nets = append(a.nets, netip.PrefixFrom(ip.Unmap(), ip.Unmap().BitLen()))
			continue
		}
		name := strings.TrimPrefix(e, "*.")
		if name == "" || strings.ContainsAny(name, "/:*@ ?#[]") {
			return nil, fmt.Errorf("allow-list entry %q: want a host name, *.domain, an address or a network such as 10.0.0.0/8", e)
		}
		a.names = append(a.names, e)
	}
	return a, nil
}

// String lists the entries.
func (a *allowList) String() string {
	out := slices.Clone(a.names)
	for _, p := range a.nets {
		out = append(out, p.String())
	}
	return strings.Join(out, ", ")
}

// internal are the ranges a name never opens.
var internal = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),
	netip.MustParsePrefix("100.64.0.0/10"), // shared address space (carrier-grade NAT)
	netip.MustParsePrefix("192.0.0.0/24"),
	netip.MustParsePrefix("198.18.0.0/15"),
	netip.MustParsePrefix("255.255.255.255/32"),
	netip.MustParsePrefix("64:ff9b::/96"), // NAT64: an IPv4 address inside
}

// reserved reports whether ip is in a range that reaches this machine or
// its private networks.
func reserved(ip netip.Addr) bool {
	ip = ip.Unmap()
	if ip.IsLoopback() || ip.IsPrivate() || ip.IsLinkLocalUnicast() || ip.IsLinkLocalMulticast() ||
		ip.IsInterfaceLocalMulticast() || ip.IsMulticast() || ip.IsUnspecified() {
		return true
	}
	for _, p := range internal {
		if p.Contains(ip) {
			return true
		}
	}
	return false
}

func (a *allowList) nameAllowed(host string) bool {
	host = strings.ToLower(strings.TrimSuffix(host, "."))
	for _, n := range a.names {
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

func (a *allowList) inNets(ip netip.Addr) bool {
	ip = ip.Unmap()
	for _, p := range a.nets {
		if p.Contains(ip) {
			return true
		}
	}
	return false
}

// permits reports whether an address may be dialled for host (a name, or
// the address itself), and if not, why.
func (a *allowList) permits(host string, ip netip.Addr) error {
	ip = ip.Unmap()
	switch {
	case a.inNets(ip):
		return nil
	case a.nameAllowed(host) && !reserved(ip):
		return nil
	case a.nameAllowed(host):
		return fmt.Errorf("%s resolves to %s, which is on this machine or a private network: only an allow-list entry of a network holding it (such as %s/32) opens it", host, ip, ip)
	}
	return fmt.Errorf("%s (%s) is %w", host, ip, errNotAllowed)
}

// hostAllowed is what can be known of a host before it is resolved: a
// name on the list, an address it permits, or a name the list's networks
// may hold once resolved.
func (a *allowList) hostAllowed(host string) error {
	if ip, err := netip.ParseAddr(strings.Trim(host, "[]")); err == nil {
		return a.permits(host, ip)
	}
	if a.nameAllowed(host) || len(a.nets) > 0 {
		return nil
	}
	return fmt.Errorf("%s is %w", host, errNotAllowed)
}

// resolver resolves names; a test may replace it.
var resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
} = net.DefaultResolver

// dial connects to addr only where the list permits, checking each
// address the name resolves to and connecting to that very address.
func (a *allowList) dial(ctx context.Context, d *net.Dialer, network, addr string) (net.Conn, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	var ips []netip.Addr
	if ip, err := netip.ParseAddr(host); err == nil {
		ips = []netip.Addr{ip}
	} else if ips, err = resolver.LookupNetIP(ctx, "ip", host); err != nil {
		return nil, err
	}
	var last error
	for _, ip := range ips {
		if err := a.permits(host, ip); err != nil {
			last = err
			continue
		}
		c, err := d.DialContext(ctx, network, net.JoinHostPort(ip.Unmap().String(), port))
		if err == nil {
			return c, nil
		}
		last = err
	}
	if last == nil {
		last = fmt.Errorf("%s: no address", host)
	}
	return nil, last
}
