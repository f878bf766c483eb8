package suspend

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/blob"
	"github.com/outpost-sh/outpost/internal/gateway"
	"github.com/outpost-sh/outpost/internal/lifecycle"
	"github.com/outpost-sh/outpost/internal/store"
)

const (
	// CallWait bounds the wait for a call in flight to finish before a
	// suspend gives up.
	CallWait = 10 * time.Minute
	// SnapshotWait bounds the remote's snapshot and upload.
	SnapshotWait = 15 * time.Minute
)

// Error is a failed exchange that is not a conflict (those are
// *lifecycle.Error of kind lifecycle.ErrConflict): the HTTP status and
// api code a client is answered with, and the sentence it is shown.
type Error struct {
	Status  int
	Code    string
	Message string
}

func (e *Error) Error() string { return e.Message }

// conflict is a refusal the client answers by trying again later.
func conflict(format string, args ...any) error {
	return &lifecycle.Error{Kind: lifecycle.ErrConflict, Format: format, Args: args}
}

// Take pauses the session's calls, waits until none is in flight, asks the
// remote for its snapshot and returns it once uploaded and checked. The
// caller unpauses on error.
//
// The wait for calls in flight is op.Req.Wait (CallWait when zero); past it
// the suspend is withdrawn.
func Take(ctx context.Context, c *gateway.Conn, op *Op) (api.SnapshotInfo, error) {
	c.Gate.Pause()
	wait := op.Req.Wait
	if wait <= 0 {
		wait = CallWait
	}
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	if err := c.Gate.WaitIdle(wctx, c.Done()); errors.Is(err, gateway.ErrConnEnded) {
		return api.SnapshotInfo{}, conflict("The remote of session %s disconnected before the suspend; try again once it is back.", c.SessionID)
	} else if err != nil && ctx.Err() == nil {
		return api.SnapshotInfo{}, conflict("A call of session %s is still running after %s: the suspend is withdrawn and the session goes on running. Suspend it again once the call has finished, or with interrupt (outpost sessions suspend --interrupt) to stop the call.",
			c.SessionID, wait)
	} else if err != nil {
		return api.SnapshotInfo{}, conflict("The suspend of session %s was stopped while it waited for a call to finish; the session goes on running.", c.SessionID)
	}
	op.setSnapshotting()
	return Ask(ctx, c, op, api.FrameSuspend)
}

// Ask sends the remote the frame typ (suspend or checkpoint), waits for its
// answer and returns the snapshot once uploaded and checked. No call is in
// flight and the gate is paused.
func Ask(ctx context.Context, c *gateway.Conn, op *Op, typ string) (api.SnapshotInfo, error) {
	if err := c.Send(ctx, api.Frame{Type: typ}); err != nil {
		return api.SnapshotInfo{}, conflict("The %s could not be sent to the remote of session %s: %v.", typ, c.SessionID, err)
	}
	wctx, cancel := context.WithTimeout(ctx, SnapshotWait)
	defer cancel()
	var f api.Frame
	select {
	case f = <-op.suspended:
	case <-c.Done():
		return api.SnapshotInfo{}, &Error{http.StatusBadGateway, api.CodeUnavailable, fmt.Sprintf("The remote of session %s disconnected while it took its snapshot; the session goes on running.", c.SessionID)}
	case <-wctx.Done():
		return api.SnapshotInfo{}, &Error{http.StatusGatewayTimeout, api.CodeUnavailable, fmt.Sprintf("The remote of session %s took longer than %s to take its snapshot; the session goes on running.", c.SessionID, SnapshotWait)}
	}
	// The remote's own failure (a file it cannot read) breaks its upload
	// too: its answer says why, so it goes before the upload's, but for a
	// refusal of the server's own (too large, its store failing).
	up := op.Uploaded()
	switch {
	case up != nil && up.Err != "" && up.Status != http.StatusBadGateway:
		code := api.CodeInternal
		if up.Status == http.StatusRequestEntityTooLarge {
			code = api.CodeTooLarge
		}
		return api.SnapshotInfo{}, &Error{up.Status, code, up.Err + " The session goes on running."}
	case f.Snapshot == nil:
		return api.SnapshotInfo{}, &Error{http.StatusBadGateway, api.CodeUnavailable, fmt.Sprintf("The remote of session %s answered %s without a snapshot; the session goes on running.", c.SessionID, typ)}
	case f.Snapshot.Error != "":
		return api.SnapshotInfo{}, &Error{http.StatusBadGateway, api.CodeUnavailable, fmt.Sprintf("The remote of session %s could not take its snapshot: %s The session goes on running.", c.SessionID, lifecycle.Sentence(f.Snapshot.Error))}
	case up != nil && up.Err != "":
		return api.SnapshotInfo{}, &Error{up.Status, api.CodeUnavailable, up.Err + " The session goes on running."}
	case up == nil:
		return api.SnapshotInfo{}, &Error{http.StatusBadGateway, api.CodeUnavailable, fmt.Sprintf("The remote of session %s answered %s before its snapshot was uploaded; the session goes on running.", c.SessionID, typ)}
	case f.Snapshot.SHA256 != "" && f.Snapshot.SHA256 != up.SHA256, f.Snapshot.Size != 0 && f.Snapshot.Size != up.Size:
		return api.SnapshotInfo{}, &Error{http.StatusBadGateway, api.CodeUnavailable, fmt.Sprintf("The snapshot the server received for session %s (%d bytes, sha256 %s) is not the one its remote sent (%d bytes, sha256 %s); the session goes on running.",
			c.SessionID, up.Size, up.SHA256, f.Snapshot.Size, f.Snapshot.SHA256)}
	}
	info := *f.Snapshot
	info.Size, info.SHA256, info.Error = up.Size, up.SHA256, ""
	return info, nil
}

