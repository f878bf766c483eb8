package worker

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/client"
	"github.com/outpost-sh/outpost/internal/fleet"
)

// A session's state dir, DataDir/sessions/<id>, holds what its remote
// keeps on this machine — the call journal, the git credential helper with
// the session's git tokens, the browser profile, under bwrap the sandbox's
// private HOME and /tmp — and remote.log, the worker's copy of the
// remote's output. Most of it is secret and none of it is of use once the
// session has left this machine, so the worker deletes it:
//
//   - A session over for this machine (it ended; it was suspended, and a
//     resume restores its snapshot; it is gone; or another machine holds
//     its claim) loses its whole state dir once its remote has exited and
//     the claim is released.
//   - A session handed back to the queue unfinished (its remote failed, or
//     was stopped) keeps only what a later remote of it here needs: the
//     journal, from which that remote reports the calls it ran and resends
//     results the server may not hold (no call runs twice, no result is
//     lost), and remote.log, which says why the remote stopped. That rest
//     goes when the session's next remote here exits as above, or when the
//     worker sees in the queue, at its start and after each session, that
//     the session ended, was suspended or went to another machine.

var _ fleet.Releaser = (*worker)(nil)

// journalDirName is the directory of a state dir that holds the remote's
// call journal.
const journalDirName = "journal"

// sweepTimeout bounds one look at the queue for the state dirs kept.
const sweepTimeout = 30 * time.Second

// stateDir is the state dir of session id.
func (w *worker) stateDir(id string) (string, error) {
	if id == "" || !filepath.IsLocal(id) || strings.ContainsAny(id, `/\`) || strings.HasPrefix(id, ".") {
		return "", fmt.Errorf("session id %q cannot name a state directory", id)
	}
	return filepath.Join(w.opts.DataDir, "sessions", id), nil
}

// Released is the worker's fleet.Releaser: once a session's claim is
// released, its state dir goes, or all of it but what a resume here needs,
// and the other sessions' kept state dirs are looked at again.
func (w *worker) Released(ctx context.Context, s *fleet.Session, resumable bool) {
	log := w.log.With("session", s.ID)
	if dir, err := w.stateDir(s.ID); err == nil {
		if err := pruneStateDir(dir, resumable); err != nil {
			log.Warn("cannot delete the session's state dir", "state_dir", dir, "err", err)
		} else if resumable {
			log.Debug("kept the session's journal for a resume on this machine", "state_dir", dir)
		}
	}
	w.sweepStateDirs(ctx, s.ID, false)
}

// pruneStateDir deletes the state dir dir, or with resumable everything in
// it but the journal and remote.log. Nothing is followed: a journal that is
// not a directory, or a remote.log that is not a regular file, is deleted.
func pruneStateDir(dir string, resumable bool) error {
	if !resumable {
		return removeAll(dir)
	}
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read %s: %w", dir, err)
	}
	var errs []error
	for _, e := range entries {
		switch name := e.Name(); {
		case name == journalDirName && e.IsDir():
		case name == remoteLogName && e.Type().IsRegular():
		default:
			errs = append(errs, removeAll(filepath.Join(dir, name)))
		}
	}
	return errors.Join(errs...)
}

// sweepStateDirs prunes the state dirs other than skip's as the queue
// shows their sessions: deleted when over for this machine, cut to what a
// resume needs otherwise; one the queue cannot be asked about is left as
// it is. At the worker's start (start) it also deletes the state dirs of
// pre-started remotes that an earlier run left.
func (w *worker) sweepStateDirs(ctx context.Context, skip string, start bool) {
	if w.c == nil {
		return
	}
	sessions := filepath.Join(w.opts.DataDir, "sessions")
	entries, err := os.ReadDir(sessions)
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			w.log.Warn("cannot read the state dirs", "dir", sessions, "err", err)
		}
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), sweepTimeout)
	defer cancel()
	for _, e := range entries {
		id := e.Name()
		if id == skip || !e.IsDir() {
			continue
		}
		dir := filepath.Join(sessions, id)
		if strings.HasPrefix(id, prestartPrefix) {
			if start {
				_ = removeAll(dir)
			}
			continue
		}
		if _, err := w.stateDir(id); err != nil {
			continue
		}
		over, err := w.overHere(ctx, id)
		if err != nil {
			w.log.Debug("cannot tell whether a kept state dir is still needed", "session", id, "err", err)
			continue
		}
		if err := pruneStateDir(dir, !over); err != nil {
			w.log.Warn("cannot delete a state dir", "state_dir", dir, "err", err)
		} else if over {
			w.log.Debug("deleted the state dir of a session no longer for this machine", "session", id)
		}
	}
}

// overHere reports whether the queue shows session id over for this
// worker: gone, ended, suspended, or claimed by another acceptor.
func (w *worker) overHere(ctx context.Context, id string) (bool, error) {
	e, err := w.c.Queue.Get(ctx, id)
	switch {
	case client.IsNotFound(err):
		return true, nil
	case err != nil:
		return false, err
	}
	switch {
	case e.Status.SessionStatus == api.QueueSessionTerminated, e.Status.SessionStatus == api.QueueSessionSuspended:
		return true, nil
	case e.Status.Phase == api.PhaseClaimed && e.Status.AcceptorID != nil && *e.Status.AcceptorID != w.id.AcceptorID:
		return true, nil
	}
	return false, nil
}
