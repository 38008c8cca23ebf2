package store

import (
	"context"
	"encoding/json"
	"errors"
	"time"
)

// Catalog keeps what a served runtime records beside the checkpoints: who
// owns each thread and which flow it runs; the runs started on threads and
// their events, so a client that reconnects misses none; and the API keys
// that say who a caller is. The built-in stores implement it, and
// storetest.RunCatalog is its conformance suite.
//
// Every record belongs to a tenant; a read names the tenant and does not
// see another tenant's records (ErrNotFound), so one tenant cannot even
// learn that another's thread exists.
type Catalog interface {
	// CreateThread records a new thread, or fails with ErrExists.
	CreateThread(ctx context.Context, t *ThreadRecord) error
	// Thread returns a thread's record (one being deleted too: its
	// Deleting says so).
	Thread(ctx context.Context, tenant, id string) (*ThreadRecord, error)
	// ListThreads lists a tenant's threads, newest first, paged and
	// filtered by q; threads being deleted are not listed.
	ListThreads(ctx context.Context, q ThreadQuery) ([]*ThreadRecord, error)
	// MarkThreadDeleting marks a thread as being deleted (deleting true),
	// or not any more: a thread being deleted takes no run (EnqueueRun
	// fails with ErrNotFound) and is not listed, so that its checkpoints
	// can be deleted before its record is, and a deletion that fails part
	// way can be tried again. Marking fails with ErrBusy while the thread
	// has a queued or running run.
	MarkThreadDeleting(ctx context.Context, tenant, id string, deleting bool) error
	// DeleteThread removes a thread's record with its runs and their
	// events (packed or not) and its voice sessions; it fails with
	// ErrBusy while the thread has a queued or running run. (Store.Delete
	// removes all this with the thread's checkpoints.)
	DeleteThread(ctx context.Context, tenant, id string) error

	// CreateRun records a new run, or fails with ErrExists.
	CreateRun(ctx context.Context, r *RunRecord) error
	// EnqueueRun records a new queued run on its thread as policy says
	// when the thread already has a queued or running run: BusyReject
	// fails with ErrBusy, BusyEnqueue queues it behind them, BusyInterrupt
	// cancels the queued ones and asks the running one to stop (Stop
	// StopInterrupt). It reports whether the thread had such a run. A
	// thread with no record, or one being deleted, takes no run
	// (ErrNotFound).
	// A run whose Server is set is claimed by that server in the same
	// step when its thread had none: it is recorded running (Started =
	// Created), and r's Status says so; otherwise it is queued with no
	// server, for any server to claim. A run so claimed whose Lease is
	// set takes its thread's lease too, in the same step, as Acquire
	// would for Lease.Owner and Lease.TTL (Lease.Taken says whether it
	// did: another holder's lease that has not expired keeps it).
	EnqueueRun(ctx context.Context, r *RunRecord, policy BusyPolicy) (busy bool, err error)
	// ClaimRun gives server the oldest queued run of a thread that has no
	// running run (run id, when not "", only that run), now running
	// (Server and Started set); ErrNotFound when there is none.
	ClaimRun(ctx context.Context, server, id string, now time.Time) (*RunRecord, error)
	// RequestStop cancels a queued run now (its Error says why), or asks
	// the server running a run to stop it (Stop set to why); it returns
	// the run as it is then.
	RequestStop(ctx context.Context, tenant, id string, why StopReason) (*RunRecord, error)
	// ServerRuns lists the runs server is running.
	ServerRuns(ctx context.Context, server string) ([]*RunRecord, error)
	// QueueDepth counts the queued runs, of every tenant.
	QueueDepth(ctx context.Context) (int, error)
	// Beat records that server is alive, at the store's time: the
	// servers sharing a store judge each other by one clock.
	Beat(ctx context.Context, server string) error
	// AdoptRun gives server one running run whose server has not beaten
	// for deadAfter, by the store's clock (a server that died);
	// ErrNotFound when there is none.
	AdoptRun(ctx context.Context, server string, deadAfter time.Duration) (*RunRecord, error)
	// DeleteRun removes a run and its events (one refused before it
	// started) if its record still stands as expect says: ErrRunChanged
	// when it does not.
	DeleteRun(ctx context.Context, id string, expect RunState) error
	// UpdateRun saves a run's status, outcome, times, flow version and
	// queue fields (Resume, Server, Stop), if its record still stands as
	// expect says: ErrRunChanged when another server changed it first
	// (read it again and decide again), so that a cancel, a shutdown, an
	// adoption and a finish never overwrite each other. The events evs
	// (the run's last ones, numbered after those recorded) are recorded
	// with the change, all or none, so that a run's end and the events
	// that tell it are recorded together or not at all.
	UpdateRun(ctx context.Context, r *RunRecord, expect RunState, evs []EventRecord) error
	// Run returns a run's record.
	Run(ctx context.Context, tenant, id string) (*RunRecord, error)
	// Runs lists a thread's runs, newest first, a page at a time (see
	// RunQuery).
	Runs(ctx context.Context, q RunQuery) ([]*RunRecord, error)
	// AppendEvents records a run's events, all or none: seq numbers a
	// run's events from 1, and a seq already recorded fails the batch with
	// ErrExists. A holder other than "" records them only while the run
	// is running on that server (ErrRunChanged otherwise): a server
	// another took a run from adds nothing to its events after the
	// other's.
	AppendEvents(ctx context.Context, run, holder string, evs []EventRecord) error
	// Events returns a run's events after seq, in order, at most limit
	// of them (see MaxPage), packed or not.
	Events(ctx context.Context, run string, after int64, limit int) ([]EventRecord, error)
	// RunsEvents returns every event of each of runs, packed or not, in
	// order, read at once (a run with none is left out): what a
	// retention packs, a batch of runs at a time.
	RunsEvents(ctx context.Context, runs []string) (map[string][]EventRecord, error)
	// LastEvent returns a run's last recorded event; ErrNotFound when it
	// has none.
	LastEvent(ctx context.Context, run string) (*EventRecord, error)
	// RunsToPack lists up to limit runs that ended before before and
	// whose events are not packed yet, those that ended first first.
	RunsToPack(ctx context.Context, before time.Time, limit int) ([]string, error)
	// PackEvents packs the events of ended runs, all in one transaction:
	// for each pack, the run's events up to pack.Through are replaced by
	// pack.Events (those kept of them, as read through Events, or
	// compacted), held together in one compressed record, and the run is
	// marked packed. A run packed already, gone or not ended is left as
	// it is. It returns how many runs it packed. Events and LastEvent
	// read packed events as the others, by the same numbers.
	PackEvents(ctx context.Context, packs []EventPack) (int, error)

	// CreateKey records an API key (its hash, never the key), or fails
	// with ErrExists.
	CreateKey(ctx context.Context, k *KeyRecord) error
	// KeyByHash returns the key with that hash, revoked or not.
	KeyByHash(ctx context.Context, hash string) (*KeyRecord, error)
	// Keys lists the keys, of one tenant or (tenant "") of all.
	Keys(ctx context.Context, tenant string) ([]*KeyRecord, error)
	// RevokeKey marks a key revoked.
	RevokeKey(ctx context.Context, id string, at time.Time) error
	// RenewKey moves the expiry of a key that expires (Expires set) and
	// is not revoked to until; ErrNotFound for any other.
	RenewKey(ctx context.Context, id string, until time.Time) error
	// SweepKeys revokes, at the store's time, the keys that lapse with the
	// server that made them (Owner set) once it has not beaten for
	// deadAfter by the store's clock (it stopped, or died), or once they
	// expired; it returns how many it revoked.
	SweepKeys(ctx context.Context, deadAfter time.Duration) (int, error)
}

