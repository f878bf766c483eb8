package api

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"
)

// ProtocolVersion is the version of the gateway protocol: the frames a
// remote and a server exchange and what each field of them means. A remote
// names the version it speaks in its hello (Frame.V); a server accepts every
// version from MinProtocolVersion to CurrentProtocolVersion, answers in the
// remote's version (every frame it sends carries it in V), and sends nothing
// newer than that version (see FrameTypes). A server refuses a version out of
// its range with an error frame of its own current version; a remote that
// also speaks that older version reconnects in it. Within a version, frames
// only gain optional fields the other side ignores; a version is bumped when
// a side must know what the other understands.
//
// A hello without a version (V 0 or missing) is refused like any version out
// of range: every remote of every release has sent one, since version 1, so a
// hello without it is not an Outpost remote.
//
// The history of the versions:
//
//   - 1: the first release (commit fce53be). hello (session_id,
//     capabilities, last_seq, executed and running, and the resend of every
//     unacknowledged result right after hello), welcome (env, secrets),
//     call, result, ack, cancel, end and error, binary output messages (see
//     OutputFrame), and WebSocket ping and pong for liveness. Three
//     additions were later made within version 1 without a bump, each an
//     optional frame or field the older side ignores; a version 1 remote
//     may have any prefix of them and a server cannot tell which:
//     the artifact and artifact_ack frames and binary artifact chunks of
//     upload_artifact (commit a16482e); welcome.restore and the restored
//     frame (d9c0b6a); hello.instance (9a1aec3).
//   - 2: a remote of version 2 has all of version 1's additions, and its
//     hello must name its instance: a version 2 hello without one is
//     refused, so the check that only one remote process serves a session
//     (see Frame.Instance) applies to every version 2 remote. A version 1
//     remote without an instance is served as before, unchecked.
//   - 3: workspace snapshots. The server may send suspend; the remote then
//     archives its workspace, uploads it to SnapshotPath and answers
//     suspended. A welcome may carry snapshot: the remote downloads it from
//     SnapshotPath and restores the workspace before it runs any call, and
//     reports in restored (Frame.SnapshotRestored). The server may also
//     send checkpoint: the same upload, answered checkpointed, after which
//     the remote goes on serving. A server sends none of them to a remote
//     of version 2 or older: such a session can be suspended only without
//     a snapshot.
type ProtocolVersion int

const (
	// MinProtocolVersion is the oldest version a server accepts.
	MinProtocolVersion ProtocolVersion = 1
	// CurrentProtocolVersion is the newest version: the one a remote speaks
	// unless told otherwise, and the newest a server accepts.
	CurrentProtocolVersion ProtocolVersion = 3
	// SnapshotsSince is the first version that knows suspend, suspended
	// and welcome.snapshot.
	SnapshotsSince ProtocolVersion = 3
	// InstanceRequiredSince is the first version whose hello must carry an
	// instance.
	InstanceRequiredSince ProtocolVersion = 2
)

// Supported reports whether v is within [MinProtocolVersion,
// CurrentProtocolVersion].
func (v ProtocolVersion) Supported() bool {
	return v >= MinProtocolVersion && v <= CurrentProtocolVersion
}

// Gateway frame types. Every frame but output and artifact chunks is a JSON
// text message; those two are binary messages (see OutputFrame and
// ArtifactChunk) so that bulk bytes are not escaped. FrameTypes lists them
// all with the version that introduced each.
const (
	// FrameHello is the remote's first frame after it connects.
	FrameHello = "hello"
	// FrameWelcome answers hello: the session's environment and secrets.
	FrameWelcome = "welcome"
	// FrameCall asks the remote to run one tool call.
	FrameCall = "call"
	// FrameResult carries the result of a call back.
	FrameResult = "result"
	// FrameAck tells the remote the control plane holds a result durably, so
	// the remote may stop resending it.
	FrameAck = "ack"
	// FrameCancel asks the remote to stop a running call.
	FrameCancel = "cancel"
	// FrameEnd tells the remote its session is over; it exits 0.
	FrameEnd = "end"
	// FrameError tells the other side why it is being refused.
	FrameError = "error"
	// FrameRestored is the remote's notice of how it restored the
	// repositories a welcome listed in Restore. It is sent at most once per
	// remote process and is not acknowledged; an older server ignores it.
	FrameRestored = "restored"
	// FrameSuspend asks the remote to snapshot its workspace, upload it to
	// SnapshotPath and answer FrameSuspended; the server then ends the
	// connection with FrameEnd and the remote exits 0. Version 3 on.
	FrameSuspend = "suspend"
	// FrameSuspended answers FrameSuspend: Snapshot describes what was
	// uploaded, or its Error why nothing was. Version 3 on.
	FrameSuspended = "suspended"
	// FrameCheckpoint asks the remote for a periodic snapshot of its
	// workspace: uploaded to SnapshotPath exactly as for FrameSuspend, but
	// the remote keeps serving. It answers FrameCheckpointed. The server
	// sends it only while no call is in flight. Version 3 on.
	FrameCheckpoint = "checkpoint"
	// FrameCheckpointed answers FrameCheckpoint: Snapshot describes what
	// was uploaded, or its Error. Version 3 on.
	FrameCheckpointed = "checkpointed"
)

