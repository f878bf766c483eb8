// Package suspend is the snapshot exchange of a suspend and of a
// checkpoint: it asks a session's remote, through its gateway connection,
// for a workspace snapshot, waits for the remote's answer and its upload,
// checks one against the other, stores the snapshot's metadata and takes it
// back when the commit that follows fails. The server drives it: its HTTP
// handlers (the suspend and resume routes, the snapshot upload) and the
// state machine's transitions (internal/lifecycle) stay there.
package suspend

import (
	"sync"
	"time"

	"github.com/outpost-sh/outpost/api"
)

// Op is one suspend (or checkpoint) in progress.
type Op struct {
	// Epoch is the claim whose remote takes the snapshot.
	Epoch int64
	// Key is the blob key the upload goes to.
	Key string
	// Checkpoint is set for a checkpoint: the remote answers checkpointed
	// and goes on.
	Checkpoint bool
	// Req is what the suspend does about running calls; zero for a
	// checkpoint.
	Req Request
	// Started is when the suspend began.
	Started time.Time
	// suspended receives the remote's suspended (or checkpointed) frame.
	suspended chan api.Frame

	mu           sync.Mutex // guards upload and snapshotting
	upload       *Upload
	snapshotting bool
}

// Request is what a suspend does about the calls running when it begins:
// it snapshots the workspace only once none runs.
type Request struct {
	// Wait bounds the wait for running calls; zero means CallWait.
	Wait time.Duration
	// Interrupt stops the running calls instead of waiting for them.
	Interrupt bool
}

// setSnapshotting records that no call runs any more and the snapshot is
// being taken.
func (op *Op) setSnapshotting() {
	op.mu.Lock()
	defer op.mu.Unlock()
	op.snapshotting = true
}

// Snapshotting reports whether the wait for calls is over.
func (op *Op) Snapshotting() bool {
	op.mu.Lock()
	defer op.mu.Unlock()
	return op.snapshotting
}

// Upload is what the server made of the remote's upload of the snapshot.
type Upload struct {
	Size   int64
	SHA256 string
	Err    string // why it was refused; "" when stored
	Status int    // the HTTP status of the refusal
}

// SetUpload records the outcome of the remote's upload.
func (op *Op) SetUpload(u Upload) {
	op.mu.Lock()
	defer op.mu.Unlock()
	op.upload = &u
}

// Uploaded returns the outcome of the upload, or nil before one.
func (op *Op) Uploaded() *Upload {
	op.mu.Lock()
	defer op.mu.Unlock()
	return op.upload
}

// Ops tracks the suspends and checkpoints in progress, one per session at
// most. The zero value is ready.
type Ops struct {
	mu  sync.Mutex // guards ops, failed, unrestored, interrupted and lastErr
	ops map[string]*Op
	// interrupted holds, by session and call, why a suspend stopped the
	// call, until its result takes it (TakeInterrupted).
	interrupted map[string]map[int64]string
	// lastErr holds, by session, why its last suspend failed, until the
	// next one begins.
	lastErr map[string]error
	// failed holds, by session, the UpdatedAt of a session whose automatic
	// suspend failed: it is not tried again until the session changes.
	failed map[string]time.Time
	// unrestored holds, by session, the claim epoch whose remote could not
	// restore the session's snapshot, and why: its workspace is not the
	// session's, and a snapshot of it (suspend or checkpoint) would replace
	// the good one.
	unrestored map[string]unrestoredClaim
}

// unrestoredClaim is a claim whose remote could not restore the snapshot.
type unrestoredClaim struct {
	epoch int64
	why   string
}

// MarkUnrestored records that the remote of the claim epoch could not
// restore the session's snapshot.
func (o *Ops) MarkUnrestored(sessionID string, epoch int64, why string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.unrestored == nil {
		o.unrestored = map[string]unrestoredClaim{}
	}
	o.unrestored[sessionID] = unrestoredClaim{epoch: epoch, why: why}
}

// UnrestoredWhy returns why the claim epoch's workspace is not the session's
// snapshot, or "" when nothing says so. An entry of an older claim goes: a
// new claim restores again.
func (o *Ops) UnrestoredWhy(sessionID string, epoch int64) string {
	o.mu.Lock()
	defer o.mu.Unlock()
	u, ok := o.unrestored[sessionID]
	if ok && u.epoch < epoch {
		delete(o.unrestored, sessionID)
		return ""
	}
	return u.why
}