// MaxPage is the most records one read of a catalog returns: a limit of
// 0, or above it, reads MaxPage.
const MaxPage = 1000

// PageLimit is the number of records a read asked for limit returns at
// most.
func PageLimit(limit int) int {
	if limit <= 0 || limit > MaxPage {
		return MaxPage
	}
	return limit
}

// RunQuery pages Runs.
type RunQuery struct {
	Tenant, Thread string
	// Before continues a listing after the run with this id (the last of
	// the previous page).
	Before string
	// Limit bounds the page (see MaxPage).
	Limit int
}

// ThreadRecord is a served thread: its owner, its flow and its metadata.
type ThreadRecord struct {
	ID       string
	Tenant   string
	Flow     string
	Metadata map[string]string
	Created  time.Time
	// Deleting: the thread is being deleted (see MarkThreadDeleting).
	Deleting bool
}

// ThreadQuery pages and filters ListThreads.
type ThreadQuery struct {
	Tenant string
	// Flow and Metadata keep only the threads of that flow and carrying
	// every given metadata pair.
	Flow     string
	Metadata map[string]string
	// After continues a listing after the thread with this id (the last
	// of the previous page).
	After string
	Limit int
}

// RunStatus is where a run stands.
type RunStatus string

// The states of a run.
const (
	RunQueued    RunStatus = "queued"
	RunRunning   RunStatus = "running"
	RunSucceeded RunStatus = "succeeded"
	RunFailed    RunStatus = "failed"
	RunCancelled RunStatus = "cancelled"
)

