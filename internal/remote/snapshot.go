package remote

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/snapshot"
)

const (
	// snapshotRestoreTimeout bounds the download and restore of a snapshot.
	snapshotRestoreTimeout = 30 * time.Minute
	// inPlaceFile, at the workspace's top, holds the SHA-256 of the
	// snapshot a successful suspend uploaded, while the workspace is still
	// exactly that snapshot. A remote that starts on the same workspace (a
	// volume kept across the suspend) and is asked to restore that very
	// snapshot keeps the workspace as it is instead of downloading it. It
	// lives in the workspace, not the state dir, so that a workspace cleared
	// or replaced meanwhile (a long-lived worker clears its workspace
	// between sessions but keeps the state dirs) takes the record with it.
	// Every remote removes the file when it starts, before any call can
	// change the workspace, so it never outlives the state it describes.
	inPlaceFile = ".outpost-snapshot-in-place"
	// unrestoredFile, in the state dir, says that the workspace is not the
	// snapshot it was to be restored from: the restore failed, or the
	// remote stopped during it. It is written before the restore starts
	// and removed once it succeeded. While it is there the remote takes
	// no snapshot (suspend, checkpoint) of the workspace: the server would
	// store it over the session's good one, and the workspace the snapshot
	// holds would be lost. It lives in the state dir, which a restore
	// never touches, so that a remote started again on the same state
	// dir keeps refusing.
	unrestoredFile = "snapshot-unrestored"
)

// Protocol version 3 moves a workspace with the session: on suspend the
// remote archives its workspace (internal/snapshot) and uploads it to the
// gateway's api.SnapshotPath; a later remote whose welcome names that
// snapshot downloads it and restores the workspace before any call runs.
// Both stream: the archive is never whole in memory. The remote's state
// directory (its journal, its git credential helper) is left out of the
// archive and kept on restore when it lies inside the workspace: it belongs
// to this remote process, not to the session's files.

// errUploadStopped ends the archive writer when the upload request ended
// before it read the whole archive.
var errUploadStopped = errors.New("the upload stopped before the end of the archive")

// snapshotURL is the snapshot endpoint of the gateway URL gw: its scheme
// made http or https and api.GatewayPath replaced by api.SnapshotPath, so a
// gateway behind a path prefix keeps it.
func snapshotURL(gw string) (string, error) {
	return api.GatewayHTTPURL(gw, api.SnapshotPath)
}

// snapshotOptions leaves the state directory out when it is inside the
// workspace.
func (s *session) snapshotOptions() snapshot.Options {
	var o snapshot.Options
	rel, err := filepath.Rel(s.opts.WorkDir, s.opts.StateDir)
	if err == nil && rel != "." && filepath.IsLocal(rel) {
		o.Exclude = []string{filepath.ToSlash(rel)}
	}
	return o
}

// snapshotRequest is a request to the snapshot endpoint with the remote's
// credentials.
func (s *session) snapshotRequest(ctx context.Context, method string, body io.Reader) (*http.Request, error) {
	u, err := snapshotURL(s.opts.GatewayURL)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, method, u, body)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+s.opts.ConnectToken)
	req.Header.Set(api.HeaderSessionID, s.opts.SessionID)
	if body != nil {
		req.Header.Set("Content-Type", "application/zstd")
	}
	return req, nil
}

// uploadSnapshot archives the workspace into a PUT to the snapshot
// endpoint, through a pipe, and returns what it uploaded.
func (s *session) uploadSnapshot(ctx context.Context) (api.SnapshotInfo, error) {
	pr, pw := io.Pipe()
	req, err := s.snapshotRequest(ctx, http.MethodPut, pr)
	if err != nil {
		return api.SnapshotInfo{}, fmt.Errorf("upload the workspace snapshot: %w", err)
	}
	var info api.SnapshotInfo
	var werr error
	written := make(chan struct{})
	go func() {
		defer close(written)
		info, werr = snapshot.Write(ctx, pw, s.opts.WorkDir, s.snapshotOptions())
		pw.CloseWithError(werr) // nil: the archive's end
	}()
	resp, err := s.opts.HTTPClient.Do(req)
	pr.CloseWithError(errUploadStopped) // the writer stops if the request ended early
	<-written
	if resp != nil {
		defer resp.Body.Close()
	}
	switch {
	case werr != nil && !errors.Is(werr, errUploadStopped):
		return info, werr // the archive failed (too large, unreadable): the server saw a broken body
	case err != nil:
		return info, fmt.Errorf("upload the workspace snapshot: %w", err)
	case resp.StatusCode/100 != 2:
		return info, fmt.Errorf("upload the workspace snapshot: the gateway answered %s", httpMessage(resp))
	case werr != nil:
		return info, fmt.Errorf("upload the workspace snapshot: the gateway answered %s before reading it all", resp.Status)
	}
	return info, nil
}

