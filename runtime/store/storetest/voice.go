package storetest

import (
	"bytes"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/trellisflow/trellis/runtime/store"
)

// RunVoiceCatalog runs the suite of store.VoiceCatalog; open returns an
// empty store for each subtest.
func RunVoiceCatalog(t *testing.T, open func(t *testing.T) store.Store) {
	tests := []struct {
		name string
		fn   func(t *testing.T, v store.VoiceCatalog)
	}{
		{"SigningKey", testVoiceSigningKey},
		{"ConcurrentSigningKeys", testVoiceConcurrentSigningKeys},
		{"OneLiveSessionPerThread", testVoiceOneLive},
		{"ConcurrentOpens", testVoiceConcurrentOpens},
		{"Renewal", testVoiceRenewal},
		{"Caller", testVoiceCaller},
		{"End", testVoiceEnd},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			st := open(t)
			t.Cleanup(func() { st.Close() })
			v, ok := store.VoiceCatalogOf(st)
			if !ok {
				t.Fatalf("%T keeps no voice catalog", st)
			}
			tc.fn(t, v)
		})
	}
}

// instant is a time with nanoseconds, which the stores keep exactly.
func instant(s int) time.Time { return time.Date(2026, 3, 1, 12, 0, s, 123456789, time.UTC) }

func voiceSession(id, thread string, created, expires time.Time) *store.VoiceSessionRecord {
	return &store.VoiceSessionRecord{ID: id, Tenant: "acme", Thread: "acme/" + thread, ThreadCreated: instant(0), KeyHash: "hash-" + id,
		SigningKey: "k1", Created: created, Expires: expires, Deadline: created.Add(time.Hour), Caller: "caller-" + id, CallerAt: created, CallerKey: "key-" + id}
}

func testVoiceSigningKey(t *testing.T, v store.VoiceCatalog) {
	if _, err := v.VoiceSigningKey(ctx, nil); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("the key of a new store: %v", err)
	}
	k1 := &store.SigningKeyRecord{ID: "k1", Secret: []byte{0, 1, 2, 254, 255}, Created: instant(1)}
	got, err := v.VoiceSigningKey(ctx, k1)
	if err != nil || !reflect.DeepEqual(got, k1) {
		t.Fatalf("created: %+v %v", got, err)
	}
	got, err = v.VoiceSigningKey(ctx, &store.SigningKeyRecord{ID: "k2", Secret: []byte("other"), Created: instant(2)})
	if err != nil || got.ID != "k1" || !bytes.Equal(got.Secret, k1.Secret) {
		t.Fatalf("a second creation replaced the key: %+v %v", got, err)
	}
	k3 := &store.SigningKeyRecord{ID: "k3", Secret: []byte("rotated secret"), Created: instant(3)}
	if err := v.RotateVoiceSigningKey(ctx, k3); err != nil {
		t.Fatal(err)
	}
	if got, err := v.VoiceSigningKey(ctx, nil); err != nil || !reflect.DeepEqual(got, k3) {
		t.Fatalf("after rotation: %+v %v", got, err)
	}
}

// testVoiceConcurrentSigningKeys: servers creating the first key at once
// all end up with the same one.
func testVoiceConcurrentSigningKeys(t *testing.T, v store.VoiceCatalog) {
	const n = 8
	ids := make([]string, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			k, err := v.VoiceSigningKey(ctx, &store.SigningKeyRecord{ID: fmt.Sprint("k", i), Secret: []byte{byte(i)}, Created: instant(i)})
			errs[i] = err
			if err == nil {
				ids[i] = k.ID
			}
		}()
	}
	wg.Wait()
	for i := range n {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		if ids[i] != ids[0] {
			t.Fatalf("servers disagree on the key: %v", ids)
		}
	}
}

