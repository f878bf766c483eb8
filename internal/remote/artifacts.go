package remote

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"os"
	"path/filepath"
	"sync"

	"github.com/coder/websocket"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/redact"
)

// artifactChunkSize is the payload of one artifact chunk frame.
const artifactChunkSize = 256 << 10

func init() { tools[api.ToolUploadArtifact] = runUploadArtifact }

// errUploadDisconnected fails an upload whose gateway connection was lost.
var errUploadDisconnected = errors.New("the gateway connection was lost during the artifact upload; upload it again")

// artifactItem is an artifact frame waiting in the outbox: a JSON frame or
// a chunk of bytes.
type artifactItem struct {
	id    int64
	frame *api.Frame
	chunk []byte
}

// pendingUpload is an upload waiting for the server's acknowledgement.
type pendingUpload struct {
	done chan struct{}
	once sync.Once
	ack  api.Frame
	err  error
}

func (p *pendingUpload) finish(ack api.Frame, err error) {
	p.once.Do(func() {
		p.ack, p.err = ack, err
		close(p.done)
	})
}

func (p *pendingUpload) failed() error {
	select {
	case <-p.done:
		if p.err != nil {
			return p.err
		}
		return errors.New("the server answered the artifact upload before it ended")
	default:
		return nil
	}
}

// uploadSet tracks a session's uploads by ID. The zero value is ready.
type uploadSet struct {
	mu     sync.Mutex // guards the following
	m      map[int64]*pendingUpload
	nextID int64
}

// register numbers a new upload.
func (u *uploadSet) register() (int64, *pendingUpload) {
	p := &pendingUpload{done: make(chan struct{})}
	u.mu.Lock()
	defer u.mu.Unlock()
	u.nextID++
	if u.m == nil {
		u.m = map[int64]*pendingUpload{}
	}
	u.m[u.nextID] = p
	return u.nextID, p
}

func (u *uploadSet) forget(id int64) {
	u.mu.Lock()
	delete(u.m, id)
	u.mu.Unlock()
}

func (u *uploadSet) get(id int64) *pendingUpload {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.m[id]
}

// failAll fails every upload in flight with err and returns their IDs.
func (u *uploadSet) failAll(err error) []int64 {
	u.mu.Lock()
	defer u.mu.Unlock()
	ids := make([]int64, 0, len(u.m))
	for id, p := range u.m {
		ids = append(ids, id)
		p.finish(api.Frame{}, err)
	}
	return ids
}

// handleArtifactAck completes the upload a FrameArtifactAck answers.
func (s *session) handleArtifactAck(f api.Frame) {
	if f.Artifact == nil {
		s.log.Warn("ignoring an artifact ack without an artifact")
		return
	}
	p := s.uploads.get(f.Artifact.ID)
	if p == nil {
		s.log.Debug("ignoring the ack of an unknown upload", "id", f.Artifact.ID)
		return
	}
	var err error
	if f.Error != "" {
		err = errors.New(f.Error)
	}
	p.finish(f, err)
}

// abortUploads fails the session's uploads in flight after its connection
// is lost, and drops their frames still waiting in the outbox.
func (s *session) abortUploads() {
	for _, id := range s.uploads.failAll(errUploadDisconnected) {
		s.out.dropUpload(id)
	}
}

// pushArtifact queues an artifact frame, waiting for room while the
// gateway drains the outbox. It fails when the gateway is not connected.
func (o *outbox) pushArtifact(a *artifactItem) error {
	size := len(a.chunk)
	o.mu.Lock()
	for o.connected && o.bytes+size > maxBuffered {
		o.signal()
		o.space.Wait()
	}
	if !o.connected {
		o.mu.Unlock()
		return errors.New("the remote is not connected to the gateway; the artifact was not uploaded")
	}
	o.items = append(o.items, outItem{artifact: a, size: size})
	o.bytes += size
	o.mu.Unlock()
	o.signal()
	return nil
}

// dropUpload removes the frames of upload id from the outbox.
func (o *outbox) dropUpload(id int64) {
	o.mu.Lock()
	kept := o.items[:0]
	for _, it := range o.items {
		if it.artifact != nil && it.artifact.id == id {
			o.bytes -= it.size
			continue
		}
		kept = append(kept, it)
	}
	clear(o.items[len(kept):])
	o.items = kept
	o.mu.Unlock()
	o.space.Broadcast()
}

// writeArtifact sends one artifact item; buf is reused for chunks.
func (s *session) writeArtifact(ctx context.Context, c *websocket.Conn, a *artifactItem, buf *[]byte) error {
	if a.frame != nil {
		return s.writeFrame(ctx, c, *a.frame)
	}
	*buf = api.ArtifactChunk{ID: a.id, Data: a.chunk}.AppendBinary((*buf)[:0])
	return c.Write(ctx, websocket.MessageBinary, *buf)
}

// outbox returns the outbox the call's frames go through.
func (c *callEnv) outbox() *outbox {
	if c.stdout == nil {
		return nil
	}
	return c.stdout.out
}

// secretSet returns the secrets the call's output is redacted of.
func (c *callEnv) secretSet() *redact.Set {
	if c.stdout == nil || c.stdout.red == nil {
		return nil
	}
	return c.stdout.red.Set()
}

