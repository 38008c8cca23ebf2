package storetest

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/trellisflow/trellis/runtime/store"
)

// RunMemory runs the suite of store.Memory; open returns an empty store
// for each subtest.
func RunMemory(t *testing.T, open func(t *testing.T) store.Store) {
	tests := []struct {
		name string
		fn   func(t *testing.T, m store.Memory)
	}{
		{"PutGetReplaceDelete", testMemoryPutGet},
		{"TenantsApart", testMemoryTenants},
		{"PrefixListing", testMemoryPrefix},
		{"Namespaces", testMemoryNamespaces},
		{"Search", testMemorySearch},
		{"SearchRanks", testMemoryRanks},
		{"SearchAnyText", testMemoryAnyText},
		{"Unindexed", testMemoryUnindexed},
		{"Expiry", testMemoryExpiry},
		{"BadKeysAndValues", testMemoryBad},
		{"ConcurrentPuts", testMemoryConcurrent},
		{"PutWithStep", testMemoryWithStep},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			st := open(t)
			t.Cleanup(func() { st.Close() })
			m, ok := store.MemoryOf(st)
			if !ok {
				t.Fatalf("%T keeps no memory", st)
			}
			tc.fn(t, m)
		})
	}
}

func doc(ns []string, key, value string, updated time.Time) *store.MemoryItem {
	return &store.MemoryItem{Namespace: ns, Key: key, Value: json.RawMessage(value), Updated: updated}
}

func put(t *testing.T, m store.Memory, tenant string, it *store.MemoryItem) {
	t.Helper()
	if err := m.PutMemory(ctx, tenant, it); err != nil {
		t.Fatalf("put %v %q: %v", it.Namespace, it.Key, err)
	}
}

func sameJSON(a, b json.RawMessage) bool {
	var x, y any
	return json.Unmarshal(a, &x) == nil && json.Unmarshal(b, &y) == nil && reflect.DeepEqual(x, y)
}

// sameItem compares what a store returns with what was put, ignoring the
// score.
func sameItem(got, want *store.MemoryItem) error {
	switch {
	case got == nil:
		return errors.New("nothing returned")
	case !slices.Equal(got.Namespace, want.Namespace) || got.Key != want.Key:
		return fmt.Errorf("got %v %q, want %v %q", got.Namespace, got.Key, want.Namespace, want.Key)
	case !sameJSON(got.Value, want.Value):
		return fmt.Errorf("value %s, want %s", got.Value, want.Value)
	case !got.Updated.Equal(want.Updated) || !got.Expires.Equal(want.Expires):
		return fmt.Errorf("updated %v expires %v, want %v and %v", got.Updated, got.Expires, want.Updated, want.Expires)
	}
	return nil
}

// keys lists the namespace/key of each item, in order.
func keys(items []*store.MemoryItem) []string {
	out := make([]string, len(items))
	for i, it := range items {
		out[i] = strings.Join(it.Namespace, "/") + ":" + it.Key
	}
	return out
}

func search(t *testing.T, m store.Memory, tenant string, q store.MemoryQuery) []string {
	t.Helper()
	if q.Now.IsZero() {
		q.Now = instant(30)
	}
	items, err := m.SearchMemory(ctx, tenant, q)
	if err != nil {
		t.Fatalf("search %+v: %v", q, err)
	}
	return keys(items)
}

