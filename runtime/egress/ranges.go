package egress

import (
	"net/netip"
	"slices"
)

// Range is a block of addresses no host name opens: a machine's own
// (loopback, unspecified), its networks' (private, link-local, shared
// address space), a cloud's metadata service, and addresses that are
// not a single host on the internet (multicast, reserved, documentation).
type Range struct {
	Prefix netip.Prefix
	// What says in words what the addresses are.
	What string
}

// forbidden lists the blocks; a narrower block inside a wider one (a
// metadata address inside link-local) is listed too, so an entry opening
// the wider block does not open it.
var forbidden = func() []Range {
	var out []Range
	for _, r := range []struct{ prefix, what string }{
		{"0.0.0.0/8", "an unspecified address (this host)"},
		{"10.0.0.0/8", "a private address"},
		{"100.64.0.0/10", "a shared (carrier-grade NAT) address"},
		{"100.100.100.200/32", "a cloud metadata address"},
		{"127.0.0.0/8", "a loopback address"},
		{"169.254.0.0/16", "a link-local address"},
		{"169.254.169.254/32", "a cloud metadata address"},
		{"172.16.0.0/12", "a private address"},
		{"192.0.0.0/24", "an address of the IETF's protocol assignments"},
		{"192.0.2.0/24", "a documentation address"},
		{"192.88.99.0/24", "a 6to4 relay address"},
		{"192.168.0.0/16", "a private address"},
		{"198.18.0.0/15", "a benchmarking address"},
		{"198.51.100.0/24", "a documentation address"},
		{"203.0.113.0/24", "a documentation address"},
		{"224.0.0.0/4", "a multicast address"},
		{"240.0.0.0/4", "a reserved or broadcast address"},

		{"::/128", "an unspecified address (this host)"},
		{"::1/128", "a loopback address"},
		{"::/96", "an IPv4-compatible address (deprecated)"},
		{"::ffff:0:0:0/96", "an IPv4-translated address"},
		{"64:ff9b:1::/48", "a local-use NAT64 address"},
		{"100::/64", "a discard address"},
		{"2001::/32", "a Teredo address"},
		{"2001:2::/48", "a benchmarking address"},
		{"2001:10::/28", "an ORCHID address"},
		{"2001:db8::/32", "a documentation address"},
		{"3fff::/20", "a documentation address"},
		{"fc00::/7", "a unique local (private) address"},
		{"fd00:ec2::254/128", "a cloud metadata address"},
		{"fe80::/10", "a link-local address"},
		{"fec0::/10", "a site-local address (deprecated)"},
		{"ff00::/8", "a multicast address"},
	} {
		out = append(out, Range{Prefix: netip.MustParsePrefix(r.prefix), What: r.what})
	}
	return out
}()

// embedding are the IPv6 blocks whose addresses carry an IPv4 address
// and reach it (through a NAT64 gateway or a 6to4 relay): such an
// address is forbidden when the IPv4 address it carries is, as the
// block itself. (IPv4-mapped addresses are their IPv4 address, and
// IPv4-compatible ones are forbidden whole, above.)
var embedding = []struct {
	prefix netip.Prefix
	what   string
	// at is the offset of the IPv4 address in the IPv6 one.
	at int
}{
	{netip.MustParsePrefix("64:ff9b::/96"), "the NAT64 form of ", 12},
	{netip.MustParsePrefix("2002::/16"), "the 6to4 form of ", 2},
}

// Forbidden lists the blocks holding ip that no host name opens, the
// narrowest last; none for an address of the internet. An IPv4-mapped
// IPv6 address is its IPv4 address; an IPv6 address carrying a forbidden
// IPv4 address (NAT64, 6to4) is in its carrying block.
func Forbidden(ip netip.Addr) []Range {
	ip = ip.WithZone("").Unmap()
	var out []Range
	for _, r := range forbidden {
		if r.Prefix.Contains(ip) {
			out = append(out, r)
		}
	}
	if ip.Is6() {
		b := ip.As16()
		for _, e := range embedding {
			if !e.prefix.Contains(ip) {
				continue
			}
			v4 := netip.AddrFrom4([4]byte(b[e.at : e.at+4]))
			if in := Forbidden(v4); len(in) > 0 {
				out = append(out, Range{Prefix: e.prefix, What: e.what + in[len(in)-1].What})
			}
		}
	}
	// narrowest last: the reason named is the most specific
	slices.SortStableFunc(out, func(a, b Range) int { return a.Prefix.Bits() - b.Prefix.Bits() })
	return out
}