func testVoiceOneLive(t *testing.T, v store.VoiceCatalog) {
	s1 := voiceSession("s1", "t", instant(10), instant(70))
	got, created, err := v.OpenVoiceSession(ctx, s1, "")
	if err != nil || !created || !reflect.DeepEqual(got, s1) {
		t.Fatalf("first session: %+v %v %v", got, created, err)
	}
	if back, err := v.VoiceSession(ctx, "s1"); err != nil || !reflect.DeepEqual(back, s1) {
		t.Fatalf("read back: %+v, want %+v (%v)", back, s1, err)
	}
	// a second session on the thread gets the live one
	got, created, err = v.OpenVoiceSession(ctx, voiceSession("s2", "t", instant(20), instant(80)), "")
	if err != nil || created || got.ID != "s1" {
		t.Fatalf("a second session while s1 lives: %+v %v %v", got, created, err)
	}
	if _, err := v.VoiceSession(ctx, "s2"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("the refused session was recorded: %v", err)
	}
	// replacing a session that is not the live one gets the live one
	if got, created, err := v.OpenVoiceSession(ctx, voiceSession("s2", "t", instant(20), instant(80)), "s0"); err != nil || created || got.ID != "s1" {
		t.Fatalf("replacing another: %+v %v %v", got, created, err)
	}
	// another thread has its own
	if _, created, err := v.OpenVoiceSession(ctx, voiceSession("o1", "other", instant(20), instant(80)), ""); err != nil || !created {
		t.Fatalf("another thread's session: %v %v", created, err)
	}
	// the live one replaced: ended, and the new one lives
	got, created, err = v.OpenVoiceSession(ctx, voiceSession("s3", "t", instant(30), instant(90)), "s1")
	if err != nil || !created || got.ID != "s3" {
		t.Fatalf("replacing s1: %+v %v %v", got, created, err)
	}
	if old, err := v.VoiceSession(ctx, "s1"); err == nil && old.Live(instant(31)) {
		t.Fatalf("the replaced session still lives: %+v", old)
	}
	live, err := v.LiveVoiceSession(ctx, "acme", "acme/t", instant(31))
	if err != nil || live.ID != "s3" {
		t.Fatalf("the live session: %+v %v", live, err)
	}
	if _, err := v.LiveVoiceSession(ctx, "globex", "acme/t", instant(31)); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("another tenant sees the session: %v", err)
	}
	if _, err := v.LiveVoiceSession(ctx, "acme", "acme/t", instant(90)); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("a session at its expiry is live: %v", err)
	}
	// once it expired, a new session opens without replacing it
	if got, created, err := v.OpenVoiceSession(ctx, voiceSession("s4", "t", instant(95), instant(150)), ""); err != nil || !created || got.ID != "s4" {
		t.Fatalf("after expiry: %+v %v %v", got, created, err)
	}
	if _, _, err := v.OpenVoiceSession(ctx, voiceSession("o1", "third", instant(96), instant(150)), ""); !errors.Is(err, store.ErrExists) {
		t.Fatalf("a session id used twice: %v", err)
	}
}

// testVoiceConcurrentOpens: servers opening a thread's session at once
// agree on one.
func testVoiceConcurrentOpens(t *testing.T, v store.VoiceCatalog) {
	const n = 8
	got := make([]string, n)
	made := make([]bool, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, created, err := v.OpenVoiceSession(ctx, voiceSession(fmt.Sprint("s", i), "t", instant(10), instant(70)), "")
			errs[i], made[i] = err, created
			if err == nil {
				got[i] = s.ID
			}
		}()
	}
	wg.Wait()
	created := 0
	for i := range n {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		if made[i] {
			created++
		}
		if got[i] != got[0] {
			t.Fatalf("servers disagree on the session: %v", got)
		}
	}
	if created != 1 {
		t.Fatalf("%d sessions created for one thread at once", created)
	}
}

