package server

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"mime"
	"net/http"
	"path"
	"strings"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/blob"
	"github.com/outpost-sh/outpost/internal/gateway"
	"github.com/outpost-sh/outpost/internal/redact"
)

// Artifacts are kept in the blob store (s.artifactBlobs, blobs.go) as
// <session>/<name>, with their metadata in <session>/.meta/<name>.json
// beside them: under <data-dir>/artifacts with the file store, in the
// database with PostgreSQL, where every replica serves every session's.
// Artifact names start with a letter or digit, so .meta cannot clash with
// one.

// artifactKey is the blob key of an artifact; artifactMetaKey that of its
// metadata.
func artifactKey(sessionID, name string) string { return sessionID + "/" + name }

func artifactMetaKey(sessionID, name string) string {
	return sessionID + "/.meta/" + name + ".json"
}

// maxArtifactMetaBytes bounds the metadata of one artifact.
const maxArtifactMetaBytes = 64 << 10

// lockArtifacts takes the store's lock that serializes storing and
// deleting the artifacts of one session, so the per-session limit holds
// whichever replicas store and delete them.
func (s *Server) lockArtifacts(ctx context.Context, sessionID string) (func(), error) {
	unlock, err := s.store.Lock(ctx, "artifacts:"+sessionID, false)
	if err != nil {
		return nil, fmt.Errorf("take the artifacts lock of %s: %w", sessionID, err)
	}
	return unlock, nil
}

// listArtifactsOf reads the metadata of a session's artifacts, sorted by
// name.
func (s *Server) listArtifactsOf(ctx context.Context, sessionID string) ([]api.Artifact, error) {
	infos, err := s.artifactBlobs.List(ctx, sessionID+"/.meta/")
	if err != nil {
		return nil, fmt.Errorf("list artifacts: %w", err)
	}
	out := []api.Artifact{}
	for _, in := range infos {
		base := path.Base(in.Key)
		name, ok := strings.CutSuffix(base, ".json")
		if !ok || api.ValidateArtifactName(name) != nil {
			continue
		}
		a, err := s.readArtifactMeta(ctx, sessionID, name)
		if err != nil {
			continue // deleted meanwhile, or unreadable
		}
		out = append(out, a)
	}
	return out, nil // List orders by key, so by name
}

func (s *Server) readArtifactMeta(ctx context.Context, sessionID, name string) (api.Artifact, error) {
	var a api.Artifact
	r, _, err := s.artifactBlobs.Get(ctx, artifactMetaKey(sessionID, name))
	if err != nil {
		return a, err
	}
	defer r.Close()
	b, err := io.ReadAll(io.LimitReader(r, maxArtifactMetaBytes))
	if err != nil {
		return a, fmt.Errorf("artifact %s metadata: %w", name, err)
	}
	if err := json.Unmarshal(b, &a); err != nil {
		return a, fmt.Errorf("artifact %s metadata: %w", name, err)
	}
	return a, nil
}

// artifactUpload is one upload in progress on a connection.
type artifactUpload struct {
	seq         int64
	name        string
	contentType string
	// blob receives the bytes; committed only once they are whole and
	// within the session's limit.
	blob   *blob.Writer
	hash   hash.Hash
	size   int64
	failed bool
}

// artifactUploads receives the artifact frames of one remote connection.
type artifactUploads struct {
	s  *Server
	c  *gateway.Conn
	up map[int64]*artifactUpload
	// secrets redacts the session's secrets; read at the first upload (a
	// session's secrets never change). loaded tells a set that is nil
	// because the session has no secrets from one not read yet.
	secrets *redact.Set
	loaded  bool
}

func (s *Server) newArtifactUploads(c *gateway.Conn) *artifactUploads {
	return &artifactUploads{s: s, c: c, up: map[int64]*artifactUpload{}}
}

// Close discards the uploads the connection did not finish.
func (u *artifactUploads) Close() {
	for id := range u.up {
		u.discard(id)
	}
}

func (u *artifactUploads) discard(id int64) {
	a := u.up[id]
	if a == nil {
		return
	}
	if a.blob != nil {
		a.blob.Abort(errArtifactDiscarded)
		a.blob = nil
	}
	delete(u.up, id)
}

// fail discards upload id and tells the remote why.
func (u *artifactUploads) fail(ctx context.Context, id int64, seq int64, msg string) {
	u.discard(id)
	u.up[id] = &artifactUpload{failed: true}
	if err := u.c.Send(ctx, api.Frame{Type: api.FrameArtifactAck, Seq: seq, Artifact: &api.ArtifactFrame{ID: id}, Error: msg}); err != nil {
		u.s.log.Debug("artifact ack", "session", u.c.SessionID, "err", err)
	}
}

