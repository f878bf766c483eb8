package suspend

import (
	"context"
	"errors"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/gateway"
)

// CaptureWait bounds how long a capture waits for a call in flight to
// finish.
const CaptureWait = 2 * time.Minute

// Capture takes a snapshot of a running session's workspace without
// stopping it (a fork's): it holds back new calls, waits up to wait
// (CaptureWait when zero) until none is in flight and asks the remote for
// a checkpoint, which uploads to op.Key (op from Ops.StartCheckpoint). The
// calls stay held back when it returns, so the caller can read the
// transcript the snapshot matches; the caller unpauses c.Gate, whatever
// Capture returns.
func Capture(ctx context.Context, c *gateway.Conn, op *Op, wait time.Duration) (api.SnapshotInfo, error) {
	c.Gate.Pause()
	if wait <= 0 {
		wait = CaptureWait
	}
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	if err := c.Gate.WaitIdle(wctx, c.Done()); errors.Is(err, gateway.ErrConnEnded) {
		return api.SnapshotInfo{}, conflict("The remote of session %s disconnected before its workspace could be copied; try again once it is back.", c.SessionID)
	} else if err != nil && ctx.Err() == nil {
		return api.SnapshotInfo{}, conflict("A call of session %s is still running after %s, and its workspace is copied only between calls; try again once the call has finished.",
			c.SessionID, wait)
	} else if err != nil {
		return api.SnapshotInfo{}, conflict("The copy of session %s's workspace was stopped while it waited for a call to finish; the session goes on running.", c.SessionID)
	}
	op.setSnapshotting()
	return Ask(ctx, c, op, api.FrameCheckpoint)
}
