package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// Memory keeps what flows remember across threads: JSON documents, each
// under a namespace (a tuple of names, such as candidates/u-42/questions)
// and a key, with the time it was last written and an optional expiry.
// A namespace prefix lists the documents under it, and a text query finds
// those whose string values hold every word of it (full-text search:
// SQLite's FTS5, PostgreSQL's tsvector). The built-in stores implement
// it, and storetest.RunMemory is its conformance suite.
//
// Every document belongs to a tenant, as the Catalog's records do: a
// read names the tenant and sees none of another tenant's documents.
//
// Words are runs of letters and digits, compared in lower case, whole
// (no stemming): "design" finds "Design" and "design." but not
// "designs". An expired document is never returned; a put deletes the
// expired ones.
type Memory interface {
	// PutMemory writes it (Namespace, Key, Value, Updated and Expires;
	// zero Expires: it never expires), replacing the document under the
	// same namespace and key.
	PutMemory(ctx context.Context, tenant string, it *MemoryItem) error
	// GetMemory returns the document under ns and key unless it expired
	// by now; ErrNotFound when there is none.
	GetMemory(ctx context.Context, tenant string, ns []string, key string, now time.Time) (*MemoryItem, error)
	// DeleteMemory deletes the document under ns and key; ErrNotFound
	// when there is none.
	DeleteMemory(ctx context.Context, tenant string, ns []string, key string) error
	// SearchMemory lists the documents under q.Prefix not expired by
	// q.Now: without q.Text, most recently updated first; with it, only
	// those holding every word of it, most relevant first (Score).
	SearchMemory(ctx context.Context, tenant string, q MemoryQuery) ([]*MemoryItem, error)
	// MemoryNamespaces lists the namespaces under q.Prefix that hold a
	// document not expired by q.Now, in order (q.Text is not used).
	MemoryNamespaces(ctx context.Context, tenant string, q MemoryQuery) ([][]string, error)
}

// MemoryItem is one remembered document.
type MemoryItem struct {
	Namespace []string
	Key       string
	// Value is the document, as JSON.
	Value   json.RawMessage
	Updated time.Time
	// Expires is when it is forgotten (zero: never).
	Expires time.Time
	// Score is how well a search's text matched (higher is better; only
	// comparable within one search of one store).
	Score float64
	// Unindexed, as it is put, keeps the document's words out of the
	// full-text index: a search with text never finds it, a search
	// without text, a get and a namespace's listing do, and the put
	// costs no index update. It is how it is written, not part of the
	// document: what a store reads back never has it set.
	Unindexed bool
}

// IndexedText is what full-text search indexes of the document: its
// words (MemoryText), or nothing when it is put Unindexed.
func (it *MemoryItem) IndexedText() string {
	if it.Unindexed {
		return ""
	}
	return MemoryText(it.Value)
}

// MemoryQuery selects documents for SearchMemory and namespaces for
// MemoryNamespaces.
type MemoryQuery struct {
	// Prefix is the namespace prefix (none: every namespace).
	Prefix []string
	// Text, when set, keeps only the documents holding all its words.
	Text string
	// Limit caps how many are returned (0: DefaultMemoryLimit, at most
	// MaxMemoryLimit); Offset skips as many first.
	Limit, Offset int
	// Now is the time expiry is judged at.
	Now time.Time
}

// Bounds of memory documents and queries.
const (
	DefaultMemoryLimit = 10
	MaxMemoryLimit     = 1000
	// MaxNamespaceDepth is the most names a namespace has; a name and a
	// key are at most MaxMemoryName bytes.
	MaxNamespaceDepth = 16
	MaxMemoryName     = 256
	// MaxMemoryValue bounds a document's JSON, in bytes.
	MaxMemoryValue = 1 << 20
	// maxIndexedText bounds the words indexed of one document, in bytes,
	// and maxWord the length of an indexed word: PostgreSQL refuses a
	// tsvector over 1 MB and drops words over 2 KB.
	maxIndexedText = 256 << 10
	maxWord        = 100
)

// Errors of documents the stores refuse.
var (
	// ErrMemoryKey: a namespace or key that is not of the form
	// CheckMemoryKey allows.
	ErrMemoryKey = errors.New("invalid memory namespace or key")
	// ErrMemoryValue: a document CheckMemoryValue refuses.
	ErrMemoryValue = errors.New("invalid memory document")
)

// MemoryOf returns st's Memory.
func MemoryOf(st Store) (Memory, bool) {
	m, ok := st.(Memory)
	return m, ok
}

