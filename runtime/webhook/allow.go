package webhook

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"time"
)

// AllowList is where webhooks may be sent: host names, and networks of
// addresses. A URL is allowed when its host is a name on the list (or
// under a *.name on it), whatever it resolves to, or when the addresses
// it resolves to, or the literal address it is, lie in a network on the
// list; the address connected to is the one checked, so a name that
// resolves elsewhere by the time of the connection reaches nothing it
// should not. The empty list allows nothing.
type AllowList struct {
	names []string
	nets  []netip.Prefix
}

// ErrNotAllowed is an address the allow-list does not permit.
var ErrNotAllowed = errors.New("not on the server's webhook allow-list")

// ParseAllowList reads the entries of an allow-list: a host name
// (hooks.example.com), every name under a domain (*.example.com), an
// address (127.0.0.1, ::1) or a network (10.0.0.0/8, fd00::/8).
func ParseAllowList(entries []string) (*AllowList, error) {
	a := &AllowList{}
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
		if name == "" || strings.ContainsAny(name, "/:*@ ") {
			return nil, fmt.Errorf("webhook allow-list entry %q: want a host name, *.domain, an address or a network such as 10.0.0.0/8", e)
		}
		a.names = append(a.names, e)
	}
	return a, nil
}

// Empty reports whether the list allows nothing.
func (a *AllowList) Empty() bool { return a == nil || len(a.names) == 0 && len(a.nets) == 0 }

// String lists the entries.
func (a *AllowList) String() string {
	var out []string
	if a != nil {
		out = append(out, a.names...)
		for _, p := range a.nets {
			out = append(out, p.String())
		}
	}
	return strings.Join(out, ",")
}

func (a *AllowList) nameAllowed(host string) bool {
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

func (a *AllowList) addrAllowed(ip netip.Addr) bool {
	ip = ip.Unmap()
	for _, p := range a.nets {
		if p.Contains(ip) {
			return true
		}
	}
	return false
}

// CheckURL checks a webhook's address as far as it can without resolving
// it: an absolute http or https URL with no user information, whose host
// is a name on the list, an address in a network on it, or a name the
// list's networks may hold once it is resolved (checked on connecting).
func (a *AllowList) CheckURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Errorf("webhook %q: %w", raw, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" || u.Host == "" {
		return fmt.Errorf("webhook %q: want an absolute http or https URL", raw)
	}
	if u.User != nil {
		return fmt.Errorf("webhook %q: user information in the address is not sent", raw)
	}
	if a.Empty() {
		return fmt.Errorf("webhook %q: %w (it is empty: this server sends no webhooks)", raw, ErrNotAllowed)
	}
	host := u.Hostname()
	if ip, err := netip.ParseAddr(host); err == nil {
		if !a.addrAllowed(ip) {
			return fmt.Errorf("webhook %q: %s is %w", raw, ip, ErrNotAllowed)
		}
		return nil
	}
	if !a.nameAllowed(host) && len(a.nets) == 0 {
		return fmt.Errorf("webhook %q: %s is %w", raw, host, ErrNotAllowed)
	}
	return nil
}

// dial connects to addr only as the list allows: a name on it as it
// resolves, anything else only at an address in a network on it (the
// address checked is the one dialled).
func (a *AllowList) dial(ctx context.Context, d *net.Dialer, network, addr string) (net.Conn, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	if a.Empty() {
		return nil, fmt.Errorf("%s: %w", host, ErrNotAllowed)
	}
	if a.nameAllowed(host) {
		return d.DialContext(ctx, network, addr)
	}
	var ips []netip.Addr
	if ip, err := netip.ParseAddr(host); err == nil {
		ips = []netip.Addr{ip}
	} else if ips, err = net.DefaultResolver.LookupNetIP(ctx, "ip", host); err != nil {
		return nil, err
	}
	var last error
	for _, ip := range ips {
		if !a.addrAllowed(ip) {
			last = fmt.Errorf("%s (%s) is %w", host, ip.Unmap(), ErrNotAllowed)
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

// Client returns an HTTP client that connects only where the list
// allows, through no proxy, follows no redirect (a redirect is an
// answer that is not 2xx), and gives up on a request after timeout.
func (a *AllowList) Client(timeout time.Duration) *http.Client {
	d := &net.Dialer{Timeout: timeout}
	tr := &http.Transport{
		Proxy: nil,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			return a.dial(ctx, d, network, addr)
		},
		TLSHandshakeTimeout:   timeout,
		ResponseHeaderTimeout: timeout,
		MaxIdleConnsPerHost:   4,
		IdleConnTimeout:       time.Minute,
	}
	return &http.Client{Transport: tr, Timeout: timeout,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}
