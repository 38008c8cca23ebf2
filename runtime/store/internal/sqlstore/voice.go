package sqlstore

import (
	"context"
	"encoding/hex"
	"errors"
	"time"

	"github.com/trellisflow/trellis/runtime/store"
)

// The voice catalog (store.VoiceCatalog) lives in the voice_signing_key
// and voice_sessions tables of the SQL stores' migrations. The signing
// key table has one row (slot 1); times are Unix nanoseconds, zero as 0.

// VoiceSigningKey implements store.VoiceCatalog.
func (c Catalog) VoiceSigningKey(ctx context.Context, create *store.SigningKeyRecord) (*store.SigningKeyRecord, error) {
	k, err := signingKey(ctx, c.DB)
	if !errors.Is(err, store.ErrNotFound) || create == nil {
		return k, err
	}
	// of two servers creating it at once, the second's insert fails and
	// it reads the first's
	if err := c.insert(ctx, `INSERT INTO voice_signing_key (slot, id, secret, created_at) VALUES (1, ?, ?, ?)`,
		create.ID, hex.EncodeToString(create.Secret), nanos(create.Created)); err != nil && !errors.Is(err, store.ErrExists) {
		return nil, err
	}
	return signingKey(ctx, c.DB)
}

func signingKey(ctx context.Context, db DB) (*store.SigningKeyRecord, error) {
	var k store.SigningKeyRecord
	var secret string
	var created int64
	err := one(ctx, db, func(r Rows) error { return r.Scan(&k.ID, &secret, &created) },
		`SELECT id, secret, created_at FROM voice_signing_key WHERE slot = 1`)
	if err != nil {
		return nil, err
	}
	if k.Secret, err = hex.DecodeString(secret); err != nil {
		return nil, err
	}
	k.Created = fromNanos(created)
	return &k, nil
}

// RotateVoiceSigningKey implements store.VoiceCatalog.
func (c Catalog) RotateVoiceSigningKey(ctx context.Context, k *store.SigningKeyRecord) error {
	_, err := c.DB.Exec(ctx, `INSERT INTO voice_signing_key (slot, id, secret, created_at) VALUES (1, ?, ?, ?)
		ON CONFLICT (slot) DO UPDATE SET id = excluded.id, secret = excluded.secret, created_at = excluded.created_at`,
		k.ID, hex.EncodeToString(k.Secret), nanos(k.Created))
	return err
}

const voiceColumns = `id, tenant, thread, thread_created, key_hash, signing_key, created_at, expires_at, deadline,
	renewed_at, caller, caller_at, ended_at, caller_key`

func scanVoiceSession(r Rows) (*store.VoiceSessionRecord, error) {
	var v store.VoiceSessionRecord
	var threadCreated, created, expires, deadline, renewed, callerAt, ended int64
	if err := r.Scan(&v.ID, &v.Tenant, &v.Thread, &threadCreated, &v.KeyHash, &v.SigningKey, &created, &expires, &deadline,
		&renewed, &v.Caller, &callerAt, &ended, &v.CallerKey); err != nil {
		return nil, err
	}
	v.ThreadCreated, v.Created, v.Expires, v.Deadline = fromNanos(threadCreated), fromNanos(created), fromNanos(expires), fromNanos(deadline)
	v.Renewed, v.CallerAt, v.Ended = fromNanos(renewed), fromNanos(callerAt), fromNanos(ended)
	return &v, nil
}

func voiceSession(ctx context.Context, db DB, where string, args ...any) (*store.VoiceSessionRecord, error) {
	var v *store.VoiceSessionRecord
	err := one(ctx, db, func(r Rows) (err error) { v, err = scanVoiceSession(r); return err },
		`SELECT `+voiceColumns+` FROM voice_sessions WHERE `+where, args...)
	return v, err
}

// forgetVoiceAfter is how long a dead session is kept before any
// session opened forgets it (a thread's own dead sessions go at once).
const forgetVoiceAfter = 24 * time.Hour

