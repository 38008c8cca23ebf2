package store

import (
	"context"
	"errors"
	"time"
)

// VoiceCatalog keeps what a served runtime's voice sessions need beside
// the Catalog: the key the server signs its voice agents' grants with,
// and the sessions those grants belong to. A grant is good only while
// its session is, so ending a session (or replacing the signing key)
// ends its grant at once, on every server sharing the store. The
// built-in stores implement it, and storetest.RunVoiceCatalog is its
// conformance suite.
type VoiceCatalog interface {
	// VoiceSigningKey returns the current signing key. When there is
	// none, it records create as the current one and returns it (of two
	// servers racing, both get the one recorded first); with create nil
	// it fails with ErrNotFound.
	VoiceSigningKey(ctx context.Context, create *SigningKeyRecord) (*SigningKeyRecord, error)
	// RotateVoiceSigningKey makes k the current signing key in place of
	// the one before, which is forgotten: what it signed no longer
	// verifies.
	RotateVoiceSigningKey(ctx context.Context, k *SigningKeyRecord) error

	// OpenVoiceSession records v as its thread's live session unless the
	// thread has another live one at v.Created (one that has not ended
	// and expires after it): then it returns that one, and false. A live
	// session whose id is replace is ended at v.Created instead, and v
	// takes its place. The thread's sessions that have ended or expired
	// are forgotten.
	OpenVoiceSession(ctx context.Context, v *VoiceSessionRecord, replace string) (*VoiceSessionRecord, bool, error)
	// VoiceSession returns a session, live or not; ErrNotFound when the
	// store has none (or has forgotten it).
	VoiceSession(ctx context.Context, id string) (*VoiceSessionRecord, error)
	// LiveVoiceSession returns the thread's session that has not ended
	// and expires after now; ErrNotFound when there is none.
	LiveVoiceSession(ctx context.Context, tenant, thread string, now time.Time) (*VoiceSessionRecord, error)
	// RenewVoiceSession moves a live session's expiry to expires (never
	// past its deadline, nor back) and records now as its renewal; it
	// returns the session as it is then, or ErrNotFound when the session
	// has ended or expired by now.
	RenewVoiceSession(ctx context.Context, id string, now, expires time.Time) (*VoiceSessionRecord, error)
	// AdmitVoiceCaller gives a live session's caller place to identity,
	// admitted for the API key whose id is key, at at, if the place is
	// still held by from; ErrVoiceCallerChanged when it is held by another
	// by now, ErrNotFound when the session has ended or expired.
	AdmitVoiceCaller(ctx context.Context, id, from, identity, key string, at time.Time) error
	// EndVoiceSession ends a session at at (one already ended keeps its
	// end); ErrNotFound when there is none.
	EndVoiceSession(ctx context.Context, id string, at time.Time) error
}

// ErrVoiceCallerChanged: AdmitVoiceCaller found the caller's place held
// by another than the caller expected.
var ErrVoiceCallerChanged = errors.New("the voice session's caller changed")

// SigningKeyRecord is a key the server signs voice agents' grants with.
// Its secret is kept in the store (servers sharing the store verify each
// other's grants), never derived from another service's secret.
type SigningKeyRecord struct {
	ID      string
	Secret  []byte
	Created time.Time
}

// VoiceSessionRecord is a thread's voice session: the room's agent
// acts for the thread with a grant that is good while the session is.
type VoiceSessionRecord struct {
	ID     string
	Tenant string
	// Thread is the thread's key; ThreadCreated when it was created, so
	// that a thread deleted and created again under the same name is not
	// this session's.
	Thread        string
	ThreadCreated time.Time
	// KeyHash is the hash of the API key that opened the session:
	// revoking that key ends the grant.
	KeyHash string
	// SigningKey is the id of the key the grant was signed with.
	SigningKey string
	Created    time.Time
	// Expires is when the grant lapses unless its agent renews it;
	// Deadline is past where no renewal goes.
	Expires, Deadline time.Time
	// Renewed is the agent's latest renewal (zero: none yet).
	Renewed time.Time
	// Caller is the identity that holds the session's caller place, since
	// CallerAt, admitted for the API key whose id is CallerKey: the
	// identity is that key's while it holds the place ("": a session
	// recorded before keys were, whose caller is nobody's).
	Caller    string
	CallerAt  time.Time
	CallerKey string
	// Ended is when the session ended (zero: it has not).
	Ended time.Time
}

// Live reports whether the session is good at now.
func (v *VoiceSessionRecord) Live(now time.Time) bool {
	return v.Ended.IsZero() && now.Before(v.Expires)
}

// VoiceCatalogOf returns st's VoiceCatalog.
func VoiceCatalogOf(st Store) (VoiceCatalog, bool) {
	v, ok := st.(VoiceCatalog)
	return v, ok
}