// Frame handles a FrameArtifact.
func (u *artifactUploads) Frame(ctx context.Context, f api.Frame) {
	a := f.Artifact
	if a == nil {
		u.s.log.Warn("artifact frame without an artifact", "session", u.c.SessionID)
		return
	}
	switch a.Phase {
	case api.ArtifactBegin:
		u.begin(ctx, f.Seq, a)
	case api.ArtifactEnd:
		u.end(ctx, f.Seq, a)
	case api.ArtifactAbort:
		u.discard(a.ID)
	default:
		u.fail(ctx, a.ID, f.Seq, fmt.Sprintf("unknown artifact phase %q", a.Phase))
	}
}

func (u *artifactUploads) begin(ctx context.Context, seq int64, a *api.ArtifactFrame) {
	u.discard(a.ID)
	if err := api.ValidateArtifactName(a.Name); err != nil {
		u.fail(ctx, a.ID, seq, err.Error())
		return
	}
	// An artifact's name is shown wherever the artifact is (its event on
	// the transcript, the list, the web UI, download URLs) and is its key,
	// so it cannot be redacted afterwards: a name holding a secret's value
	// is refused, without repeating it.
	secrets, err := u.secretSet(ctx)
	if err != nil {
		u.s.log.Warn("artifact upload: read the session's secrets", "session", u.c.SessionID, "err", err)
		u.fail(ctx, a.ID, seq, "the server could not check the artifact's name; upload it again")
		return
	}
	if secrets.String(a.Name) != a.Name {
		u.fail(ctx, a.ID, seq, "the artifact's name holds the value of one of this session's secrets, and names are shown unredacted; upload it under another name")
		return
	}
	ct := a.ContentType
	if _, _, err := mime.ParseMediaType(ct); err != nil || secrets.String(ct) != ct {
		ct = "application/octet-stream"
	}
	// The Put outlives the frame's context; discard or end finishes it.
	w := blob.NewWriter(context.WithoutCancel(ctx), u.s.artifactBlobs, artifactKey(u.c.SessionID, a.Name), api.MaxArtifactBytes)
	u.up[a.ID] = &artifactUpload{seq: seq, name: a.Name, contentType: ct, blob: w, hash: sha256.New()}
}

// secretSet returns the session's secrets, reading them once.
func (u *artifactUploads) secretSet(ctx context.Context) (*redact.Set, error) {
	if u.loaded {
		return u.secrets, nil
	}
	sess, err := u.s.store.GetSession(ctx, u.c.SessionID)
	if err != nil {
		return nil, fmt.Errorf("get session %s: %w", u.c.SessionID, err)
	}
	u.secrets, u.loaded = redact.NewSet(sess.Secrets), true
	return u.secrets, nil
}

// Chunk handles a binary artifact chunk.
func (u *artifactUploads) Chunk(ctx context.Context, msg []byte) {
	ch, err := api.ParseArtifactChunk(msg)
	if err != nil {
		u.s.log.Warn("gateway artifact chunk", "session", u.c.SessionID, "err", err)
		return
	}
	a := u.up[ch.ID]
	if a == nil || a.failed {
		return // an upload begun on an earlier connection, or already refused
	}
	a.size += int64(len(ch.Data))
	if a.size > api.MaxArtifactBytes {
		u.fail(ctx, ch.ID, a.seq, fmt.Sprintf("artifact %s is larger than the limit of %d MiB; upload a smaller file", a.name, api.MaxArtifactBytes>>20))
		return
	}
	a.hash.Write(ch.Data)
	if _, err := a.blob.Write(ch.Data); err != nil {
		u.fail(ctx, ch.ID, a.seq, "the server could not store the artifact: "+err.Error())
	}
}

func (u *artifactUploads) end(ctx context.Context, seq int64, f *api.ArtifactFrame) {
	a := u.up[f.ID]
	if a == nil {
		u.fail(ctx, f.ID, seq, "the server did not receive the start of this artifact upload (the connection was interrupted); upload it again")
		return
	}
	if a.failed {
		return
	}
	sum := hex.EncodeToString(a.hash.Sum(nil))
	if a.size != f.Size || sum != f.SHA256 {
		u.fail(ctx, f.ID, seq, "the artifact bytes were damaged in transit (size or SHA-256 differ); upload it again")
		return
	}
	art, err := u.store(ctx, a, sum)
	if err != nil {
		u.fail(ctx, f.ID, seq, err.Error())
		return
	}
	delete(u.up, f.ID)
	ev := []api.Event{{Type: api.EventArtifact, Time: u.s.now().UnixMilli(), CallSeq: a.seq, Artifact: &art,
		Text: fmt.Sprintf("Stored artifact %s (%d bytes, %s).", art.Name, art.Size, art.ContentType)}}
	if err := u.s.store.AppendEvents(ctx, u.c.SessionID, ev); err != nil {
		u.s.log.Warn("record artifact", "session", u.c.SessionID, "err", err)
	} else {
		u.s.topics.publish(u.c.SessionID, ev...)
	}
	if err := u.c.Send(ctx, api.Frame{Type: api.FrameArtifactAck, Seq: seq, Artifact: &api.ArtifactFrame{ID: f.ID, Name: art.Name,
		ContentType: art.ContentType, Size: art.Size, SHA256: art.SHA256}}); err != nil {
		u.s.log.Debug("artifact ack", "session", u.c.SessionID, "err", err)
	}
}

