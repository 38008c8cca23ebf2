package egress_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/trellisflow/trellis/runtime/egress"
	"github.com/trellisflow/trellis/runtime/egress/egresstest"
)

// Every special-purpose block is forbidden, in each form an IPv6
// address can carry an IPv4 one in, and the internet's addresses are
// not.
func TestForbidden(t *testing.T) {
	cases := map[string]string{
		"127.0.0.1":                   "loopback",
		"127.255.255.254":             "loopback",
		"0.0.0.0":                     "unspecified",
		"10.1.2.3":                    "private",
		"172.31.255.255":              "private",
		"192.168.0.1":                 "private",
		"100.64.0.1":                  "shared",
		"100.100.100.200":             "metadata",
		"169.254.1.1":                 "link-local",
		"169.254.169.254":             "metadata",
		"224.0.0.251":                 "multicast",
		"255.255.255.255":             "broadcast",
		"198.18.0.1":                  "benchmarking",
		"::":                          "unspecified",
		"::1":                         "loopback",
		"::ffff:127.0.0.1":            "loopback",
		"::ffff:169.254.169.254":      "metadata",
		"::ffff:10.0.0.1":             "private",
		"::127.0.0.1":                 "IPv4-compatible",
		"::8.8.8.8":                   "IPv4-compatible",
		"64:ff9b::7f00:1":             "NAT64 form of a loopback",
		"64:ff9b::a9fe:a9fe":          "NAT64 form of a cloud metadata",
		"64:ff9b:1::1":                "local-use NAT64",
		"2002:7f00:1::1":              "6to4 form of a loopback",
		"2002:a00:1::":                "6to4 form of a private",
		"2001:0:4136:e378::1":         "Teredo",
		"fd00:ec2::254":               "metadata",
		"fd12:3456::1":                "unique local",
		"fe80::1":                     "link-local",
		"fe80::1%eth0":                "link-local",
		"ff02::1":                     "multicast",
		"2001:db8::1":                 "documentation",
		"8.8.8.8":                     "",
		"1.1.1.1":                     "",
		"2606:4700:4700::1111":        "",
		"::ffff:8.8.8.8":              "",
		"64:ff9b::808:808":            "",
		"2002:808:808::1":             "",
		"172.32.0.1":                  "",
		"100.128.0.1":                 "",
		"2600:1f18:7a3f:a700::6":      "",
		"::ffff:100.100.100.200":      "metadata",
		"64:ff9b::6464:64c8":          "NAT64 form of a cloud metadata",
		"2002:a9fe:a9fe::":            "6to4 form of a cloud metadata",
		"::ffff:0:7f00:1":             "IPv4-translated",
		"fec0::1":                     "site-local",
		"100::1":                      "discard",
		"3fff::1":                     "documentation",
		"2001:2::1":                   "benchmarking",
		"2001:10::1":                  "ORCHID",
		"192.0.2.1":                   "documentation",
		"192.88.99.1":                 "6to4 relay",
		"240.0.0.1":                   "reserved",
		"ff05::1:3":                   "multicast",
		"fc00::1":                     "unique local",
		"::ffff:192.168.1.1":          "private",
		"64:ff9b::c0a8:101":           "NAT64 form of a private",
		"2002:c0a8:101::":             "6to4 form of a private",
		"::ffff:0.0.0.0":              "unspecified",
		"2001:4860:4860::8888":        "",
		"2a00:1450:4001:82b::200e":    "",
		"64:ff9b::1.1.1.1":            "",
		"2002:0101:0101:0:0:0:0:0001": "",
	}
	for addr, want := range cases {
		in := egress.Forbidden(netip.MustParseAddr(addr))
		switch {
		case want == "" && len(in) > 0:
			t.Errorf("%s: forbidden as %s", addr, in[len(in)-1].What)
		case want != "" && len(in) == 0:
			t.Errorf("%s: not forbidden, want %s", addr, want)
		case want != "" && !strings.Contains(in[len(in)-1].What, want):
			t.Errorf("%s: %s, want %s", addr, in[len(in)-1].What, want)
		}
	}
}