// OpenVoiceSession implements store.VoiceCatalog.
func (c Catalog) OpenVoiceSession(ctx context.Context, v *store.VoiceSessionRecord, replace string) (*store.VoiceSessionRecord, bool, error) {
	var out *store.VoiceSessionRecord
	created := false
	err := c.DB.Tx(ctx, func(db DB) error {
		if err := db.LockThread(ctx, "voice:"+v.Thread); err != nil {
			return err
		}
		now := nanos(v.Created)
		if _, err := db.Exec(ctx, `DELETE FROM voice_sessions WHERE (thread = ? AND (ended_at <> 0 OR expires_at <= ? OR id = ?))
			OR expires_at < ? OR (ended_at <> 0 AND ended_at < ?)`,
			v.Thread, now, replace, now-int64(forgetVoiceAfter), now-int64(forgetVoiceAfter)); err != nil {
			return err
		}
		live, err := voiceSession(ctx, db, `thread = ? ORDER BY created_at DESC LIMIT 1`, v.Thread)
		if err == nil {
			out = live
			return nil
		}
		if !errors.Is(err, store.ErrNotFound) {
			return err
		}
		_, err = db.Exec(ctx, `INSERT INTO voice_sessions (`+voiceColumns+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
			v.ID, v.Tenant, v.Thread, nanos(v.ThreadCreated), v.KeyHash, v.SigningKey, nanos(v.Created), nanos(v.Expires), nanos(v.Deadline),
			nanos(v.Renewed), v.Caller, nanos(v.CallerAt), nanos(v.Ended), v.CallerKey)
		if err != nil {
			if db.Unique(err) {
				return store.ErrExists
			}
			return err
		}
		cp := *v
		out, created = &cp, true
		return nil
	})
	if err != nil {
		return nil, false, err
	}
	return out, created, nil
}

// VoiceSession implements store.VoiceCatalog.
func (c Catalog) VoiceSession(ctx context.Context, id string) (*store.VoiceSessionRecord, error) {
	return voiceSession(ctx, c.DB, `id = ?`, id)
}

// LiveVoiceSession implements store.VoiceCatalog.
func (c Catalog) LiveVoiceSession(ctx context.Context, tenant, thread string, now time.Time) (*store.VoiceSessionRecord, error) {
	return voiceSession(ctx, c.DB, `tenant = ? AND thread = ? AND ended_at = 0 AND expires_at > ? ORDER BY created_at DESC LIMIT 1`,
		tenant, thread, nanos(now))
}

// RenewVoiceSession implements store.VoiceCatalog.
func (c Catalog) RenewVoiceSession(ctx context.Context, id string, now, expires time.Time) (*store.VoiceSessionRecord, error) {
	exp := nanos(expires)
	n, err := c.DB.Exec(ctx, `UPDATE voice_sessions SET renewed_at = ?, expires_at = CASE
			WHEN ? > deadline THEN (CASE WHEN deadline > expires_at THEN deadline ELSE expires_at END)
			WHEN ? > expires_at THEN ?
			ELSE expires_at END
		WHERE id = ? AND ended_at = 0 AND expires_at > ?`, nanos(now), exp, exp, exp, id, nanos(now))
	if err != nil {
		return nil, err
	}
	if n == 0 {
		return nil, store.ErrNotFound
	}
	return c.VoiceSession(ctx, id)
}

// AdmitVoiceCaller implements store.VoiceCatalog.
func (c Catalog) AdmitVoiceCaller(ctx context.Context, id, from, identity, key string, at time.Time) error {
	n, err := c.DB.Exec(ctx, `UPDATE voice_sessions SET caller = ?, caller_at = ?, caller_key = ? WHERE id = ? AND caller = ? AND ended_at = 0 AND expires_at > ?`,
		identity, nanos(at), key, id, from, nanos(at))
	if err != nil || n > 0 {
		return err
	}
	v, err := c.VoiceSession(ctx, id)
	if err != nil {
		return err
	}
	if !v.Live(at) {
		return store.ErrNotFound
	}
	return store.ErrVoiceCallerChanged
}

// EndVoiceSession implements store.VoiceCatalog.
func (c Catalog) EndVoiceSession(ctx context.Context, id string, at time.Time) error {
	n, err := c.DB.Exec(ctx, `UPDATE voice_sessions SET ended_at = ? WHERE id = ? AND ended_at = 0`, nanos(at), id)
	if err != nil || n > 0 {
		return err
	}
	_, err = c.VoiceSession(ctx, id)
	return err
}

var _ store.VoiceCatalog = Catalog{}