// Done reports whether the run has ended.
func (s RunStatus) Done() bool { return s == RunSucceeded || s == RunFailed || s == RunCancelled }

// RunRecord is a run started through the API.
type RunRecord struct {
	ID     string
	Tenant string
	Thread string
	// Flow and FlowVersion are the flow the run ran, as loaded then.
	Flow, FlowVersion string
	Status            RunStatus
	Input             json.RawMessage
	// Answers answer a paused thread's questions, for a run that resumes
	// it.
	Answers json.RawMessage
	// Config is the run's configuration, without its secret values.
	Config json.RawMessage
	// Error is a failed run's message; Checkpoint the thread's checkpoint
	// when the run ended.
	Error      string
	Checkpoint uint64
	Created    time.Time
	Started    time.Time
	Finished   time.Time
	// Resume: the run continues its thread's unfinished run instead of
	// applying Input. Interrupt: it gives up what a run it interrupted
	// left unfinished before it starts.
	Resume, Interrupt bool
	// Server is the server running it; Stop, when set, asks that server
	// to stop it.
	Server string
	Stop   StopReason
	// Trace is the W3C traceparent of the request that started the run
	// (empty: none), so that the run joins the caller's trace whichever
	// server claims it, whenever.
	Trace string
	// Lease asks EnqueueRun to take the thread's lease with the claim
	// (never recorded).
	Lease *LeaseClaim
	// WriteID, when set, is recorded by CreateRun, EnqueueRun and
	// UpdateRun with the record, so that a change tried again after a
	// failure that may have come after it committed recognises its own
	// (see Reupdated).
	WriteID string
}

// LeaseClaim is the lease of a thread that a run claimed as it is queued
// takes with it, so that the engine running it need not take it again.
type LeaseClaim struct {
	Owner string
	TTL   time.Duration
	// Taken is set by EnqueueRun once the lease is the owner's.
	Taken bool
}

// State is the part of the record its changes of state compare.
func (r RunRecord) State() RunState {
	return RunState{Status: r.Status, Server: r.Server, Stop: r.Stop}
}

// RunState is what a conditional change of a run's record (UpdateRun,
// DeleteRun) expects the record to hold: where the run stands, the
// server running it, and the stop asked of it.
type RunState struct {
	Status RunStatus
	Server string
	Stop   StopReason
}

// ErrRunChanged is a conditional change of a run's record that found the
// record changed: another server cancelled, adopted or ended the run.
var ErrRunChanged = errors.New("the run's record was changed by another server")

// StopReason is why a run is asked to stop.
type StopReason string

// The stops a run's record can ask of its server.
const (
	// StopCancel stops the run now.
	StopCancel StopReason = "cancel"
	// StopInterrupt stops it at its next step boundary, for a run that
	// interrupts it.
	StopInterrupt StopReason = "interrupt"
)

// Message is what a run stopped for this reason reports as its error.
func (s StopReason) Message() string {
	switch s {
	case StopCancel:
		return "cancelled"
	case StopInterrupt:
		return "interrupted"
	}
	return string(s)
}

// BusyPolicy is what EnqueueRun does on a thread with a queued or running
// run.
type BusyPolicy string

// The busy policies.
const (
	BusyReject    BusyPolicy = "reject"
	BusyEnqueue   BusyPolicy = "enqueue"
	BusyInterrupt BusyPolicy = "interrupt"
)

// ErrBusy: EnqueueRun with BusyReject on a thread with a queued or
// running run.
var ErrBusy = errors.New("the thread has a queued or running run")

// EventRecord is one stored event of a run.
type EventRecord struct {
	Seq  int64
	Data []byte
}

// EventAppend is a run's events recorded with a checkpoint (its Events):
// as Catalog.AppendEvents records them, only while Holder runs the run,
// and only if the checkpoint is committed. A store that carries
// notifications (Notifier) sends Payload on Channel with them, in the
// same transaction.
type EventAppend struct {
	Run, Holder string
	Events      []EventRecord
	Channel     string
	Payload     string
	// Refused is set by Commit when the checkpoint was committed and the
	// events were not: Holder no longer runs the run, or their numbers
	// are taken (AppendEvents's ErrRunChanged and ErrExists).
	Refused bool
	// End, when set, is the run's end, recorded with the events (a
	// refusal of theirs is its too) in the checkpoint's transaction: the
	// run's last checkpoint.
	End *RunEnd
}

