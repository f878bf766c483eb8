package api

import (
	"encoding/binary"
	"encoding/json"
	"errors"
)

// Gateway frame types. Every frame but output is a JSON text message; output
// is a binary message (see OutputFrame) so that bulk bytes are not escaped.
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
)

// Paths of the gateway.
const (
	// GatewayPath is the WebSocket endpoint, relative to the public URL.
	GatewayPath = "/v1/gateway"
	// HeaderSessionID names the session a remote serves.
	HeaderSessionID = "X-Outpost-Session"
)

// Frame is a JSON gateway frame. Which fields are set depends on Type.
type Frame struct {
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
	// session). An older remote sends none and is not checked.
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

	// restored
	Restored []RestoredRepo `json:"restored,omitempty"`

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