// Which side of the gateway sends a frame.
const (
	SentByRemote = "remote"
	SentByServer = "server"
	SentByBoth   = "both"
)

// FrameType describes one kind of gateway message.
type FrameType struct {
	// Name is the JSON frame's Type, or for a binary message a name for it
	// ("output", "artifact_chunk") that no JSON frame uses.
	Name string
	// Binary is set for binary messages; their first byte tells them apart.
	Binary bool
	// Since is the protocol version that introduced the frame. A server
	// does not send a remote a frame newer than the remote's version.
	Since ProtocolVersion
	// From says which side sends it: SentByRemote, SentByServer or
	// SentByBoth.
	From string
}

// FrameTypes lists every kind of gateway message, in the order they were
// introduced. Version 1's later additions (artifacts, restored) are listed
// as version 1: they were added without a bump (see ProtocolVersion).
var FrameTypes = []FrameType{
	{Name: FrameHello, Since: 1, From: SentByRemote},
	{Name: FrameWelcome, Since: 1, From: SentByServer},
	{Name: FrameCall, Since: 1, From: SentByServer},
	{Name: FrameResult, Since: 1, From: SentByRemote},
	{Name: FrameAck, Since: 1, From: SentByServer},
	{Name: FrameCancel, Since: 1, From: SentByServer},
	{Name: FrameEnd, Since: 1, From: SentByServer},
	{Name: FrameError, Since: 1, From: SentByBoth},
	{Name: "output", Binary: true, Since: 1, From: SentByRemote},
	{Name: FrameArtifact, Since: 1, From: SentByRemote},
	{Name: "artifact_chunk", Binary: true, Since: 1, From: SentByRemote},
	{Name: FrameArtifactAck, Since: 1, From: SentByServer},
	{Name: FrameRestored, Since: 1, From: SentByRemote},
	{Name: FrameSuspend, Since: 3, From: SentByServer},
	{Name: FrameSuspended, Since: 3, From: SentByRemote},
	{Name: FrameCheckpoint, Since: 3, From: SentByServer},
	{Name: FrameCheckpointed, Since: 3, From: SentByRemote},
	{Name: FrameDesktopStream, Since: 3, From: SentByServer},
	{Name: FrameDesktopInput, Since: 3, From: SentByServer},
	{Name: FrameDesktopControl, Since: 3, From: SentByServer},
	{Name: "desktop_tiles", Binary: true, Since: 3, From: SentByRemote},
}

// FrameSince returns the version that introduced the JSON frame type name,
// or 0 when no JSON frame has that name.
func FrameSince(name string) ProtocolVersion {
	for _, t := range FrameTypes {
		if t.Name == name && !t.Binary {
			return t.Since
		}
	}
	return 0
}

// Paths of the gateway.
const (
	// GatewayPath is the WebSocket endpoint, relative to the public URL.
	GatewayPath = "/v1/gateway"
	// SnapshotPath is where a remote uploads (PUT) its workspace snapshot
	// on suspend and downloads (GET) the one to restore, relative to the
	// public URL (the gateway URL's host, http or https for ws or wss). It
	// takes the remote's connect token as a bearer token and the session in
	// HeaderSessionID; the body is the archive (see SnapshotInfo).
	SnapshotPath = "/v1/gateway/snapshot"
	// GatewaySessionPath answers (GET) what a machine holding only a
	// claim's connect token needs to know of its session before it starts
	// the remote (GatewaySession), relative to the public URL as
	// SnapshotPath, with the same credentials.
	GatewaySessionPath = "/v1/gateway/session"
	// HeaderSessionID names the session a remote serves.
	HeaderSessionID = "X-Outpost-Session"
)