// Put stores what op uploaded as the session's snapshot, taken at now
// (what names it in the error: a snapshot or a checkpoint), and returns the
// snapshot it replaced; when it cannot, the upload's blob goes.
func Put(ctx context.Context, st store.Store, blobs blob.Store, sessionID string, op *Op, info api.SnapshotInfo, now time.Time, what string) (store.Snapshot, error) {
	sn := store.Snapshot{SessionID: sessionID, BlobKey: op.Key, Size: info.Size, SHA256: info.SHA256,
		Files: info.Files, Bytes: info.Bytes, Epoch: op.Epoch, CreatedAt: now}
	prev, err := st.PutSnapshot(ctx, sn)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		_ = blobs.Delete(ctx, op.Key)
		return prev, fmt.Errorf("store %s of %s: %w", what, sessionID, err)
	}
	return prev, nil
}

// UndoPut takes back a Put of key whose transaction failed: the snapshot
// it replaced (prev) becomes the session's again, or, when it replaced
// none, the row goes; key's blob is deleted either way.
func UndoPut(ctx context.Context, st store.Store, blobs blob.Store, log *slog.Logger, sessionID string, prev store.Snapshot, key string) {
	if prev.BlobKey != "" && prev.BlobKey != key {
		if _, err := st.PutSnapshot(ctx, prev); err != nil {
			log.Warn("put back the snapshot a new one replaced", "session", sessionID, "err", err)
		}
	} else {
		_ = st.DeleteSnapshot(ctx, sessionID, key)
	}
	_ = blobs.Delete(ctx, key)
}

// DeleteReplaced deletes the blob of prev, the snapshot the one under key
// replaced, once the new one is committed.
func DeleteReplaced(ctx context.Context, blobs blob.Store, log *slog.Logger, sessionID string, prev store.Snapshot, key string) {
	if prev.BlobKey != "" && prev.BlobKey != key {
		if err := blobs.Delete(ctx, prev.BlobKey); err != nil {
			log.Warn("delete replaced snapshot", "session", sessionID, "key", prev.BlobKey, "err", err)
		}
	}
}

// Taken says what a snapshot holds and what it took, for its event on the
// transcript.
func Taken(info api.SnapshotInfo) string {
	return fmt.Sprintf("%s in %d files, %s compressed, in %s",
		api.ByteSize(info.Bytes), info.Files, api.ByteSize(info.Size), time.Duration(info.DurationMS)*time.Millisecond)
}
