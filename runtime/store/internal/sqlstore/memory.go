package sqlstore

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/trellisflow/trellis/runtime/store"
)

// Memory implements store.Memory on the memory_items table of the SQL
// stores' migrations: a document's namespace is stored encoded
// (store.EncodeNamespace), so a prefix is a range of the primary key;
// its indexed words (store.MemoryItem.IndexedText: none for a document
// put unindexed) are stored beside it, for the database's full-text
// index, which holds only the documents with words. Times are Unix
// nanoseconds, zero as 0.
type Memory struct {
	DB      DB
	Dialect Dialect
}

// Dialect says whose full-text search a Memory queries.
type Dialect int

const (
	// SQLite searches the FTS5 table memory_fts, ranked by bm25.
	SQLite Dialect = iota
	// Postgres searches the tsvector column search, ranked by ts_rank.
	Postgres
)

const memoryColumns = `namespace, key, value, updated_at, expires_at`

func scanMemory(r Rows, score bool) (*store.MemoryItem, error) {
	var it store.MemoryItem
	var ns, value string
	var updated, expires int64
	dest := []any{&ns, &it.Key, &value, &updated, &expires}
	if score {
		dest = append(dest, &it.Score)
	}
	if err := r.Scan(dest...); err != nil {
		return nil, err
	}
	it.Namespace, it.Value = store.DecodeNamespace(ns), json.RawMessage(value)
	it.Updated, it.Expires = fromNanos(updated), fromNanos(expires)
	return &it, nil
}

// PutMemory implements store.Memory. It first deletes the documents
// expired by the put's time, of every tenant.
func (m Memory) PutMemory(ctx context.Context, tenant string, it *store.MemoryItem) error {
	if err := store.CheckMemoryKey(it.Namespace, it.Key); err != nil {
		return err
	}
	if err := store.CheckMemoryValue(it.Value); err != nil {
		return err
	}
	if _, err := m.DB.Exec(ctx, `DELETE FROM memory_items WHERE expires_at <> 0 AND expires_at <= ?`, nanos(it.Updated)); err != nil {
		return err
	}
	_, err := m.DB.Exec(ctx, `INSERT INTO memory_items (tenant, namespace, key, value, body, updated_at, expires_at)
		VALUES (?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (tenant, namespace, key) DO UPDATE SET value = excluded.value, body = excluded.body,
			updated_at = excluded.updated_at, expires_at = excluded.expires_at`,
		tenant, store.EncodeNamespace(it.Namespace), it.Key, string(it.Value), it.IndexedText(), nanos(it.Updated), nanos(it.Expires))
	return err
}

// PutMemories writes a step's documents (store.Checkpoint.Memory) on db,
// in the step's transaction: checked first, so that a document the store
// refuses fails the commit before anything is written.
func PutMemories(ctx context.Context, db DB, d Dialect, puts []store.MemoryPut) error {
	if err := CheckMemories(puts); err != nil {
		return err
	}
	m := Memory{DB: db, Dialect: d}
	for _, p := range puts {
		if err := m.PutMemory(ctx, p.Tenant, p.Item); err != nil {
			return fmt.Errorf("memory %v %q: %w", p.Item.Namespace, p.Item.Key, err)
		}
	}
	return nil
}

// CheckMemories checks a step's documents as PutMemory does.
func CheckMemories(puts []store.MemoryPut) error {
	for _, p := range puts {
		if err := store.CheckMemoryKey(p.Item.Namespace, p.Item.Key); err != nil {
			return err
		}
		if err := store.CheckMemoryValue(p.Item.Value); err != nil {
			return err
		}
	}
	return nil
}

// MemoryColumns are a step's documents as the columns of memory_items,
// one array each (tenant, namespace, key, value, body, updated_at,
// expires_at), the last put of a document only; and the time the
// expired documents are deleted by (the newest put's).
func MemoryColumns(puts []store.MemoryPut) (cols [7]any, now int64) {
	type docKey struct{ tenant, ns, key string }
	last := map[docKey]int{}
	for i, p := range puts {
		last[docKey{p.Tenant, EncodeNS(p.Item.Namespace), p.Item.Key}] = i
	}
	var tenants, nss, keys, values, bodies []string
	var updated, expires []int64
	for i, p := range puts {
		ns := EncodeNS(p.Item.Namespace)
		if last[docKey{p.Tenant, ns, p.Item.Key}] != i {
			continue
		}
		tenants, nss, keys = append(tenants, p.Tenant), append(nss, ns), append(keys, p.Item.Key)
		values, bodies = append(values, string(p.Item.Value)), append(bodies, p.Item.IndexedText())
		updated, expires = append(updated, nanos(p.Item.Updated)), append(expires, nanos(p.Item.Expires))
		now = max(now, nanos(p.Item.Updated))
	}
	return [7]any{tenants, nss, keys, values, bodies, updated, expires}, now
}

