package store

// Unregister forgets a scheme that Register made known, so that a test
// registering a scheme of its own leaves the registry as it found it and
// can run again in the same process (go test -count=N). Only tests have
// it: a program's schemes are registered once, from init functions.
func Unregister(scheme string) {
	registryMu.Lock()
	defer registryMu.Unlock()
	delete(openers, scheme)
}