// uploadArtifact streams r to the control plane as the artifact name of
// this call's session and waits until the server has stored it. contentType
// may be empty; the server then keeps application/octet-stream.
func (c *callEnv) uploadArtifact(ctx context.Context, name, contentType string, r io.Reader) (api.ArtifactRef, error) {
	if err := api.ValidateArtifactName(name); err != nil {
		return api.ArtifactRef{}, err
	}
	out := c.outbox()
	if out == nil {
		return api.ArtifactRef{}, errors.New("this call has no gateway connection to upload an artifact over")
	}
	if contentType == "" {
		contentType = "application/octet-stream"
	}
	if c.uploads == nil {
		return api.ArtifactRef{}, errors.New("this call has no session to upload an artifact for")
	}
	id, p := c.uploads.register()
	defer c.uploads.forget(id)
	abort := func(err error) (api.ArtifactRef, error) {
		out.dropUpload(id)
		if p.failed() == nil {
			// Best effort: tell the server to discard what it has.
			_ = out.pushArtifact(&artifactItem{id: id, frame: &api.Frame{Type: api.FrameArtifact, Seq: c.seq,
				Artifact: &api.ArtifactFrame{ID: id, Phase: api.ArtifactAbort, Name: name}}})
		}
		return api.ArtifactRef{}, err
	}
	begin := &api.Frame{Type: api.FrameArtifact, Seq: c.seq,
		Artifact: &api.ArtifactFrame{ID: id, Phase: api.ArtifactBegin, Name: name, ContentType: contentType}}
	if err := out.pushArtifact(&artifactItem{id: id, frame: begin}); err != nil {
		return api.ArtifactRef{}, err
	}
	h := sha256.New()
	var size int64
	scan := redact.NewScanner(c.secretSet())
	for {
		if err := ctx.Err(); err != nil {
			return abort(err)
		}
		if err := p.failed(); err != nil {
			return abort(err)
		}
		buf := make([]byte, artifactChunkSize)
		n, rerr := io.ReadFull(r, buf)
		if n > 0 {
			size += int64(n)
			if size > api.MaxArtifactBytes {
				return abort(fmt.Errorf("artifact %s is larger than the limit of %d MiB; upload a smaller file (compress or split it)", name, api.MaxArtifactBytes>>20))
			}
			if secret := scan.Find(buf[:n]); secret != "" {
				return abort(fmt.Errorf("artifact %s contains the value of the secret %s; secrets never leave the remote, so it was not uploaded", name, secret))
			}
			h.Write(buf[:n])
			if err := out.pushArtifact(&artifactItem{id: id, chunk: buf[:n]}); err != nil {
				return abort(err)
			}
		}
		if rerr == io.EOF || rerr == io.ErrUnexpectedEOF {
			break
		}
		if rerr != nil {
			return abort(fmt.Errorf("read artifact %s: %w", name, rerr))
		}
	}
	sum := hex.EncodeToString(h.Sum(nil))
	end := &api.Frame{Type: api.FrameArtifact, Seq: c.seq,
		Artifact: &api.ArtifactFrame{ID: id, Phase: api.ArtifactEnd, Name: name, Size: size, SHA256: sum}}
	if err := p.failed(); err != nil {
		return abort(err)
	}
	if err := out.pushArtifact(&artifactItem{id: id, frame: end}); err != nil {
		return abort(err)
	}
	select {
	case <-ctx.Done():
		return abort(ctx.Err())
	case <-p.done:
	}
	if p.err != nil {
		return api.ArtifactRef{}, fmt.Errorf("upload artifact %s: %w", name, p.err)
	}
	a := p.ack.Artifact
	if a == nil || a.Size != size || a.SHA256 != sum {
		return api.ArtifactRef{}, fmt.Errorf("upload artifact %s: the server acknowledged different bytes than were sent", name)
	}
	return api.ArtifactRef{Name: name, Size: size, ContentType: a.ContentType, SHA256: sum}, nil
}

// runUploadArtifact uploads a file of the workspace as an artifact.
func runUploadArtifact(ctx context.Context, c *callEnv, raw json.RawMessage) (any, error) {
	var args api.UploadArtifactArgs
	if err := decodeArgs(raw, &args); err != nil {
		return nil, err
	}
	if args.Path == "" {
		return nil, errors.New("bad arguments: path is required")
	}
	path := c.path(args.Path)
	name := args.Name
	if name == "" {
		name = filepath.Base(path)
	}
	if err := api.ValidateArtifactName(name); err != nil {
		if args.Name == "" {
			return nil, fmt.Errorf("%w; pass a name", err)
		}
		return nil, err
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if st.IsDir() {
		return nil, fmt.Errorf("%s is a directory; upload a file (for example an archive made with tar via exec)", args.Path)
	}
	if st.Size() > api.MaxArtifactBytes {
		return nil, fmt.Errorf("%s is %d bytes, over the artifact limit of %d MiB; upload a smaller file (compress or split it)", args.Path, st.Size(), api.MaxArtifactBytes>>20)
	}
	ct := mime.TypeByExtension(filepath.Ext(name))
	if ct == "" {
		head := make([]byte, 512)
		n, _ := io.ReadFull(f, head)
		ct = http.DetectContentType(head[:n])
		if _, err := f.Seek(0, io.SeekStart); err != nil {
			return nil, err
		}
	}
	return c.uploadArtifact(ctx, name, ct, io.LimitReader(f, api.MaxArtifactBytes+1))
}

// keepArtifact uploads a file a tool made (a screenshot, a recording) as an
// artifact when the call has a gateway connection; without one (a tool run
// on its own) the file simply stays where it is.
func (c *callEnv) keepArtifact(ctx context.Context, name, contentType, path string) (*api.ArtifactRef, string) {
	if c.outbox() == nil {
		return nil, ""
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err.Error()
	}
	defer f.Close()
	ref, err := c.uploadArtifact(ctx, name, contentType, f)
	if err != nil {
		return nil, err.Error()
	}
	return &ref, ""
}
