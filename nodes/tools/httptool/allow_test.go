package httptool

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"
)

// fakeResolver answers names from a table.
type fakeResolver map[string][]string

func (f fakeResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	var out []netip.Addr
	for _, a := range f[host] {
		out = append(out, netip.MustParseAddr(a))
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no such host %s", host)
	}
	return out, nil
}

// The allow-list is judged on the address a name resolves to: a name on
// it reaches public addresses, never this machine's or a private
// network's unless a network entry holds the address; nothing else is
// reached, and an empty list reaches nothing.
func TestAllowList(t *testing.T) {
	cases := []struct {
		entries []string
		host    string
		ip      string
		ok      bool
		why     string
	}{
		{[]string{"api.example.com"}, "api.example.com", "93.184.216.34", true, ""},
		{[]string{"api.example.com"}, "evil.example.com", "93.184.216.34", false, "not on the tool's allow-list"},
		{[]string{"*.example.com"}, "a.b.example.com", "93.184.216.34", true, ""},
		{[]string{"*.example.com"}, "example.com", "93.184.216.34", false, "not on"},
		{[]string{"api.example.com"}, "api.example.com", "127.0.0.1", false, "on this machine or a private network"},
		{[]string{"localhost"}, "localhost", "::1", false, "on this machine or a private network"},
		{[]string{"api.example.com"}, "api.example.com", "10.1.2.3", false, "private network"},
		{[]string{"api.example.com"}, "api.example.com", "169.254.169.254", false, "private network"},
		{[]string{"api.example.com"}, "api.example.com", "::ffff:127.0.0.1", false, "private network"},
		{[]string{"api.example.com"}, "api.example.com", "100.64.1.1", false, "private network"},
		{[]string{"localhost", "127.0.0.0/8"}, "localhost", "127.0.0.1", true, ""},
		{[]string{"10.0.0.0/8"}, "svc.internal", "10.9.9.9", true, ""},
		{[]string{"10.0.0.0/8"}, "svc.internal", "11.0.0.1", false, "not on"},
		{nil, "api.example.com", "93.184.216.34", false, "not on"},
	}
	for _, tc := range cases {
		a, err := parseAllow(tc.entries)
		if err != nil {
			t.Fatal(err)
		}
		err = a.permits(tc.host, netip.MustParseAddr(tc.ip))
		if tc.ok != (err == nil) || err != nil && !strings.Contains(err.Error(), tc.why) {
			t.Errorf("%v: %s at %s: %v", tc.entries, tc.host, tc.ip, err)
		}
	}
	for _, bad := range []string{"http://x", "a b", "user@host", "*", ""} {
		if _, err := parseAllow([]string{bad}); err == nil {
			t.Errorf("entry %q was taken", bad)
		}
	}
}

// The address dialled is the one checked: a name on the list that
// resolves to this machine is refused at the connection, while the same
// server reached through a network entry answers.
func TestDialChecksTheAddressDialled(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "ok") }))
	defer srv.Close()
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(srv.URL, "http://"))
	old := resolver
	resolver = fakeResolver{"rebound.example.com": {"127.0.0.1"}}
	defer func() { resolver = old }()

	byName, _ := parseAllow([]string{"rebound.example.com"})
	_, err := byName.client(5 * time.Second).Get("http://rebound.example.com:" + port + "/")
	if err == nil || !strings.Contains(err.Error(), "on this machine or a private network") {
		t.Fatalf("a name resolving to loopback was dialled: %v", err)
	}
	byNet, _ := parseAllow([]string{"rebound.example.com", "127.0.0.1/32"})
	resp, err := byNet.client(5 * time.Second).Get("http://rebound.example.com:" + port + "/")
	if err != nil {
		t.Fatalf("the network entry opens it: %v", err)
	}
	resp.Body.Close()
	none, _ := parseAllow(nil)
	if _, err := none.client(5 * time.Second).Get(srv.URL); err == nil || !errors.Is(err, errNotAllowed) {
		t.Fatalf("an empty list reached %s: %v", srv.URL, err)
	}
}

// A URL's host is known at load when no action writes it.
func TestLiteralHost(t *testing.T) {
	cases := map[string]string{
		"https://api.example.com/v1?q={{.args.q}}": "api.example.com",
		"https://api.example.com":                  "api.example.com",
		"https://{{.config.host}}/v1":              "",
		"https://api.example.com{{.args.path}}":    "",
		"http://[::1]:8080/x":                      "::1",
		"{{.config.base}}/x":                       "",
	}
	for in, want := range cases {
		got, ok := literalHost(in)
		if got != want || ok != (want != "") {
			t.Errorf("%s: %q %v", in, got, ok)
		}
	}
}