// errArtifactDiscarded aborts the blob of an upload that did not end well.
var errArtifactDiscarded = errors.New("the artifact upload was discarded")

// store stores a complete upload and writes its metadata.
func (u *artifactUploads) store(ctx context.Context, a *artifactUpload, sum string) (api.Artifact, error) {
	sid := u.c.SessionID
	unlock, err := u.s.lockArtifacts(ctx, sid)
	if err != nil {
		return api.Artifact{}, fmt.Errorf("the server could not store the artifact: %w", err)
	}
	defer unlock()
	existing, err := u.s.listArtifactsOf(ctx, sid)
	if err != nil {
		return api.Artifact{}, err
	}
	total := a.size
	for _, e := range existing {
		if e.Name != a.name {
			total += e.Size
		}
	}
	if total > api.MaxSessionArtifactBytes {
		return api.Artifact{}, fmt.Errorf("artifact %s (%d bytes) would take this session's artifacts past their limit of %d MiB in all", a.name, a.size, api.MaxSessionArtifactBytes>>20)
	}
	w := a.blob
	a.blob = nil
	size, stored, err := w.Commit()
	if err != nil {
		return api.Artifact{}, fmt.Errorf("the server could not store the artifact: %w", err)
	}
	if size != a.size || stored != sum {
		_ = u.s.artifactBlobs.Delete(context.WithoutCancel(ctx), artifactKey(sid, a.name))
		return api.Artifact{}, errors.New("the server could not store the artifact: the stored bytes differ from those received")
	}
	art := api.Artifact{Name: a.name, Size: a.size, ContentType: a.contentType, CreatedAt: u.s.now().UTC(), SHA256: sum, CallSeq: a.seq}
	b, _ := json.Marshal(art)
	if _, _, err := u.s.artifactBlobs.Put(ctx, artifactMetaKey(sid, a.name), bytes.NewReader(b), maxArtifactMetaBytes); err != nil {
		return api.Artifact{}, fmt.Errorf("the server could not store the artifact's metadata: %w", err)
	}
	return art, nil
}

// listArtifacts serves GET /v1/sessions/{session}/artifacts.
func (s *Server) listArtifacts(w http.ResponseWriter, r *http.Request) error {
	sess, err := s.sessionFor(r.Context(), r.PathValue("session"))
	if err != nil {
		return err
	}
	items, err := s.listArtifactsOf(r.Context(), sess.ID)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, api.ArtifactList{Items: items})
	return nil
}

// getArtifact serves GET /v1/sessions/{session}/artifacts/{name}: the bytes.
func (s *Server) getArtifact(w http.ResponseWriter, r *http.Request) error {
	sess, err := s.sessionFor(r.Context(), r.PathValue("session"))
	if err != nil {
		return err
	}
	name := r.PathValue("name")
	if err := api.ValidateArtifactName(name); err != nil {
		return errNotFound("Session %s has no artifact %q.", sess.ID, name)
	}
	a, err := s.readArtifactMeta(r.Context(), sess.ID, name)
	if errors.Is(err, blob.ErrNotExist) {
		return artifactGone(sess, name)
	}
	if err != nil {
		return err
	}
	f, _, err := s.artifactBlobs.Get(r.Context(), artifactKey(sess.ID, name))
	if errors.Is(err, blob.ErrNotExist) {
		return artifactGone(sess, name)
	}
	if err != nil {
		return fmt.Errorf("open artifact: %w", err)
	}
	defer f.Close()
	w.Header().Set("Content-Type", a.ContentType)
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Content-Disposition", mime.FormatMediaType("attachment", map[string]string{"filename": name}))
	if a.SHA256 != "" {
		w.Header().Set("ETag", `"`+a.SHA256+`"`)
	}
	// ServeContent answers a bad Range or a failed precondition in plain
	// text; the errorWriter turns that into the JSON envelope.
	ew := &errorWriter{ResponseWriter: w}
	http.ServeContent(ew, r, name, a.CreatedAt, f)
	ew.finish()
	return nil
}
