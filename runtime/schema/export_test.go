package schema

import "encoding/json"

// ForgetCompiled empties the process's compiled schemas, as a new process
// starts; TrustedCompiles counts the compiles that skipped the
// metaschema; CanTrust reports whether the library lets them.
func ForgetCompiled() {
	compiledMu.Lock()
	compiledBy = map[string]*compiled{}
	compiledMu.Unlock()
}

func TrustedCompiles() int64 { return trustedCompiles.Load() }

func CanTrust() bool { return trusted != nil }

// NoteName is the name of the note a valid schema leaves.
func NoteName(url string, raw any) string {
	b, _ := json.Marshal(raw)
	return noteName(url + "\x00" + string(b))
}

// FastValid reports whether the fast check alone finds x valid.
func FastValid(s *Shape, x any) bool { return s.exact && fastCheck(s, x) }