func testVoiceRenewal(t *testing.T, v store.VoiceCatalog) {
	s := voiceSession("s1", "t", instant(0), instant(60)) // deadline instant(0)+1h
	if _, _, err := v.OpenVoiceSession(ctx, s, ""); err != nil {
		t.Fatal(err)
	}
	got, err := v.RenewVoiceSession(ctx, "s1", instant(30), instant(90))
	if err != nil || !got.Expires.Equal(instant(90)) || !got.Renewed.Equal(instant(30)) {
		t.Fatalf("renewed: %+v %v", got, err)
	}
	// never back
	if got, err := v.RenewVoiceSession(ctx, "s1", instant(40), instant(50)); err != nil || !got.Expires.Equal(instant(90)) || !got.Renewed.Equal(instant(40)) {
		t.Fatalf("renewed to an earlier expiry: %+v %v", got, err)
	}
	// never past the deadline
	if got, err := v.RenewVoiceSession(ctx, "s1", instant(50), instant(0).Add(3*time.Hour)); err != nil || !got.Expires.Equal(s.Deadline) {
		t.Fatalf("renewed past the deadline: %+v %v", got, err)
	}
	if _, err := v.RenewVoiceSession(ctx, "s1", s.Deadline, s.Deadline.Add(time.Minute)); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("a session renewed at its deadline: %v", err)
	}
	if _, err := v.RenewVoiceSession(ctx, "nope", instant(1), instant(2)); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("an unknown session renewed: %v", err)
	}
	e := voiceSession("e1", "u", instant(0), instant(60))
	if _, _, err := v.OpenVoiceSession(ctx, e, ""); err != nil {
		t.Fatal(err)
	}
	if err := v.EndVoiceSession(ctx, "e1", instant(10)); err != nil {
		t.Fatal(err)
	}
	if _, err := v.RenewVoiceSession(ctx, "e1", instant(20), instant(80)); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("an ended session renewed: %v", err)
	}
}

func testVoiceCaller(t *testing.T, v store.VoiceCatalog) {
	s := voiceSession("s1", "t", instant(0), instant(60))
	if _, _, err := v.OpenVoiceSession(ctx, s, ""); err != nil {
		t.Fatal(err)
	}
	if err := v.AdmitVoiceCaller(ctx, "s1", "someone", "bob", "key-b", instant(5)); !errors.Is(err, store.ErrVoiceCallerChanged) {
		t.Fatalf("admitting from a caller who does not hold the place: %v", err)
	}
	if got, err := v.VoiceSession(ctx, "s1"); err != nil || got.CallerKey != "key-s1" {
		t.Fatalf("the opener's key: %+v %v", got, err)
	}
	if err := v.AdmitVoiceCaller(ctx, "s1", s.Caller, "bob", "key-b", instant(5)); err != nil {
		t.Fatal(err)
	}
	got, err := v.VoiceSession(ctx, "s1")
	if err != nil || got.Caller != "bob" || !got.CallerAt.Equal(instant(5)) || got.CallerKey != "key-b" {
		t.Fatalf("after admitting bob: %+v %v", got, err)
	}
	if err := v.AdmitVoiceCaller(ctx, "s1", s.Caller, "carol", "key-c", instant(6)); !errors.Is(err, store.ErrVoiceCallerChanged) {
		t.Fatalf("a second admission from the first caller: %v", err)
	}
	if err := v.AdmitVoiceCaller(ctx, "s1", "bob", "carol", "key-c", instant(61)); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("admitting to an expired session: %v", err)
	}
}

func testVoiceEnd(t *testing.T, v store.VoiceCatalog) {
	if err := v.EndVoiceSession(ctx, "nope", instant(1)); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("ending an unknown session: %v", err)
	}
	if _, _, err := v.OpenVoiceSession(ctx, voiceSession("s1", "t", instant(0), instant(60)), ""); err != nil {
		t.Fatal(err)
	}
	if err := v.EndVoiceSession(ctx, "s1", instant(10)); err != nil {
		t.Fatal(err)
	}
	if err := v.EndVoiceSession(ctx, "s1", instant(20)); err != nil {
		t.Fatal(err)
	}
	got, err := v.VoiceSession(ctx, "s1")
	if err != nil || !got.Ended.Equal(instant(10)) || got.Live(instant(11)) {
		t.Fatalf("ended: %+v %v", got, err)
	}
	if _, err := v.LiveVoiceSession(ctx, "acme", "acme/t", instant(11)); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("an ended session is live: %v", err)
	}
	if _, created, err := v.OpenVoiceSession(ctx, voiceSession("s2", "t", instant(12), instant(60)), ""); err != nil || !created {
		t.Fatalf("a session after the end: %v %v", created, err)
	}
}
