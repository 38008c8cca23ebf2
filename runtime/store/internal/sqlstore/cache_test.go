package sqlstore

import (
	"fmt"
	"testing"

	"github.com/trellisflow/trellis/runtime/store"
)

func folderAt(seq uint64) *store.Folder {
	f := store.NewFolder()
	f.Apply(&store.Checkpoint{Seq: seq, Writes: []store.Write{{Field: "n", Version: seq, Value: float64(seq)}}})
	return f
}

// A full cache drops the thread used least recently, not the one put
// first; dropping and replacing entries keeps its order whole.
func TestCacheDropsTheLeastRecentlyUsed(t *testing.T) {
	c := NewCache(3)
	for _, th := range []string{"a", "b", "c"} {
		c.Put(th, 1, folderAt(1))
	}
	if _, ok := c.Snapshot("a", 1, nil); !ok {
		t.Fatal("a is not held")
	}
	c.Put("d", 1, folderAt(1)) // b is the least recently used
	for th, want := range map[string]bool{"a": true, "b": false, "c": true, "d": true} {
		if c.Holds(th) != want {
			t.Fatalf("holds %s: %v, want %v", th, !want, want)
		}
	}
	c.Put("c", 1, folderAt(2)) // replaced: now the most recent
	c.Forget("d")
	c.Put("e", 1, folderAt(1))
	c.Put("f", 1, folderAt(1)) // full (a, c, e): a goes
	if c.Holds("a") || !c.Holds("c") || !c.Holds("e") || !c.Holds("f") || c.Seq("c", 1) != 2 {
		t.Fatalf("entries %v: want c (at 2), e and f", keys(c))
	}
	c.ForgetFamily("c")
	c.Committed(&store.Checkpoint{Thread: "e", Seq: 5, Parent: 4}) // behind: dropped
	if len(c.entries) != c.lru.Len() || len(c.entries) != 1 || !c.Holds("f") {
		t.Fatalf("entries %v, list of %d: want f alone", keys(c), c.lru.Len())
	}
	for i := range 10 {
		c.Put(fmt.Sprint("t", i), 1, folderAt(1))
	}
	if len(c.entries) != 3 || c.lru.Len() != 3 || !c.Holds("t9") || !c.Holds("t7") || c.Holds("t6") {
		t.Fatalf("entries %v: want t7, t8, t9", keys(c))
	}
}

func keys(c *Cache) []string {
	var out []string
	for k := range c.entries {
		out = append(out, k)
	}
	return out
}