// GatewaySession is the answer of GatewaySessionPath: the session of the
// connect token and the remote build its queue entry pins.
type GatewaySession struct {
	// SessionID is the session the connect token was issued for.
	SessionID string `json:"session_id"`
	// RemoteBinarySHA is the queue entry's spec.remote_binary_sha: the
	// session's pin, else its outpost's; null when neither pins one.
	RemoteBinarySHA *string `json:"remote_binary_sha"`
}

// GatewayHTTPURL is the URL of the gateway's HTTP endpoint path (such as
// SnapshotPath) for the gateway URL gw: its scheme made http or https for
// ws or wss (a gateway URL of another scheme is an error), and GatewayPath
// replaced by path, so that a gateway behind a path prefix keeps it.
func GatewayHTTPURL(gw, path string) (string, error) {
	u, err := url.Parse(gw)
	if err != nil {
		return "", fmt.Errorf("URL of %s at gateway %q: %w", path, gw, err)
	}
	switch u.Scheme {
	case "ws":
		u.Scheme = "http"
	case "wss":
		u.Scheme = "https"
	default:
		return "", fmt.Errorf("URL of %s at gateway %q: not a ws:// or wss:// URL", path, gw)
	}
	if u.Host == "" {
		return "", fmt.Errorf("URL of %s at gateway %q: no host", path, gw)
	}
	prefix, _ := strings.CutSuffix(strings.TrimSuffix(u.Path, "/"), GatewayPath)
	if prefix == strings.TrimSuffix(u.Path, "/") { // no gateway path: the root's
		prefix = ""
	}
	u.Path = prefix + path
	u.RawPath, u.RawQuery, u.Fragment, u.User = "", "", "", nil
	return u.String(), nil
}

// CloseReconnectNow is the WebSocket close status (1012, "service
// restart") a gateway closes a remote's connection with when its server
// stops gracefully and hands the session over: the remote reconnects at
// once, without its backoff, and the load balancer sends it to another
// replica. Other closes are retried with the backoff.
const CloseReconnectNow = 1012

// Frame is a JSON gateway frame. Which fields are set depends on Type.
type Frame struct {
	// V is the protocol version of the frame (see ProtocolVersion): in
	// hello the version the remote speaks, afterwards that version on both
	// sides.
	V    int    `json:"v"`
	Type string `json:"type"`

	// hello
	SessionID    string        `json:"session_id,omitempty"`
	Capabilities *Capabilities `json:"capabilities,omitempty"`
	// Executed lists calls the remote has finished whose results it has not
	// seen acknowledged; it resends those results right after hello.
	Executed []int64 `json:"executed,omitempty"`
	// Running lists calls still running on the remote.
	Running []int64 `json:"running,omitempty"`
	// LastSeq is the highest call sequence number the remote has seen.
	LastSeq int64 `json:"last_seq,omitempty"`
	// Instance identifies the remote process: random, the same on every
	// reconnect of one process. The gateway lets a reconnect of the same
	// instance replace its old connection, and refuses another instance
	// while the session's current one is alive (two machines serving one
	// session). A version 1 remote may send none and is then not checked;
	// from version 2 (InstanceRequiredSince) it is required.
	Instance string `json:"instance,omitempty"`

	// welcome
	Env     map[string]string `json:"env,omitempty"`
	Secrets map[string]string `json:"secrets,omitempty"`
	// Restore is set when the session resumes on another machine (its
	// queue entry is kind resume): the arguments of every successful
	// git_clone call of the session, in call order. The remote clones each
	// repository missing from its workspace again, the way git_clone does,
	// before it runs any call, and reports with FrameRestored. An older
	// remote ignores it.
	Restore []GitCloneArgs `json:"restore,omitempty"`
	// Desktop is the session's desktop size (spec.desktop); nil means the
	// default. An older remote ignores it.
	Desktop *DesktopSize `json:"desktop,omitempty"`

	// Snapshot: in welcome, the snapshot to restore before any call (a
	// resumed session that was suspended with one); in suspended, the
	// snapshot the remote uploaded. Version 3 on.
	Snapshot *SnapshotInfo `json:"snapshot,omitempty"`

	// restored
	Restored []RestoredRepo `json:"restored,omitempty"`
	// SnapshotRestored reports the restore of welcome.snapshot: what was
	// restored and how long it took, or Error. Version 3 on.
	SnapshotRestored *SnapshotInfo `json:"snapshot_restored,omitempty"`

	// call, result, ack, cancel
	Seq      int64           `json:"seq,omitempty"`
	Tool     string          `json:"tool,omitempty"`
	Args     json.RawMessage `json:"args,omitempty"`
	TimeoutS int64           `json:"timeout_s,omitempty"`
	OK       bool            `json:"ok,omitempty"`
	Value    json.RawMessage `json:"value,omitempty"`
	Error    string          `json:"error,omitempty"`

	// end, error
	Reason string `json:"reason,omitempty"`

	// artifact, artifact_ack
	Artifact *ArtifactFrame `json:"artifact,omitempty"`

	// desktop_stream, desktop_input, desktop_control
	DesktopStream *DesktopStream `json:"desktop_stream,omitempty"`
	DesktopInput  *DesktopInput  `json:"desktop_input,omitempty"`
	// DesktopControl is DesktopTakeControl or DesktopHandBack.
	DesktopControl string `json:"desktop_control,omitempty"`
}