// A forbidden block opens only to an address or network entry inside
// it; a host name never opens one, nor does a wider network.
func TestOnlyAnEntryInsideABlockOpensIt(t *testing.T) {
	cases := []struct {
		allow []string
		addr  string
		ok    bool
	}{
		{[]string{"0.0.0.0/0"}, "8.8.8.8", true},
		{[]string{"0.0.0.0/0"}, "127.0.0.1", false},
		{[]string{"0.0.0.0/0", "::/0"}, "::ffff:127.0.0.1", false},
		{[]string{"::/0"}, "64:ff9b::7f00:1", false},
		{[]string{"::/0"}, "64:ff9b::808:808", true},
		{[]string{"127.0.0.1"}, "127.0.0.1", true},
		{[]string{"127.0.0.1"}, "::ffff:127.0.0.1", true},
		{[]string{"127.0.0.1"}, "127.0.0.2", false},
		{[]string{"127.0.0.0/8"}, "127.0.0.2", true},
		{[]string{"::ffff:127.0.0.0/104"}, "127.9.9.9", true},
		{[]string{"10.0.0.0/7"}, "10.1.1.1", false},
		{[]string{"10.0.0.0/8"}, "10.1.1.1", true},
		{[]string{"10.0.0.0/8"}, "11.1.1.1", false},
		{[]string{"169.254.0.0/16"}, "169.254.1.1", true},
		{[]string{"169.254.0.0/16"}, "169.254.169.254", false},
		{[]string{"169.254.169.254"}, "169.254.169.254", true},
		{[]string{"100.64.0.0/10"}, "100.100.100.200", false},
		{[]string{"fc00::/7"}, "fd12::1", true},
		{[]string{"fc00::/7"}, "fd00:ec2::254", false},
		{[]string{"::1"}, "::1", true},
		{[]string{"::1"}, "127.0.0.1", false},
		{[]string{"64:ff9b::7f00:1"}, "64:ff9b::7f00:1", true},
		{[]string{"8.8.8.0/24"}, "8.8.8.8", true},
		{[]string{"8.8.8.0/24"}, "8.8.4.4", false},
		{[]string{"hooks.example.com"}, "8.8.8.8", false},
		{nil, "8.8.8.8", false},
	}
	for _, c := range cases {
		p, err := egress.Parse(c.allow)
		if err != nil {
			t.Fatal(err)
		}
		err = p.CheckAddr(netip.MustParseAddr(c.addr))
		if (err == nil) != c.ok || err != nil && !errors.Is(err, egress.ErrDenied) {
			t.Errorf("allow %v, %s: %v", c.allow, c.addr, err)
		}
	}
}

// Every bad entry is reported at once, each by its text.
func TestParseReportsEveryBadEntry(t *testing.T) {
	bad := []string{"http://x", "localhost", "*.localhost", "a..b", "hooks.example.com:443", "fe80::1%eth0", "bücher.de", "*", "", "a/b"}
	_, err := egress.Parse(append([]string{"hooks.example.com", "*.example.org", "10.0.0.0/8", "::1"}, bad...))
	if err == nil {
		t.Fatal("bad entries taken")
	}
	for _, b := range bad {
		if !strings.Contains(err.Error(), `"`+b+`"`) {
			t.Errorf("%q not reported: %v", b, err)
		}
	}
	for _, want := range []string{"127.0.0.1", "xn--"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("no advice %q: %v", want, err)
		}
	}
	p, err := egress.Parse([]string{" Hooks.Example.COM. ", "*.example.org", "10.1.2.3/8", "::ffff:10.0.0.0/104"})
	if err != nil || p.String() != "hooks.example.com,*.example.org,10.0.0.0/8,10.0.0.0/8" {
		t.Fatalf("%v %v", p, err)
	}
}

// A URL is checked as far as it can be without resolving its host.
func TestCheckURL(t *testing.T) {
	cases := []struct {
		allow []string
		url   string
		ok    bool
	}{
		{nil, "http://127.0.0.1:9/h", false},
		{[]string{"127.0.0.1"}, "http://127.0.0.1:9/h", true},
		{[]string{"127.0.0.0/8"}, "http://127.0.0.2:9/h", true},
		{[]string{"10.0.0.0/8"}, "http://127.0.0.1:9/h", false},
		{[]string{"0.0.0.0/0"}, "http://127.0.0.1:9/h", false},
		{[]string{"0.0.0.0/0", "::/0"}, "http://[::ffff:127.0.0.1]:9/h", false},
		{[]string{"0.0.0.0/0", "::/0"}, "http://[::ffff:7f00:1]:9/h", false},
		{[]string{"0.0.0.0/0"}, "http://0.0.0.0:9/h", false},
		{[]string{"0.0.0.0/0"}, "http://169.254.169.254/latest/meta-data", false},
		{[]string{"hooks.example.com"}, "https://hooks.example.com/h", true},
		{[]string{"hooks.example.com"}, "https://HOOKS.example.com./h", true},
		{[]string{"hooks.example.com"}, "https://evil.example.com/h", false},
		{[]string{"*.example.com"}, "https://a.b.example.com/h", true},
		{[]string{"*.example.com"}, "https://example.com.evil.net/h", false},
		{[]string{"hooks.example.com"}, "http://127.0.0.1/h", false},
		{[]string{"hooks.example.com"}, "http://localhost/h", false},
		{[]string{"hooks.example.com", "10.0.0.0/8"}, "http://a.localhost/h", false},
		{[]string{"127.0.0.1"}, "http://localhost:9/h", true},
		{[]string{"::1"}, "http://localhost:9/h", true},
		{[]string{"127.0.0.1"}, "ftp://127.0.0.1/h", false},
		{[]string{"127.0.0.1"}, "http://user:pw@127.0.0.1/h", false},
		{[]string{"127.0.0.1"}, "/relative", false},
		{[]string{"127.0.0.1"}, "http:127.0.0.1", false},
		{[]string{"10.0.0.0/8"}, "https://anything.example.net/h", true}, // it may resolve into the network: checked on connecting
	}
	for _, c := range cases {
		p, err := egress.Parse(c.allow)
		if err != nil {
			t.Fatal(err)
		}
		if err := p.CheckURL(c.url); (err == nil) != c.ok {
			t.Errorf("allow %v, %s: %v", c.allow, c.url, err)
		}
	}
}