// RunEnd is a run's end recorded with its last checkpoint (EventAppend's
// End): its record changed as UpdateRun changes it, to Record when it
// holds what Expect says, with Events, the events that tell the end
// (numbered after the EventAppend's). A record not as expected fails
// nothing else: the checkpoint and its events are committed, and the
// end is left to its writer (Applied stays false).
type RunEnd struct {
	Record *RunRecord
	Expect RunState
	Events []EventRecord
	// Notes are payloads a store that carries notifications sends on
	// the EventAppend's Channel with the end, besides the events' own.
	Notes []string
	// Applied is set by Commit when the record was changed and the
	// events recorded.
	Applied bool
}

// EventPack is what PackEvents keeps of a run's events: Events (in
// order, numbered as they were) in place of those up to Through.
type EventPack struct {
	Run     string
	Through int64
	Events  []EventRecord
}

// KeyRecord is an API key: its id (public), the hash of its secret, its
// tenant, whether it may manage keys.
type KeyRecord struct {
	ID      string
	Hash    string
	Tenant  string
	Admin   bool
	Name    string
	Created time.Time
	Revoked time.Time
	// Scope narrows what the key may do: "" any route of its tenant (and
	// the admin routes when Admin), ScopeStudio a studio's page.
	Scope string
	// Expires, when set, is when the key stops working unless renewed.
	Expires time.Time
	// Owner, when set, is the server the key lapses with (SweepKeys).
	Owner string
}

// ScopeStudio is the scope of a key a studio signs its page in with: its
// tenant's threads, runs and memory, and editing the flows; no key
// management.
const ScopeStudio = "studio"

// ErrNoCatalog says a store does not keep a Catalog.
var ErrNoCatalog = errors.New("this store keeps no catalog of served threads, runs and keys")

// CatalogOf returns st's Catalog.
func CatalogOf(st Store) (Catalog, error) {
	if c, ok := st.(Catalog); ok {
		return c, nil
	}
	return nil, ErrNoCatalog
}

// MatchThread reports whether t passes q's filters (not its paging).
func (q ThreadQuery) MatchThread(t *ThreadRecord) bool {
	if t.Tenant != q.Tenant || q.Flow != "" && t.Flow != q.Flow {
		return false
	}
	for k, v := range q.Metadata {
		if t.Metadata[k] != v {
			return false
		}
	}
	return true
}

// Notifier is a store that carries notifications between the processes
// sharing it (PostgreSQL's NOTIFY and LISTEN), so that they hear at once
// what they would otherwise find by polling.
type Notifier interface {
	// Notify sends payload on channel to every process listening on it,
	// this one included.
	Notify(ctx context.Context, channel, payload string) error
	// Listen calls fn with the payload of every notification on channel
	// until ctx ends, holding a connection of its own: dsn names the
	// database to connect to directly, the store's own address when
	// empty (a connection pooler that shares connections between
	// transactions does not deliver notifications). It reconnects when
	// the connection is lost, and tells connected each change: true once
	// it (re)connects (notifications sent while it was away were
	// missed), false when it loses the connection (until it is back,
	// nothing is heard). It returns ctx's error, or at once an error in
	// dsn.
	Listen(ctx context.Context, dsn, channel string, fn func(payload string), connected func(up bool)) error
	// AppendNotify records a run's events as AppendEvents does (with
	// its errors), with ea's holder, and sends ea's notification in the
	// same transaction when they are recorded.
	AppendNotify(ctx context.Context, ea *EventAppend) error
}

// Cache keeps node results for a node's cache setting: a value by key,
// until it expires, across restarts and processes sharing the store.
// It holds at most CacheLimit entries: a put beyond it drops the expired
// ones, then the oldest.
type Cache interface {
	// CacheGet returns the value kept under key, unless it expired by
	// now; ok is false when there is none.
	CacheGet(ctx context.Context, key string, now time.Time) (value []byte, ok bool, err error)
	// CachePut keeps value under key (replacing one kept before) until
	// expires (zero: no expiry).
	CachePut(ctx context.Context, key string, value []byte, now, expires time.Time) error
}

// CacheLimit is the most entries a Cache keeps (a variable for tests).
var CacheLimit = 10_000

// CacheOf returns st's Cache, if it keeps one.
func CacheOf(st Store) (Cache, bool) {
	c, ok := st.(Cache)
	return c, ok
}

// WriteCounter is a store that counts the write transactions it has
// committed since it was opened (a run's step, a batch of events, a
// queue's change), for the server's metrics and the load test.
type WriteCounter interface {
	WriteTransactions() int64
}