// markInPlace records, after a successful suspend, that the workspace is
// the snapshot sha (see inPlaceFile). A failure only costs a download later.
func (s *session) markInPlace(sha string) {
	if s.opts.WorkDir == "" || sha == "" {
		return
	}
	// Whatever the session left under that name (a link, say) goes first,
	// and O_EXCL never follows a link.
	path := filepath.Join(s.opts.WorkDir, inPlaceFile)
	_ = os.Remove(path)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err == nil {
		_, err = f.WriteString(sha + "\n")
		err = errors.Join(err, f.Close())
	}
	if err != nil {
		s.log.Warn("record the snapshot kept in place", "err", err)
	}
}

// takeInPlace returns the snapshot the workspace still is, if a suspend on
// this state dir said so, and removes the record: from now on calls may
// change the workspace.
func (s *session) takeInPlace() string {
	if s.opts.WorkDir == "" {
		return ""
	}
	path := filepath.Join(s.opts.WorkDir, inPlaceFile)
	st, err := os.Lstat(path)
	if err != nil {
		return ""
	}
	var b []byte
	if st.Mode().IsRegular() {
		b, _ = os.ReadFile(path)
	}
	if err := os.Remove(path); err != nil {
		s.log.Warn("remove the record of the snapshot kept in place", "err", err)
		return "" // it could outlive changes: do not trust it
	}
	return strings.TrimSpace(string(b))
}

// restoreSnapshot downloads want and restores the workspace from it. It
// returns what was restored, or want with Error; either way with how long
// it took. A workspace that is still want (inPlace, from takeInPlace) is
// kept as it is.
func (s *session) restoreSnapshot(ctx context.Context, want api.SnapshotInfo, inPlace string) api.SnapshotInfo {
	start := time.Now()
	if inPlace != "" && inPlace == want.SHA256 {
		s.log.Info("the workspace already holds the snapshot to restore (kept on this machine's volume); nothing to download", "sha256", want.SHA256)
		if s.opts.StateDir != "" { // the workspace is the session's again
			_ = os.Remove(filepath.Join(s.opts.StateDir, unrestoredFile))
		}
		return api.SnapshotInfo{Size: want.Size, SHA256: want.SHA256, Files: want.Files, Bytes: want.Bytes, InPlace: true,
			DurationMS: time.Since(start).Milliseconds()}
	}
	ctx, cancel := context.WithTimeout(ctx, snapshotRestoreTimeout)
	defer cancel()
	marker := ""
	if s.opts.StateDir != "" {
		marker = filepath.Join(s.opts.StateDir, unrestoredFile)
		if err := os.WriteFile(marker, []byte(want.SHA256+"\n"), 0o600); err != nil {
			s.log.Warn("record the restore in progress", "err", err)
		}
	}
	info, err := s.downloadSnapshot(ctx, want)
	if err != nil {
		s.log.Warn("restore the workspace snapshot", "err", err)
		info = api.SnapshotInfo{Size: want.Size, SHA256: want.SHA256, Error: err.Error()}
		s.mu.Lock()
		s.unrestored = err.Error()
		s.mu.Unlock()
	} else {
		s.log.Info("restored the workspace snapshot", "size", info.Size, "files", info.Files, "bytes", info.Bytes)
		if marker != "" {
			if err := os.Remove(marker); err != nil && !errors.Is(err, os.ErrNotExist) {
				s.log.Warn("remove the record of the restore in progress", "err", err)
			}
		}
	}
	info.DurationMS = time.Since(start).Milliseconds()
	return info
}

func (s *session) downloadSnapshot(ctx context.Context, want api.SnapshotInfo) (api.SnapshotInfo, error) {
	req, err := s.snapshotRequest(ctx, http.MethodGet, nil)
	if err != nil {
		return api.SnapshotInfo{}, fmt.Errorf("download the workspace snapshot: %w", err)
	}
	resp, err := s.opts.HTTPClient.Do(req)
	if err != nil {
		return api.SnapshotInfo{}, fmt.Errorf("download the workspace snapshot: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return api.SnapshotInfo{}, fmt.Errorf("download the workspace snapshot: the gateway answered %s", httpMessage(resp))
	}
	return snapshot.Restore(ctx, resp.Body, s.opts.WorkDir, want, s.snapshotOptions())
}

// unrestoredReasonLocked says why the workspace must not be snapshotted: it is not
// the snapshot a restore was asked for (see unrestoredFile); "" when it may.
// Called with s.mu held.
func (s *session) unrestoredReasonLocked() string {
	if s.unrestored != "" {
		return "the restore of the session's snapshot on this machine failed (" + s.unrestored + ")"
	}
	if s.opts.StateDir == "" {
		return ""
	}
	if _, err := os.Lstat(filepath.Join(s.opts.StateDir, unrestoredFile)); err == nil {
		return "a restore of the session's snapshot on this machine did not complete"
	}
	return ""
}
