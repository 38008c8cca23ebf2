package store

// Copier is a Store whose Commit keeps nothing of the Checkpoint struct
// it is given once it returns: it copies what it records, and keeps the
// checkpoint's slices and maps (Writes, Writers, Next, ...) as they are,
// so their owner never changes them after the commit. The writer of
// many checkpoints may then use one struct for several commits.
//
// CopiesCommits returns the store that copies. A store that wraps a
// Copier (embedding it) is not one unless it says so of itself: the
// writer takes st as a Copier only when st.(Copier).CopiesCommits() == st.
type Copier interface {
	CopiesCommits() Store
}

// Copies reports whether st's Commit copies the Checkpoint struct it is
// given (see Copier).
func Copies(st Store) bool {
	c, ok := st.(Copier)
	return ok && c.CopiesCommits() == st
}