func testMemoryPutGet(t *testing.T, m store.Memory) {
	ns := []string{"candidates", "u-1", "questions"}
	if _, err := m.GetMemory(ctx, "acme", ns, "q1", instant(1)); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("get from an empty store: %v", err)
	}
	first := doc(ns, "q1", `{"text": "How did you design it?", "n": 12345678901234567, "tags": ["a", "b"], "none": null}`, instant(1))
	put(t, m, "acme", first)
	got, err := m.GetMemory(ctx, "acme", ns, "q1", instant(2))
	if err != nil {
		t.Fatal(err)
	}
	if err := sameItem(got, first); err != nil {
		t.Fatal(err)
	}
	// an integer beyond 2^53 comes back as it went in
	if !strings.Contains(string(got.Value), "12345678901234567") {
		t.Fatalf("the number was rounded: %s", got.Value)
	}
	// the store keeps its own copy
	first.Value[2] = 'X'
	if again, _ := m.GetMemory(ctx, "acme", ns, "q1", instant(2)); again == nil || !json.Valid(again.Value) {
		t.Fatalf("the stored document changed with the caller's: %v", again)
	}
	second := doc(ns, "q1", `"replaced"`, instant(3))
	put(t, m, "acme", second)
	if got, err = m.GetMemory(ctx, "acme", ns, "q1", instant(4)); err != nil || sameItem(got, second) != nil {
		t.Fatalf("after replacing: %+v %v", got, err)
	}
	// the same key in a longer or shorter namespace is another document
	if _, err := m.GetMemory(ctx, "acme", ns[:2], "q1", instant(4)); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("a shorter namespace: %v", err)
	}
	if err := m.DeleteMemory(ctx, "acme", ns, "q1"); err != nil {
		t.Fatal(err)
	}
	if _, err := m.GetMemory(ctx, "acme", ns, "q1", instant(4)); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("after delete: %v", err)
	}
	if err := m.DeleteMemory(ctx, "acme", ns, "q1"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("a second delete: %v", err)
	}
	if got := search(t, m, "acme", store.MemoryQuery{}); len(got) != 0 {
		t.Fatalf("after delete, listed %v", got)
	}
}

func testMemoryTenants(t *testing.T, m store.Memory) {
	ns := []string{"candidates", "u-1"}
	mine := doc(ns, "profile", `{"name": "Ada Lovelace"}`, instant(1))
	put(t, m, "acme", mine)
	if _, err := m.GetMemory(ctx, "globex", ns, "profile", instant(2)); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("another tenant reads it: %v", err)
	}
	for _, q := range []store.MemoryQuery{{}, {Prefix: ns}, {Text: "ada"}} {
		if got := search(t, m, "globex", q); len(got) != 0 {
			t.Fatalf("another tenant finds %v with %+v", got, q)
		}
	}
	if nss, err := m.MemoryNamespaces(ctx, "globex", store.MemoryQuery{Now: instant(2)}); err != nil || len(nss) != 0 {
		t.Fatalf("another tenant lists namespaces %v %v", nss, err)
	}
	if err := m.DeleteMemory(ctx, "globex", ns, "profile"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("another tenant deletes it: %v", err)
	}
	// the same namespace and key of another tenant is its own document
	theirs := doc(ns, "profile", `{"name": "Grace Hopper"}`, instant(2))
	put(t, m, "globex", theirs)
	if got, err := m.GetMemory(ctx, "acme", ns, "profile", instant(3)); err != nil || sameItem(got, mine) != nil {
		t.Fatalf("acme's after globex's put: %+v %v", got, err)
	}
	if got := search(t, m, "acme", store.MemoryQuery{Text: "grace"}); len(got) != 0 {
		t.Fatalf("acme finds globex's document: %v", got)
	}
}

func testMemoryPrefix(t *testing.T, m store.Memory) {
	for i, ns := range [][]string{{"a"}, {"a", "b"}, {"a", "bc"}, {"ab"}, {"a", "b", "c"}, {"b"}} {
		put(t, m, "acme", doc(ns, "k", `{"i": 1}`, instant(i)))
	}
	put(t, m, "acme", doc([]string{"a", "b"}, "j", `{}`, instant(6)))
	for _, c := range []struct {
		prefix []string
		want   []string
	}{
		// newest first
		{nil, []string{"a/b:j", "b:k", "a/b/c:k", "ab:k", "a/bc:k", "a/b:k", "a:k"}},
		{[]string{"a"}, []string{"a/b:j", "a/b/c:k", "a/bc:k", "a/b:k", "a:k"}},
		{[]string{"a", "b"}, []string{"a/b:j", "a/b/c:k", "a/b:k"}},
		{[]string{"a", "b", "c"}, []string{"a/b/c:k"}},
		{[]string{"ab"}, []string{"ab:k"}},
		{[]string{"c"}, []string{}},
	} {
		if got := search(t, m, "acme", store.MemoryQuery{Prefix: c.prefix, Limit: 100}); !slices.Equal(got, c.want) {
			t.Errorf("prefix %v: %v, want %v", c.prefix, got, c.want)
		}
	}
	// pages
	if got := search(t, m, "acme", store.MemoryQuery{Prefix: []string{"a"}, Limit: 2, Offset: 1}); !slices.Equal(got, []string{"a/b/c:k", "a/bc:k"}) {
		t.Errorf("a page: %v", got)
	}
	if got := search(t, m, "acme", store.MemoryQuery{Prefix: []string{"a"}, Offset: 5}); len(got) != 0 {
		t.Errorf("past the end: %v", got)
	}
	// the default limit
	for i := range store.DefaultMemoryLimit + 2 {
		put(t, m, "acme", doc([]string{"many"}, fmt.Sprint(i), `{}`, instant(10+i)))
	}
	if got := search(t, m, "acme", store.MemoryQuery{Prefix: []string{"many"}, Now: instant(59)}); len(got) != store.DefaultMemoryLimit {
		t.Errorf("the default limit gave %d", len(got))
	}
}

