package engine

import (
	"context"
	"slices"
	"sync"

	"github.com/trellisflow/trellis/runtime/store"
)

// Replies are the replies a run replaying a thread gives its nodes again
// (see kind.State.Recorded): those the thread's checkpoints recorded, by
// node and request key, each told once in the order they were recorded,
// the last of a node's replies to a request again once the others are
// told. It is safe for concurrent use; one Replies may serve several runs
// (a replay's runs, one after the other, and their child flows').
type Replies struct {
	mu     sync.Mutex
	byKey  map[replyKey][]string
	told   map[replyKey]int
	misses int
}

type replyKey struct{ node, key string }

// NewReplies holds replies, in the order they were recorded.
func NewReplies(replies []store.Reply) *Replies {
	r := &Replies{byKey: map[replyKey][]string{}, told: map[replyKey]int{}}
	for _, x := range replies {
		k := replyKey{x.Node, x.Key}
		r.byKey[k] = append(r.byKey[k], x.Text)
	}
	return r
}

// Len is the number of replies held.
func (r *Replies) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, texts := range r.byKey {
		n += len(texts)
	}
	return n
}

// Misses counts the requests the replies had nothing for: requests the
// thread did not send (a prompt, or the state it renders, changed since),
// which went to the model, if any, instead.
func (r *Replies) Misses() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.misses
}

func (r *Replies) take(node, key string) (string, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	k := replyKey{node, key}
	texts := r.byKey[k]
	if len(texts) == 0 {
		r.misses++
		return "", false
	}
	i := min(r.told[k], len(texts)-1)
	r.told[k]++
	return texts[i], true
}

// forkReplies are the replies a thread forked to replay holds in its
// first checkpoint (store.ForkReplaying): nil for any other thread.
func forkReplies(ctx context.Context, st store.Store, thread string) *Replies {
	cps, err := st.History(ctx, thread, store.HistoryOptions{Source: store.SourceFork, Limit: 1})
	if err != nil || len(cps) == 0 || len(cps[0].Replies) == 0 {
		return nil
	}
	return NewReplies(cps[0].Replies)
}

// Record implements kind.State: the reply is kept with the step's
// checkpoint, unless the attempt was given up.
func (v *view) Record(key, text string) {
	if !v.gate.enter() {
		v.run.drop()
		return
	}
	defer v.gate.exit()
	r := v.run
	r.repliesMu.Lock()
	r.replies = append(r.replies, store.Reply{Node: v.Node(), Key: key, Text: text})
	r.hasRecords.Store(true)
	r.repliesMu.Unlock()
}

// Recorded implements kind.State.
func (v *view) Recorded(key string) (string, bool) {
	if v.run.req.Replies == nil {
		return "", false
	}
	return v.run.req.Replies.take(v.Node(), key)
}

// takeReplies hands the replies the step's nodes recorded to its
// checkpoint, in a stable order: by node, each node's in the order it
// recorded them.
// takeRecords hands the replies and documents of the step to its
// checkpoint (takeReplies, takePuts); none when no node of the step
// recorded any. A reply or document kept while it takes them goes with
// this step or the next, as it would under the lock.
func (r *run) takeRecords() ([]store.Reply, []store.MemoryPut) {
	if !r.hasRecords.Load() {
		return nil, nil
	}
	r.hasRecords.Store(false)
	return r.takeReplies(), r.takePuts()
}

func (r *run) takeReplies() []store.Reply {
	r.repliesMu.Lock()
	defer r.repliesMu.Unlock()
	if len(r.replies) == 0 {
		return nil
	}
	out := r.replies
	r.replies = nil
	slices.SortStableFunc(out, func(a, b store.Reply) int {
		switch {
		case a.Node < b.Node:
			return -1
		case a.Node > b.Node:
			return 1
		}
		return 0
	})
	return out
}