// EncodeNS is store.EncodeNamespace.
func EncodeNS(ns []string) string { return store.EncodeNamespace(ns) }

// GetMemory implements store.Memory.
func (m Memory) GetMemory(ctx context.Context, tenant string, ns []string, key string, now time.Time) (*store.MemoryItem, error) {
	if err := store.CheckMemoryKey(ns, key); err != nil {
		return nil, err
	}
	var it *store.MemoryItem
	err := one(ctx, m.DB, func(r Rows) (err error) { it, err = scanMemory(r, false); return err },
		`SELECT `+memoryColumns+` FROM memory_items
		WHERE tenant = ? AND namespace = ? AND key = ? AND (expires_at = 0 OR expires_at > ?)`,
		tenant, store.EncodeNamespace(ns), key, nanos(now))
	return it, err
}

// DeleteMemory implements store.Memory.
func (m Memory) DeleteMemory(ctx context.Context, tenant string, ns []string, key string) error {
	if err := store.CheckMemoryKey(ns, key); err != nil {
		return err
	}
	n, err := m.DB.Exec(ctx, `DELETE FROM memory_items WHERE tenant = ? AND namespace = ? AND key = ?`,
		tenant, store.EncodeNamespace(ns), key)
	if err == nil && n == 0 {
		err = store.ErrNotFound
	}
	return err
}

// under is the condition on a query's tenant, prefix and expiry, with its
// arguments; col qualifies the columns.
func under(col, tenant string, q store.MemoryQuery) (string, []any) {
	cond := col + `tenant = ? AND (` + col + `expires_at = 0 OR ` + col + `expires_at > ?)`
	args := []any{tenant, nanos(q.Now)}
	if lo, hi := store.NamespaceRange(q.Prefix); lo != "" {
		cond += ` AND ` + col + `namespace >= ? AND ` + col + `namespace < ?`
		args = append(args, lo, hi)
	}
	return cond, args
}

// SearchMemory implements store.Memory.
func (m Memory) SearchMemory(ctx context.Context, tenant string, q store.MemoryQuery) ([]*store.MemoryItem, error) {
	if err := store.CheckMemoryPrefix(q.Prefix); err != nil {
		return nil, err
	}
	words := store.MemoryWords(q.Text)
	if len(words) == 0 && strings.TrimSpace(q.Text) != "" {
		return nil, nil // a text of no words matches nothing
	}
	var query string
	var args []any
	switch {
	case len(words) == 0:
		cond, cargs := under("", tenant, q)
		query = `SELECT ` + memoryColumns + `, CAST(0 AS REAL) FROM memory_items WHERE ` + cond +
			` ORDER BY updated_at DESC, namespace, key LIMIT ? OFFSET ?`
		args = cargs
	case m.Dialect == SQLite:
		// each word quoted: a string, never FTS5 syntax (words are
		// letters and digits)
		cond, cargs := under("m.", tenant, q)
		query = `SELECT m.namespace, m.key, m.value, m.updated_at, m.expires_at, -bm25(memory_fts)
			FROM memory_fts JOIN memory_items m ON m.id = memory_fts.rowid
			WHERE memory_fts MATCH ? AND ` + cond + `
			ORDER BY 6 DESC, m.namespace, m.key LIMIT ? OFFSET ?`
		args = append([]any{`"` + strings.Join(words, `" "`) + `"`}, cargs...)
	default:
		cond, cargs := under("", tenant, q)
		query = `SELECT ` + memoryColumns + `, ts_rank(search, to_tsquery('simple', ?))
			FROM memory_items WHERE search @@ to_tsquery('simple', ?) AND ` + cond + `
			ORDER BY 6 DESC, namespace, key LIMIT ? OFFSET ?`
		tsq := strings.Join(words, " & ")
		args = append([]any{tsq, tsq}, cargs...)
	}
	args = append(args, q.MemoryLimit(), max(q.Offset, 0))
	rows, err := m.DB.Query(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []*store.MemoryItem
	for rows.Next() {
		it, err := scanMemory(rows, true)
		if err != nil {
			return nil, err
		}
		out = append(out, it)
	}
	return out, rows.Err()
}

// MemoryNamespaces implements store.Memory.
func (m Memory) MemoryNamespaces(ctx context.Context, tenant string, q store.MemoryQuery) ([][]string, error) {
	if err := store.CheckMemoryPrefix(q.Prefix); err != nil {
		return nil, err
	}
	cond, args := under("", tenant, q)
	rows, err := m.DB.Query(ctx, `SELECT DISTINCT namespace FROM memory_items WHERE `+cond+
		` ORDER BY namespace LIMIT ? OFFSET ?`, append(args, q.MemoryLimit(), max(q.Offset, 0))...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out [][]string
	for rows.Next() {
		var ns string
		if err := rows.Scan(&ns); err != nil {
			return nil, err
		}
		out = append(out, store.DecodeNamespace(ns))
	}
	return out, rows.Err()
}

var _ store.Memory = Memory{}