// AutoFailed reports whether an automatic suspend of the session failed
// while it was as updated at.
func (o *Ops) AutoFailed(sessionID string, updated time.Time) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	at, ok := o.failed[sessionID]
	if ok && !at.Equal(updated) {
		delete(o.failed, sessionID)
		return false
	}
	return ok
}

// MarkAutoFailed records that an automatic suspend of the session failed
// while it was as updated at.
func (o *Ops) MarkAutoFailed(sessionID string, updated time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.failed == nil {
		o.failed = map[string]time.Time{}
	}
	o.failed[sessionID] = updated
}

// Start registers a suspend of the session by the claim of epoch, or
// returns nil when one is in progress.
func (o *Ops) Start(sessionID string, epoch int64, key string) *Op {
	return o.start(sessionID, epoch, key, false, Request{}, time.Time{})
}

// StartSuspend is Start for a suspend made as req says, begun at now.
func (o *Ops) StartSuspend(sessionID string, epoch int64, key string, req Request, now time.Time) *Op {
	return o.start(sessionID, epoch, key, false, req, now)
}

// StartCheckpoint is Start for a checkpoint.
func (o *Ops) StartCheckpoint(sessionID string, epoch int64, key string) *Op {
	return o.start(sessionID, epoch, key, true, Request{}, time.Time{})
}

func (o *Ops) start(sessionID string, epoch int64, key string, checkpoint bool, req Request, now time.Time) *Op {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.ops[sessionID] != nil {
		return nil
	}
	if o.ops == nil {
		o.ops = map[string]*Op{}
	}
	op := &Op{Epoch: epoch, Key: key, Checkpoint: checkpoint, Req: req, Started: now, suspended: make(chan api.Frame, 1)}
	o.ops[sessionID] = op
	return op
}

// Get returns the suspend or checkpoint of the session in progress, or nil.
func (o *Ops) Get(sessionID string) *Op {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.ops[sessionID]
}

// Finish unregisters op, once it is over.
func (o *Ops) Finish(sessionID string, op *Op) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.ops[sessionID] == op {
		delete(o.ops, sessionID)
	}
}

// Deliver hands a remote's suspended (or checkpointed) frame f, from the
// claim of epoch, to the suspend (or checkpoint) waiting for it; false when
// none of that claim and kind is.
func (o *Ops) Deliver(sessionID string, epoch int64, f api.Frame) bool {
	op := o.Get(sessionID)
	if op == nil || op.Epoch != epoch || op.Checkpoint != (f.Type == api.FrameCheckpointed) {
		return false
	}
	select {
	case op.suspended <- f:
	default:
	}
	return true
}

// MarkInterrupted records that a suspend stops the call seq, and why.
func (o *Ops) MarkInterrupted(sessionID string, seq int64, why string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.interrupted == nil {
		o.interrupted = map[string]map[int64]string{}
	}
	if o.interrupted[sessionID] == nil {
		o.interrupted[sessionID] = map[int64]string{}
	}
	o.interrupted[sessionID][seq] = why
}

// TakeInterrupted returns why a suspend stopped the call seq, and forgets
// it; ok is false when no suspend did.
func (o *Ops) TakeInterrupted(sessionID string, seq int64) (why string, ok bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	why, ok = o.interrupted[sessionID][seq]
	if ok {
		delete(o.interrupted[sessionID], seq)
		if len(o.interrupted[sessionID]) == 0 {
			delete(o.interrupted, sessionID)
		}
	}
	return why, ok
}

// setLastErr records why the session's last suspend failed; nil clears it.
func (o *Ops) setLastErr(sessionID string, err error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if err == nil {
		delete(o.lastErr, sessionID)
		return
	}
	if o.lastErr == nil {
		o.lastErr = map[string]error{}
	}
	o.lastErr[sessionID] = err
}

// LastErr returns why the session's last suspend failed, or nil.
func (o *Ops) LastErr(sessionID string) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.lastErr[sessionID]
}