// CheckMemoryPrefix checks a namespace prefix: at most MaxNamespaceDepth
// names, each 1 to MaxMemoryName bytes of UTF-8 with no control
// characters.
func CheckMemoryPrefix(ns []string) error {
	if len(ns) > MaxNamespaceDepth {
		return fmt.Errorf("%w: a namespace has at most %d names, not %d", ErrMemoryKey, MaxNamespaceDepth, len(ns))
	}
	for i, name := range ns {
		if err := checkName(name); err != nil {
			return fmt.Errorf("%w: namespace name %d %s", ErrMemoryKey, i+1, err)
		}
	}
	return nil
}

// CheckMemoryKey checks a document's namespace (1 to MaxNamespaceDepth
// names) and key, each 1 to MaxMemoryName bytes of UTF-8 with no control
// characters.
func CheckMemoryKey(ns []string, key string) error {
	if len(ns) == 0 {
		return fmt.Errorf("%w: a document's namespace has at least one name", ErrMemoryKey)
	}
	if err := CheckMemoryPrefix(ns); err != nil {
		return err
	}
	if err := checkName(key); err != nil {
		return fmt.Errorf("%w: key %s", ErrMemoryKey, err)
	}
	return nil
}

func checkName(s string) error {
	switch {
	case s == "":
		return errors.New("is empty")
	case len(s) > MaxMemoryName:
		return fmt.Errorf("is %d bytes long, over %d", len(s), MaxMemoryName)
	case !utf8.ValidString(s):
		return errors.New("is not UTF-8")
	case strings.IndexFunc(s, unicode.IsControl) >= 0:
		return fmt.Errorf("%q holds a control character", s)
	}
	return nil
}

// CheckMemoryValue checks a document before it is written: JSON of at
// most MaxMemoryValue bytes.
func CheckMemoryValue(v json.RawMessage) error {
	if len(v) > MaxMemoryValue {
		return fmt.Errorf("%w: it is %d bytes of JSON, over %d", ErrMemoryValue, len(v), MaxMemoryValue)
	}
	if !json.Valid(v) {
		return fmt.Errorf("%w: it is not valid JSON", ErrMemoryValue)
	}
	return nil
}

// namespaceSep ends each name of an encoded namespace. Names hold no
// control character, so one namespace is a prefix of another's encoding
// exactly when it is a prefix of its names.
const namespaceSep = "\x1f"

// EncodeNamespace is the stored form of a namespace: each name followed
// by U+001F. Its byte order is the names' order, name by name.
func EncodeNamespace(ns []string) string {
	var b strings.Builder
	for _, name := range ns {
		b.WriteString(name)
		b.WriteString(namespaceSep)
	}
	return b.String()
}

// DecodeNamespace reverses EncodeNamespace.
func DecodeNamespace(s string) []string {
	names := strings.Split(s, namespaceSep)
	return names[:len(names)-1]
}

// NamespaceRange is the range of encoded namespaces under a prefix:
// from lo (inclusive) to hi (exclusive); both are empty for the empty
// prefix, which is every namespace.
func NamespaceRange(prefix []string) (lo, hi string) {
	if len(prefix) == 0 {
		return "", ""
	}
	lo = EncodeNamespace(prefix)
	return lo, lo[:len(lo)-1] + "\x20"
}

// MemoryLimit is q's limit as the stores apply it.
func (q MemoryQuery) MemoryLimit() int {
	switch {
	case q.Limit <= 0:
		return DefaultMemoryLimit
	case q.Limit > MaxMemoryLimit:
		return MaxMemoryLimit
	}
	return q.Limit
}

// MemoryWords splits text into the words full-text search compares: runs
// of letters and digits, in lower case; words longer than 100 bytes are
// dropped.
func MemoryWords(text string) []string {
	var words []string
	for w := range strings.FieldsFuncSeq(text, func(r rune) bool { return !unicode.IsLetter(r) && !unicode.IsDigit(r) }) {
		if len(w) <= maxWord {
			words = append(words, strings.ToLower(w))
		}
	}
	return words
}

// MemoryText is what full-text search indexes of a document: the words
// of its string values (object keys excluded), space-separated, up to
// 256 KiB.
func MemoryText(v json.RawMessage) string {
	var doc any
	if err := json.Unmarshal(v, &doc); err != nil {
		return ""
	}
	var b strings.Builder
	var walk func(any) bool
	walk = func(x any) bool {
		switch x := x.(type) {
		case string:
			for _, w := range MemoryWords(x) {
				if b.Len()+len(w)+1 > maxIndexedText {
					return false
				}
				if b.Len() > 0 {
					b.WriteByte(' ')
				}
				b.WriteString(w)
			}
		case []any:
			for _, e := range x {
				if !walk(e) {
					return false
				}
			}
		case map[string]any:
			for _, k := range sortedFields(x) {
				if !walk(x[k]) {
					return false
				}
			}
		}
		return true
	}
	walk(doc)
	return b.String()
}
