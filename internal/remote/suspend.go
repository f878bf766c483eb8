package remote

import (
	"context"
	"time"

	"github.com/outpost-sh/outpost/api"
)

// On suspend (protocol version 3) the remote stops accepting calls, lets
// the running ones finish — the server sends suspend only when none runs,
// so this is the rare call that raced it — and cancels those still running
// after suspendDrain, so that a call hung on I/O cannot hold the machine.
// It then snapshots the workspace and answers suspended. When the snapshot
// fails (too large, an upload error) the answer carries the error and the
// remote accepts calls again: the session stays running. When it succeeds
// the remote refuses calls until the server ends the session (FrameEnd),
// and answers a repeated suspend with the same suspended frame.

const (
	// suspendDrain is how long a suspend waits for running calls before it
	// cancels them.
	suspendDrain = 10 * time.Second
	// suspendCancelWait is how long it then waits for cancelled calls to
	// end before it snapshots anyway.
	suspendCancelWait = 5 * time.Second
)

// suspendingError answers a call that arrives during or after a suspend.
const suspendingError = "the session is being suspended; the call did not run"

// handleSuspend starts the suspend in the background, once.
func (s *session) handleSuspend() {
	if s.version < api.SnapshotsSince {
		s.log.Warn("ignoring a suspend frame: this remote speaks a protocol version without snapshots", "protocol_version", s.version)
		return
	}
	s.mu.Lock()
	if s.suspended != nil { // the answer may have been lost with a connection
		reply := *s.suspended
		s.mu.Unlock()
		s.out.pushFrame(reply)
		return
	}
	if s.suspending {
		s.mu.Unlock()
		return
	}
	s.suspending = true
	ctx := s.callCtx
	s.wg.Add(1)
	s.mu.Unlock()
	go func() {
		defer s.wg.Done()
		s.suspend(ctx)
	}()
}

// suspend drains the calls, uploads the snapshot and queues the answer:
// a checkpoint (see checkpoint.go) that stops the session when it succeeds.
func (s *session) suspend(ctx context.Context) {
	s.log.Info("suspending the session: snapshotting the workspace")
	s.waitRestored(ctx) // a workspace still being restored is not snapshotted
	s.drainCalls(ctx)
	info, err := s.snapshotWorkspace(ctx)
	if ctx.Err() != nil {
		return // Serve is stopping: nobody to answer
	}
	reply := api.Frame{Type: api.FrameSuspended, Snapshot: &info}
	s.mu.Lock()
	if err != nil {
		s.suspending = false // the session goes on here
	} else {
		s.suspended = &reply
	}
	s.mu.Unlock()
	if err == nil {
		s.markInPlace(info.SHA256) // no call runs on this workspace any more
	}
	if err != nil {
		s.log.Warn("suspend failed; the session goes on", "err", err)
	}
	s.out.pushFrame(reply)
}

// drainCalls waits until no call runs, cancelling those still running
// after suspendDrain.
func (s *session) drainCalls(ctx context.Context) {
	if s.waitIdle(ctx, suspendDrain) {
		return
	}
	s.mu.Lock()
	for seq, cancel := range s.running {
		s.log.Warn("cancelling a call still running at suspend", "seq", seq)
		cancel()
	}
	s.mu.Unlock()
	if !s.waitIdle(ctx, suspendCancelWait) {
		s.log.Warn("calls still running after their cancel; snapshotting anyway")
	}
}

// waitIdle reports whether no call runs within d.
func (s *session) waitIdle(ctx context.Context, d time.Duration) bool {
	timer := time.NewTimer(d)
	defer timer.Stop()
	for {
		s.mu.Lock()
		idle := len(s.running) == 0
		s.mu.Unlock()
		if idle {
			return true
		}
		select {
		case <-s.callsChanged:
		case <-timer.C:
			return false
		case <-ctx.Done():
			return false
		}
	}
}

// refuseCall answers f at once with suspendingError: a call that arrives
// during or after a suspend does not run.
func (s *session) refuseCall(f api.Frame) {
	res := api.Frame{Type: api.FrameResult, Seq: f.Seq, Tool: f.Tool, Error: suspendingError}
	if err := s.journal.done(res); err != nil {
		s.log.Error("journal a refused call", "seq", f.Seq, "err", err)
	}
	s.mu.Lock()
	s.done[f.Seq] = &doneEntry{frame: res, queued: true}
	s.mu.Unlock()
	s.out.pushResult(f.Seq)
}
