package memory

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/trellisflow/trellis/runtime/store"
)

// voiceCatalog is the memory store's store.VoiceCatalog.
type voiceCatalog struct {
	mu       sync.Mutex
	key      *store.SigningKeyRecord
	sessions map[string]*store.VoiceSessionRecord
}

func cloneKey(k *store.SigningKeyRecord) *store.SigningKeyRecord {
	cp := *k
	cp.Secret = slices.Clone(k.Secret)
	return &cp
}

func cloneSession(v *store.VoiceSessionRecord) *store.VoiceSessionRecord {
	cp := *v
	return &cp
}

// VoiceSigningKey implements store.VoiceCatalog.
func (s *Store) VoiceSigningKey(_ context.Context, create *store.SigningKeyRecord) (*store.SigningKeyRecord, error) {
	v := &s.voice
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.key == nil {
		if create == nil {
			return nil, store.ErrNotFound
		}
		v.key = cloneKey(create)
	}
	return cloneKey(v.key), nil
}

// RotateVoiceSigningKey implements store.VoiceCatalog.
func (s *Store) RotateVoiceSigningKey(_ context.Context, k *store.SigningKeyRecord) error {
	v := &s.voice
	v.mu.Lock()
	defer v.mu.Unlock()
	v.key = cloneKey(k)
	return nil
}

// OpenVoiceSession implements store.VoiceCatalog.
func (s *Store) OpenVoiceSession(_ context.Context, rec *store.VoiceSessionRecord, replace string) (*store.VoiceSessionRecord, bool, error) {
	v := &s.voice
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.sessions == nil {
		v.sessions = map[string]*store.VoiceSessionRecord{}
	}
	if _, ok := v.sessions[rec.ID]; ok {
		return nil, false, store.ErrExists
	}
	now := rec.Created
	for id, o := range v.sessions {
		if o.Thread != rec.Thread {
			continue
		}
		switch {
		case !o.Live(now):
			delete(v.sessions, id)
		case id == replace:
			o.Ended = now
			delete(v.sessions, id)
		default:
			return cloneSession(o), false, nil
		}
	}
	v.sessions[rec.ID] = cloneSession(rec)
	return cloneSession(rec), true, nil
}

// VoiceSession implements store.VoiceCatalog.
func (s *Store) VoiceSession(_ context.Context, id string) (*store.VoiceSessionRecord, error) {
	v := &s.voice
	v.mu.Lock()
	defer v.mu.Unlock()
	o, ok := v.sessions[id]
	if !ok {
		return nil, store.ErrNotFound
	}
	return cloneSession(o), nil
}

// LiveVoiceSession implements store.VoiceCatalog.
func (s *Store) LiveVoiceSession(_ context.Context, tenant, thread string, now time.Time) (*store.VoiceSessionRecord, error) {
	v := &s.voice
	v.mu.Lock()
	defer v.mu.Unlock()
	for _, o := range v.sessions {
		if o.Tenant == tenant && o.Thread == thread && o.Live(now) {
			return cloneSession(o), nil
		}
	}
	return nil, store.ErrNotFound
}

// RenewVoiceSession implements store.VoiceCatalog.
func (s *Store) RenewVoiceSession(_ context.Context, id string, now, expires time.Time) (*store.VoiceSessionRecord, error) {
	v := &s.voice
	v.mu.Lock()
	defer v.mu.Unlock()
	o, ok := v.sessions[id]
	if !ok || !o.Live(now) {
		return nil, store.ErrNotFound
	}
	if expires.After(o.Deadline) {
		expires = o.Deadline
	}
	if expires.After(o.Expires) {
		o.Expires = expires
	}
	o.Renewed = now
	return cloneSession(o), nil
}

// AdmitVoiceCaller implements store.VoiceCatalog.
func (s *Store) AdmitVoiceCaller(_ context.Context, id, from, identity, key string, at time.Time) error {
	v := &s.voice
	v.mu.Lock()
	defer v.mu.Unlock()
	o, ok := v.sessions[id]
	if !ok || !o.Live(at) {
		return store.ErrNotFound
	}
	if o.Caller != from {
		return store.ErrVoiceCallerChanged
	}
	o.Caller, o.CallerAt, o.CallerKey = identity, at, key
	return nil
}

// EndVoiceSession implements store.VoiceCatalog.
func (s *Store) EndVoiceSession(_ context.Context, id string, at time.Time) error {
	v := &s.voice
	v.mu.Lock()
	defer v.mu.Unlock()
	o, ok := v.sessions[id]
	if !ok {
		return store.ErrNotFound
	}
	if o.Ended.IsZero() {
		o.Ended = at
	}
	return nil
}

var _ store.VoiceCatalog = (*Store)(nil)

// forget deletes a thread's sessions.
func (v *voiceCatalog) forget(thread string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	for id, s := range v.sessions {
		if s.Thread == thread {
			delete(v.sessions, id)
		}
	}
}