func testMemoryNamespaces(t *testing.T, m store.Memory) {
	for i, ns := range [][]string{{"a", "x"}, {"a", "b"}, {"a", "b"}, {"ab"}, {"a", "b", "c"}, {"z"}} {
		put(t, m, "acme", doc(ns, fmt.Sprint(i), `{}`, instant(i)))
	}
	list := func(q store.MemoryQuery) []string {
		q.Now = instant(30)
		nss, err := m.MemoryNamespaces(ctx, "acme", q)
		if err != nil {
			t.Fatal(err)
		}
		out := []string{}
		for _, ns := range nss {
			out = append(out, strings.Join(ns, "/"))
		}
		return out
	}
	if got := list(store.MemoryQuery{Limit: 100}); !slices.Equal(got, []string{"a/b", "a/b/c", "a/x", "ab", "z"}) {
		t.Errorf("every namespace: %v", got)
	}
	if got := list(store.MemoryQuery{Prefix: []string{"a"}}); !slices.Equal(got, []string{"a/b", "a/b/c", "a/x"}) {
		t.Errorf("under a: %v", got)
	}
	if got := list(store.MemoryQuery{Limit: 2, Offset: 1}); !slices.Equal(got, []string{"a/b/c", "a/x"}) {
		t.Errorf("a page: %v", got)
	}
}

func testMemorySearch(t *testing.T, m store.Memory) {
	ns := []string{"candidates", "u-1", "questions"}
	put(t, m, "acme", doc(ns, "q1", `{"text": "How did you DESIGN the payment service?", "aspect": "design"}`, instant(1)))
	put(t, m, "acme", doc(ns, "q2", `{"text": "Which trade-offs did you make in the payment service?", "aspect": "tradeoffs"}`, instant(2)))
	put(t, m, "acme", doc(ns, "q3", `{"nested": {"deep": ["über", {"x": "Café latte"}]}, "count": 42, "design": true}`, instant(3)))
	put(t, m, "acme", doc([]string{"candidates", "u-2", "questions"}, "q1", `{"text": "How did you design the search index?"}`, instant(4)))
	for _, c := range []struct {
		prefix []string
		text   string
		want   []string
	}{
		{ns, "design", []string{"candidates/u-1/questions:q1"}},
		{ns, "Payment service", []string{"candidates/u-1/questions:q1", "candidates/u-1/questions:q2"}},
		// every word must be there
		{ns, "payment design", []string{"candidates/u-1/questions:q1"}},
		{ns, "payment index", nil},
		// whole words, in lower case, punctuation apart
		{ns, "trade", []string{"candidates/u-1/questions:q2"}},
		{ns, "offs?", []string{"candidates/u-1/questions:q2"}},
		{ns, "desig", nil},
		{ns, "designs", nil},
		// nested strings are words, object keys and numbers are not
		{ns, "ÜBER café", []string{"candidates/u-1/questions:q3"}},
		{ns, "nested", nil},
		{ns, "42", nil},
		// the prefix applies
		{[]string{"candidates"}, "design", []string{"candidates/u-1/questions:q1", "candidates/u-2/questions:q1"}},
		{[]string{"candidates", "u-2"}, "design", []string{"candidates/u-2/questions:q1"}},
	} {
		got := search(t, m, "acme", store.MemoryQuery{Prefix: c.prefix, Text: c.text})
		slices.Sort(got) // ranks are each store's own; ties are compared as sets
		if !slices.Equal(got, c.want) && !(len(got) == 0 && len(c.want) == 0) {
			t.Errorf("search %q under %v: %v, want %v", c.text, c.prefix, got, c.want)
		}
	}
	// a text with no words finds nothing; no text lists
	if got := search(t, m, "acme", store.MemoryQuery{Prefix: ns, Text: " ?! "}); len(got) != 0 {
		t.Errorf("a text of no words found %v", got)
	}
	if got := search(t, m, "acme", store.MemoryQuery{Prefix: ns}); len(got) != 3 {
		t.Errorf("no text listed %v", got)
	}
	// a replaced document is found by its new words only
	put(t, m, "acme", doc(ns, "q1", `{"text": "Tell me about your testing."}`, instant(5)))
	if got := search(t, m, "acme", store.MemoryQuery{Prefix: ns, Text: "design"}); len(got) != 0 {
		t.Errorf("the replaced document is still found by its old words: %v", got)
	}
	if got := search(t, m, "acme", store.MemoryQuery{Prefix: ns, Text: "testing"}); !slices.Equal(got, []string{"candidates/u-1/questions:q1"}) {
		t.Errorf("the replaced document by its new words: %v", got)
	}
	// a deleted one is not found
	if err := m.DeleteMemory(ctx, "acme", ns, "q2"); err != nil {
		t.Fatal(err)
	}
	if got := search(t, m, "acme", store.MemoryQuery{Prefix: ns, Text: "payment"}); len(got) != 0 {
		t.Errorf("a deleted document is found: %v", got)
	}
}