// SnapshotInfo describes a workspace snapshot: a zstd-compressed tar of the
// whole workspace (repositories with their uncommitted and untracked changes
// and git state, and every file outside repos/; not memory or processes).
type SnapshotInfo struct {
	// Size is the archive's size in bytes, as stored.
	Size int64 `json:"size"`
	// SHA256 is the hex SHA-256 of the archive.
	SHA256 string `json:"sha256"`
	// Files is the number of regular files in the archive.
	Files int64 `json:"files,omitempty"`
	// Bytes is the total size of those files before compression.
	Bytes int64 `json:"bytes,omitempty"`
	// Skipped is the number of entries left out because an archive cannot
	// hold them usefully: sockets, devices and named pipes.
	Skipped int64 `json:"skipped,omitempty"`
	// DurationMS is how long taking (or restoring) it took.
	DurationMS int64 `json:"duration_ms,omitempty"`
	// Error says why the snapshot could not be taken or restored.
	Error string `json:"error,omitempty"`
	// InPlace, on a restore, says the workspace already held this snapshot
	// (the machine that suspended the session took it back, its workspace
	// on a volume kept meanwhile, as a Kubernetes pool's
	// FilesystemSnapshot): nothing was downloaded or rewritten.
	InPlace bool `json:"in_place,omitempty"`
}

// RestoredRepo is the outcome of one entry of a welcome's Restore.
type RestoredRepo struct {
	Name string `json:"name"`
	URL  string `json:"url"`
	Ref  string `json:"ref,omitempty"`
	// Head is the commit checked out after the clone.
	Head string `json:"head,omitempty"`
	// Kept is set when repos/<name> was already a git repository on this
	// machine: it is left as it is.
	Kept bool `json:"kept,omitempty"`
	// Error says why the clone failed; the session goes on without it.
	Error string `json:"error,omitempty"`
}

// Output streams.
const (
	StreamStdout = "stdout"
	StreamStderr = "stderr"
)

// OutputFrame is a chunk of a running call's output. On the wire it is a
// binary message: one byte 'o', one byte stream (1 stdout, 2 stderr), eight
// bytes big-endian call sequence number, then the data.
type OutputFrame struct {
	Seq    int64
	Stream string
	Data   []byte
}

const outputHeaderLen = 10

// AppendBinary appends the wire form of f to b.
func (f OutputFrame) AppendBinary(b []byte) []byte {
	s := byte(1)
	if f.Stream == StreamStderr {
		s = 2
	}
	b = append(b, 'o', s)
	b = binary.BigEndian.AppendUint64(b, uint64(f.Seq))
	return append(b, f.Data...)
}

// ParseOutputFrame decodes a binary gateway message. Data aliases msg.
func ParseOutputFrame(msg []byte) (OutputFrame, error) {
	if len(msg) < outputHeaderLen || msg[0] != 'o' {
		return OutputFrame{}, errors.New("malformed output frame")
	}
	var stream string
	switch msg[1] {
	case 1:
		stream = StreamStdout
	case 2:
		stream = StreamStderr
	default:
		return OutputFrame{}, errors.New("output frame names an unknown stream")
	}
	return OutputFrame{
		Seq:    int64(binary.BigEndian.Uint64(msg[2:10])),
		Stream: stream,
		Data:   msg[outputHeaderLen:],
	}, nil
}