// A name on the list that resolves to a forbidden address (a DNS
// server its owner controls, answering 127.0.0.1 or the metadata
// address) reaches nothing; the same name with the address explicitly
// on the list does, so the refusal is the policy's, not the resolver's.
func TestHostNameNeverOpensForbiddenAddresses(t *testing.T) {
	var hits atomic.Int64
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits.Add(1) }))
	defer recv.Close()
	port := recv.URL[strings.LastIndex(recv.URL, ":"):]
	dns := egresstest.NewDNS(t, netip.MustParseAddr("127.0.0.1"))
	post := func(allow []string, url string) (*http.Response, error) {
		p, err := egress.Parse(allow)
		if err != nil {
			t.Fatal(err)
		}
		p.Resolver = dns.Resolver()
		if err := p.CheckURL(url); err != nil {
			t.Fatalf("%s refused before connecting: %v", url, err)
		}
		return p.Client(10*time.Second).Post(url, "application/json", strings.NewReader("{}"))
	}
	url := "http://a.hooks.customer.test" + port + "/h"
	_, err := post([]string{"*.hooks.customer.test"}, url)
	if !errors.Is(err, egress.ErrDenied) || !strings.Contains(err.Error(), "resolves to 127.0.0.1, a loopback address, which no host name opens") {
		t.Fatalf("a listed name resolving to loopback: %v", err)
	}
	for _, a := range []string{"169.254.169.254", "10.0.0.1"} {
		dns.Answer(netip.MustParseAddr(a))
		if _, err := post([]string{"*.hooks.customer.test", "0.0.0.0/0"}, url); !errors.Is(err, egress.ErrDenied) || !strings.Contains(err.Error(), a) {
			t.Fatalf("a listed name resolving to %s: %v", a, err)
		}
	}
	dns.Answer(netip.MustParseAddr("::ffff:127.0.0.1"), netip.MustParseAddr("::1"))
	if _, err := post([]string{"*.hooks.customer.test"}, url); !errors.Is(err, egress.ErrDenied) {
		t.Fatalf("a listed name resolving to loopback's IPv6 forms: %v", err)
	}
	if hits.Load() != 0 {
		t.Fatal("a forbidden address was connected to")
	}
	if len(dns.Asked()) == 0 {
		t.Fatal("the test's DNS server was never asked")
	}
	dns.Answer(netip.MustParseAddr("127.0.0.1"))
	resp, err := post([]string{"*.hooks.customer.test", "127.0.0.1"}, url)
	if err != nil || resp.StatusCode != 200 || hits.Load() != 1 {
		t.Fatalf("the name with its address opened explicitly: %v %v", resp, err)
	}
	// a name that is not on the list reaches only the list's networks
	if _, err := post([]string{"10.0.0.0/8"}, url); !errors.Is(err, egress.ErrDenied) || hits.Load() != 1 {
		t.Fatalf("a name resolving outside the networks: %v", err)
	}
}

// The client follows no redirect, reaches this machine through
// localhost only when loopback is listed, and an empty policy nothing.
func TestClient(t *testing.T) {
	var hits atomic.Int64
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits.Add(1) }))
	defer recv.Close()
	port := recv.URL[strings.LastIndex(recv.URL, ":"):]
	redirect := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, recv.URL, http.StatusTemporaryRedirect)
	}))
	defer redirect.Close()
	post := func(allow []string, url string) (*http.Response, error) {
		p, err := egress.Parse(allow)
		if err != nil {
			t.Fatal(err)
		}
		return p.Client(10*time.Second).Post(url, "application/json", strings.NewReader("{}"))
	}
	if _, err := post(nil, recv.URL); !errors.Is(err, egress.ErrDenied) {
		t.Fatalf("the empty list: %v", err)
	}
	if _, err := post([]string{"0.0.0.0/0", "::/0"}, "http://localhost"+port); !errors.Is(err, egress.ErrDenied) {
		t.Fatalf("localhost with every public address listed: %v", err)
	}
	if _, err := post([]string{"0.0.0.0/0"}, "http://[::ffff:127.0.0.1]"+port); !errors.Is(err, egress.ErrDenied) {
		t.Fatalf("loopback as an IPv4-mapped address: %v", err)
	}
	if hits.Load() != 0 {
		t.Fatal("a refused address was connected to")
	}
	resp, err := post([]string{"127.0.0.1"}, "http://localhost"+port)
	if err != nil || resp.StatusCode != 200 || hits.Load() != 1 {
		t.Fatalf("localhost, allowed by its address: %v %v", resp, err)
	}
	resp, err = post([]string{"127.0.0.1"}, redirect.URL)
	if err != nil || resp.StatusCode != http.StatusTemporaryRedirect || hits.Load() != 1 {
		t.Fatalf("a redirect: %v %v, %d hits", resp, err, hits.Load())
	}
}