func testMemoryRanks(t *testing.T, m store.Memory) {
	ns := []string{"notes"}
	put(t, m, "acme", doc(ns, "once", `"latency was one of the issues we saw there"`, instant(1)))
	put(t, m, "acme", doc(ns, "thrice", `"latency latency latency was what we saw there"`, instant(2)))
	items, err := m.SearchMemory(ctx, "acme", store.MemoryQuery{Prefix: ns, Text: "latency", Now: instant(3)})
	if err != nil {
		t.Fatal(err)
	}
	if got := keys(items); !slices.Equal(got, []string{"notes:thrice", "notes:once"}) {
		t.Fatalf("ranked %v, want the document with the word three times first", got)
	}
	if !(items[0].Score > items[1].Score) {
		t.Fatalf("scores %v, %v: the better match scores higher", items[0].Score, items[1].Score)
	}
}

// testMemoryAnyText searches with texts that are query syntax in one
// store or another: they are words to find, never an error.
func testMemoryAnyText(t *testing.T, m store.Memory) {
	put(t, m, "acme", doc([]string{"n"}, "k", `"and or not near"`, instant(1)))
	for _, text := range []string{`"`, `*`, `NEAR(a b)`, `a OR b`, `NOT x`, `x AND`, `'`, `a & b | !c`, `(`, `:*`, `-x`, `^x`, `\`, "col:x", "\x00"} {
		if _, err := m.SearchMemory(ctx, "acme", store.MemoryQuery{Text: text, Now: instant(2)}); err != nil {
			t.Errorf("search %q: %v", text, err)
		}
	}
	if got := search(t, m, "acme", store.MemoryQuery{Text: "NOT near AND or"}); !slices.Equal(got, []string{"n:k"}) {
		t.Errorf("operators as words: %v", got)
	}
}

// testMemoryUnindexed: a document put unindexed is got, listed and
// counted in its namespace, never found by a search's words; put again
// indexed it is found by them, and put unindexed again it is not, nor
// by its old words. A step's documents are put the same way. What is read
// back is the document, never the way it was put.
func testMemoryUnindexed(t *testing.T, m store.Memory) {
	ns := []string{"candidates", "u-1", "questions"}
	quiet := func(key, value string, at int) *store.MemoryItem {
		it := doc(ns, key, value, instant(at))
		it.Unindexed = true
		return it
	}
	find := func(text string, want ...string) {
		t.Helper()
		got := search(t, m, "acme", store.MemoryQuery{Prefix: ns, Text: text})
		slices.Sort(got)
		if !slices.Equal(got, want) && !(len(got) == 0 && len(want) == 0) {
			t.Errorf("search %q: %v, want %v", text, got, want)
		}
	}
	put(t, m, "acme", quiet("q1", `{"text": "How did you design the payment service?"}`, 1))
	put(t, m, "acme", doc(ns, "q2", `{"text": "Which trade-offs did you make in the payment service?"}`, instant(2)))
	put(t, m, "acme", quiet("q3", `{"text": "Tell me about the payment retries."}`, 3))
	find("design")
	find("payment", "candidates/u-1/questions:q2")
	if got := search(t, m, "acme", store.MemoryQuery{Prefix: ns}); !slices.Equal(got, []string{
		"candidates/u-1/questions:q3", "candidates/u-1/questions:q2", "candidates/u-1/questions:q1"}) {
		t.Errorf("listed without a query: %v, want the three, newest first", got)
	}
	it, err := m.GetMemory(ctx, "acme", ns, "q1", instant(30))
	if err != nil {
		t.Fatal(err)
	}
	if err := sameItem(it, doc(ns, "q1", `{"text": "How did you design the payment service?"}`, instant(1))); err != nil || it.Unindexed {
		t.Errorf("the unindexed document got back: %v (unindexed %v)", err, it.Unindexed)
	}
	if nss, err := m.MemoryNamespaces(ctx, "acme", store.MemoryQuery{Now: instant(30)}); err != nil || len(nss) != 1 {
		t.Errorf("namespaces %v (%v), want the one", nss, err)
	}
	// indexed once put so, and out of the index again once put unindexed
	put(t, m, "acme", doc(ns, "q1", `{"text": "How did you design the payment service?"}`, instant(4)))
	find("design", "candidates/u-1/questions:q1")
	find("payment", "candidates/u-1/questions:q1", "candidates/u-1/questions:q2")
	put(t, m, "acme", quiet("q1", `{"text": "How did you shard the ledger?"}`, 5))
	find("design")
	find("ledger")
	find("payment", "candidates/u-1/questions:q2")
	put(t, m, "acme", quiet("q2", `{"text": "Which trade-offs did you make in the payment service?"}`, 6))
	find("payment")
	// deleted, an unindexed document leaves the others' search as it was
	if err := m.DeleteMemory(ctx, "acme", ns, "q3"); err != nil {
		t.Fatal(err)
	}
	put(t, m, "acme", doc(ns, "q4", `{"text": "What did the retries cost?"}`, instant(7)))
	find("retries", "candidates/u-1/questions:q4")
	if got := search(t, m, "acme", store.MemoryQuery{Prefix: ns}); len(got) != 3 {
		t.Errorf("listed without a query: %v, want q1, q2 and q4", got)
	}
	st, ok := m.(store.Store)
	if !ok {
		return
	}
	// a step's documents
	now := instant(8)
	step := &store.Checkpoint{Thread: "unindexed-step", Seq: 1, Source: store.SourceCreate, Time: now,
		Writes: []store.Write{{Field: "n", Version: 1, Value: 1.0}},
		Memory: []store.MemoryPut{{Tenant: "acme", Item: quiet("s1", `{"text": "Why the ledger?"}`, 8)},
			{Tenant: "acme", Item: doc(ns, "s2", `{"text": "Why the queue?"}`, now)}}}
	if err := st.Commit(ctx, step); err != nil {
		t.Fatal(err)
	}
	find("why", "candidates/u-1/questions:s2")
	if got := search(t, m, "acme", store.MemoryQuery{Prefix: ns}); len(got) != 5 || got[0] != "candidates/u-1/questions:s2" && got[0] != "candidates/u-1/questions:s1" {
		t.Errorf("listed without a query: %v, want five, the step's first", got)
	}
}

func testMemoryExpiry(t *testing.T, m store.Memory) {
	ns := []string{"sessions"}
	short := doc(ns, "short", `"soon forgotten"`, instant(1))
	short.Expires = instant(10)
	put(t, m, "acme", short)
	put(t, m, "acme", doc(ns, "long", `"kept"`, instant(2)))
	if got, err := m.GetMemory(ctx, "acme", ns, "short", instant(9)); err != nil || sameItem(got, short) != nil {
		t.Fatalf("before its expiry: %+v %v", got, err)
	}
	if _, err := m.GetMemory(ctx, "acme", ns, "short", instant(10)); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("at its expiry: %v", err)
	}
	if got := search(t, m, "acme", store.MemoryQuery{Prefix: ns, Now: instant(11)}); !slices.Equal(got, []string{"sessions:long"}) {
		t.Fatalf("listed after expiry: %v", got)
	}
	if got := search(t, m, "acme", store.MemoryQuery{Text: "forgotten", Now: instant(11)}); len(got) != 0 {
		t.Fatalf("found after expiry: %v", got)
	}
	// a namespace whose documents all expired is not listed
	brief := doc([]string{"brief"}, "k", `{}`, instant(3))
	brief.Expires = instant(10)
	put(t, m, "acme", brief)
	if nss, err := m.MemoryNamespaces(ctx, "acme", store.MemoryQuery{Now: instant(9)}); err != nil || len(nss) != 2 {
		t.Fatalf("namespaces before the expiry: %v %v", nss, err)
	}
	if nss, err := m.MemoryNamespaces(ctx, "acme", store.MemoryQuery{Now: instant(11)}); err != nil || len(nss) != 1 || nss[0][0] != "sessions" {
		t.Fatalf("namespaces after the expiry: %v %v", nss, err)
	}
	// putting it again brings it back, with its new expiry
	again := doc(ns, "short", `"back"`, instant(20))
	again.Expires = instant(40)
	put(t, m, "acme", again)
	if got, err := m.GetMemory(ctx, "acme", ns, "short", instant(21)); err != nil || sameItem(got, again) != nil {
		t.Fatalf("put again: %+v %v", got, err)
	}
}

func testMemoryBad(t *testing.T, m store.Memory) {
	long := strings.Repeat("x", store.MaxMemoryName+1)
	deep := make([]string, store.MaxNamespaceDepth+1)
	for i := range deep {
		deep[i] = "n"
	}
	for _, c := range []struct {
		ns  []string
		key string
	}{
		{nil, "k"}, {[]string{}, "k"}, {[]string{""}, "k"}, {[]string{"a", ""}, "k"}, {[]string{"a"}, ""},
		{[]string{"a\x1fb"}, "k"}, {[]string{"a"}, "k\n"}, {[]string{long}, "k"}, {[]string{"a"}, long},
		{deep, "k"}, {[]string{"a\xff"}, "k"},
	} {
		if err := m.PutMemory(ctx, "acme", doc(c.ns, c.key, `{}`, instant(1))); !errors.Is(err, store.ErrMemoryKey) {
			t.Errorf("put %q %q: %v", c.ns, c.key, err)
		}
		if _, err := m.GetMemory(ctx, "acme", c.ns, c.key, instant(1)); !errors.Is(err, store.ErrMemoryKey) {
			t.Errorf("get %q %q: %v", c.ns, c.key, err)
		}
		if err := m.DeleteMemory(ctx, "acme", c.ns, c.key); !errors.Is(err, store.ErrMemoryKey) {
			t.Errorf("delete %q %q: %v", c.ns, c.key, err)
		}
	}
	if _, err := m.SearchMemory(ctx, "acme", store.MemoryQuery{Prefix: []string{"a", ""}}); !errors.Is(err, store.ErrMemoryKey) {
		t.Errorf("search under a bad prefix: %v", err)
	}
	if _, err := m.MemoryNamespaces(ctx, "acme", store.MemoryQuery{Prefix: deep}); !errors.Is(err, store.ErrMemoryKey) {
		t.Errorf("namespaces under a bad prefix: %v", err)
	}
	for _, v := range []string{``, `{`, `{"a": 1} x`, `"` + strings.Repeat("x", store.MaxMemoryValue) + `"`} {
		if err := m.PutMemory(ctx, "acme", doc([]string{"a"}, "k", v, instant(1))); err == nil {
			t.Errorf("put a value of %d bytes starting %.10q: no error", len(v), v)
		}
	}
	// names with slashes, dots, spaces and any script are names
	ns := []string{"a/b", "c.d", "кандидат 7", "名前"}
	put(t, m, "acme", doc(ns, "k/1 2", `{}`, instant(2)))
	if _, err := m.GetMemory(ctx, "acme", ns, "k/1 2", instant(3)); err != nil {
		t.Errorf("get it back: %v", err)
	}
	if got := search(t, m, "acme", store.MemoryQuery{Prefix: []string{"a"}}); len(got) != 0 {
		t.Errorf("a/b is one name, not under a: %v", got)
	}
	if got := search(t, m, "acme", store.MemoryQuery{Prefix: ns[:3]}); len(got) != 1 {
		t.Errorf("under its prefix: %v", got)
	}
}

func testMemoryConcurrent(t *testing.T, m store.Memory) {
	ns := []string{"counters"}
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for i := range 16 {
		wg.Go(func() {
			// half write one key, half each their own
			key := "shared"
			if i%2 == 1 {
				key = fmt.Sprint("own", i)
			}
			errs <- m.PutMemory(ctx, "acme", doc(ns, key, fmt.Sprintf(`{"writer": %d}`, i), instant(i)))
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if got := search(t, m, "acme", store.MemoryQuery{Prefix: ns, Limit: 100}); len(got) != 9 {
		t.Fatalf("after concurrent puts: %v", got)
	}
	got, err := m.GetMemory(ctx, "acme", ns, "shared", instant(30))
	if err != nil || !strings.Contains(string(got.Value), "writer") {
		t.Fatalf("the shared key: %+v %v", got, err)
	}
}

// BenchMemory measures a tenant's memory of n documents (each a
// remembered question, under one of 100 candidates' namespaces, among
// another tenant's n): a full-text search across all of them, a search
// under one candidate's namespace, a listing of one namespace, a get and
// a put.
func BenchMemory(b *testing.B, m store.Memory, n int) {
	words := []string{"design", "latency", "cache", "queue", "index", "shard", "replica", "schema", "trade", "offs", "deploy", "rollback"}
	now := time.Now()
	for _, tenant := range []string{"acme", "globex"} {
		for i := range n {
			text := fmt.Sprintf("How did you handle the %s and the %s of project %d?", words[i%len(words)], words[(i/len(words))%len(words)], i)
			v, _ := json.Marshal(map[string]any{"text": text, "interview_id": fmt.Sprint("i-", i/10)})
			if err := m.PutMemory(ctx, tenant, &store.MemoryItem{Namespace: []string{"candidates", fmt.Sprint("u-", i%100), "questions"},
				Key: fmt.Sprint("q", i), Value: v, Updated: now.Add(time.Duration(i))}); err != nil {
				b.Fatal(err)
			}
		}
	}
	later := now.Add(time.Hour)
	for _, c := range []struct {
		name string
		q    store.MemoryQuery
	}{
		{"search-all", store.MemoryQuery{Text: "latency cache", Limit: 10, Now: later}},
		{"search-namespace", store.MemoryQuery{Prefix: []string{"candidates", "u-7"}, Text: "design", Limit: 10, Now: later}},
		{"list-namespace", store.MemoryQuery{Prefix: []string{"candidates", "u-7", "questions"}, Limit: 50, Now: later}},
	} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				items, err := m.SearchMemory(ctx, "acme", c.q)
				if err != nil || len(items) == 0 {
					b.Fatalf("%d items, %v", len(items), err)
				}
			}
		})
	}
	b.Run("get", func(b *testing.B) {
		for b.Loop() {
			if _, err := m.GetMemory(ctx, "acme", []string{"candidates", "u-7", "questions"}, "q7", later); err != nil {
				b.Fatal(err)
			}
		}
	})
	// a put of a new document each time, indexed and not (the full-text
	// index's update is most of an indexed put's cost on SQLite)
	for _, unindexed := range []bool{false, true} {
		name := "put"
		if unindexed {
			name = "put-unindexed"
		}
		b.Run(name, func(b *testing.B) {
			v := json.RawMessage(`{"text": "How did you shard the index?", "interview_id": "i-x"}`)
			i := 0
			for b.Loop() {
				i++
				if err := m.PutMemory(ctx, "acme", &store.MemoryItem{Namespace: []string{"candidates", "u-7", name}, Key: fmt.Sprint("new", i),
					Value: v, Updated: later, Unindexed: unindexed}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// testMemoryWithStep: a step's documents (Checkpoint.Memory) are written
// with its checkpoint, in its transaction: a commit that fails (a
// conflict, a document refused) writes none of them, and leaves the
// thread as it was.
func testMemoryWithStep(t *testing.T, m store.Memory) {
	st, ok := m.(store.Store)
	if !ok {
		t.Skipf("%T is a Memory apart from a Store", m)
	}
	now := time.Now().UTC().Truncate(time.Millisecond)
	ns := []string{"steps"}
	getDoc := func(key string) *store.MemoryItem {
		t.Helper()
		it, err := m.GetMemory(ctx, "acme", ns, key, now)
		if errors.Is(err, store.ErrNotFound) {
			return nil
		}
		if err != nil {
			t.Fatalf("get %q: %v", key, err)
		}
		return it
	}
	// an expired document, put again by a step: it is written, not
	// deleted as expired by the same put
	expired := doc(ns, "again", `{"v": "old"}`, now.Add(-time.Hour))
	expired.Expires = now.Add(-time.Minute)
	put(t, m, "acme", expired)
	first := &store.Checkpoint{Thread: "mem-step", Seq: 1, Source: store.SourceCreate, Time: now,
		Writes: []store.Write{{Field: "n", Version: 1, Value: 1.0}},
		Memory: []store.MemoryPut{{Tenant: "acme", Item: doc(ns, "a", `{"v": 1}`, now)}}}
	if err := st.Commit(ctx, first); err != nil {
		t.Fatal(err)
	}
	if it := getDoc("a"); it == nil || !sameJSON(it.Value, json.RawMessage(`{"v": 1}`)) {
		t.Fatalf("after the first commit, document a = %+v, want {\"v\": 1}", it)
	}
	conflict := &store.Checkpoint{Thread: "mem-step", Seq: 2, Parent: 7, Source: store.SourceStep, Time: now,
		Memory: []store.MemoryPut{{Tenant: "acme", Item: doc(ns, "b", `{"v": 2}`, now)}}}
	if err := st.Commit(ctx, conflict); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("commit on a parent that is not the head: %v, want ErrConflict", err)
	}
	if it := getDoc("b"); it != nil {
		t.Fatalf("a commit that failed put document b: %+v", it)
	}
	refused := &store.Checkpoint{Thread: "mem-step", Seq: 2, Parent: 1, Source: store.SourceStep, Time: now,
		Writes: []store.Write{{Field: "n", Version: 2, Value: 2.0}},
		Memory: []store.MemoryPut{{Tenant: "acme", Item: doc(ns, "b", `{"v": 2}`, now)}, {Tenant: "acme", Item: doc(ns, "", `{}`, now)}}}
	if err := st.Commit(ctx, refused); !errors.Is(err, store.ErrMemoryKey) {
		t.Fatalf("commit with a document under an empty key: %v, want ErrMemoryKey", err)
	}
	if it := getDoc("b"); it != nil {
		t.Fatalf("a commit whose other document was refused put document b: %+v", it)
	}
	if head, err := st.Head(ctx, "mem-step"); err != nil || head.Seq != 1 {
		t.Fatalf("after the refused commit the head is %+v (%v), want checkpoint 1", head, err)
	}
	second := &store.Checkpoint{Thread: "mem-step", Seq: 2, Parent: 1, Source: store.SourceStep, Time: now,
		Writes: []store.Write{{Field: "n", Version: 2, Value: 2.0}},
		Memory: []store.MemoryPut{
			{Tenant: "acme", Item: doc(ns, "b", `{"v": 2}`, now)},
			{Tenant: "acme", Item: doc(ns, "b", `{"v": 3}`, now)},
			{Tenant: "acme", Item: doc(ns, "again", `{"v": "new"}`, now)},
			{Tenant: "other", Item: doc(ns, "b", `{"v": "theirs"}`, now)},
		}}
	if err := st.Commit(ctx, second); err != nil {
		t.Fatal(err)
	}
	if it := getDoc("b"); it == nil || !sameJSON(it.Value, json.RawMessage(`{"v": 3}`)) {
		t.Fatalf("document b = %+v, want the step's last put of it", it)
	}
	if it := getDoc("again"); it == nil || !sameJSON(it.Value, json.RawMessage(`{"v": "new"}`)) {
		t.Fatalf("document again = %+v, want the step's put of it", it)
	}
	if it, err := m.GetMemory(ctx, "other", ns, "b", now); err != nil || !sameJSON(it.Value, json.RawMessage(`{"v": "theirs"}`)) {
		t.Fatalf("the other tenant's document b = %+v (%v)", it, err)
	}
	hist, err := st.History(ctx, "mem-step", store.HistoryOptions{})
	if err != nil || len(hist) != 2 {
		t.Fatalf("history: %d checkpoints (%v), want 2", len(hist), err)
	}
	for _, cp := range hist {
		if len(cp.Memory) > 0 {
			t.Fatalf("checkpoint %d as History lists it holds the step's documents", cp.Seq)
		}
	}
}
