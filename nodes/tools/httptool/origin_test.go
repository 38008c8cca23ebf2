package httptool

import "testing"

// A URL's origin is known at load when no action writes its host.
func TestLiteralOrigin(t *testing.T) {
	cases := map[string]string{
		"https://api.example.com/v1?q={{.args.q}}": "https://api.example.com",
		"https://api.example.com":                  "https://api.example.com",
		"https://{{.config.host}}/v1":              "",
		"https://api.example.com{{.args.path}}":    "",
		"http://[::1]:8080/x":                      "http://[::1]:8080",
		"{{.config.base}}/x":                       "",
	}
	for in, want := range cases {
		got, ok := literalOrigin(in)
		if got != want || ok != (want != "") {
			t.Errorf("%s: %q %v", in, got, ok)
		}
	}
}
