package api

import (
	"encoding/binary"
	"errors"
	"fmt"
	"regexp"
	"sync"
	"time"
)

// ToolUploadArtifact sends a file from the remote to the control plane.
const ToolUploadArtifact = "upload_artifact"

// Artifact gateway frames. An upload is a FrameArtifact with phase begin,
// binary chunks (see ArtifactChunk), and a FrameArtifact with phase end (or
// abort); the server answers end with FrameArtifactAck.
const (
	// FrameArtifact begins, ends or aborts an artifact upload.
	FrameArtifact = "artifact"
	// FrameArtifactAck tells the remote an artifact is stored (or why not).
	FrameArtifactAck = "artifact_ack"
)

// Artifact upload phases.
const (
	ArtifactBegin = "begin"
	ArtifactEnd   = "end"
	ArtifactAbort = "abort"
)

// Artifact limits.
const (
	// MaxArtifactBytes is the largest artifact.
	MaxArtifactBytes = 100 << 20
	// MaxSessionArtifactBytes is the most all of a session's artifacts may
	// hold together.
	MaxSessionArtifactBytes = 1 << 30
)

// UploadArtifactArgs uploads a file as an artifact of the session.
type UploadArtifactArgs struct {
	// Path is relative to the workspace unless absolute.
	Path string `json:"path" jsonschema:"File to upload, relative to the workspace unless absolute."`
	// Name defaults to the base name of Path.
	Name string `json:"name,omitempty" jsonschema:"Name of the artifact: letters, digits, '.', '_' and '-', starting with a letter or digit, at most 128 characters; default the file's base name."`
}

// ArtifactRef is what upload_artifact returns: the artifact as stored.
type ArtifactRef struct {
	// Name is the artifact's name in the session.
	Name string `json:"name"`
	// Size is in bytes, SHA256 the hex digest of the content.
	Size        int64  `json:"size"`
	ContentType string `json:"content_type"`
	SHA256      string `json:"sha256"`
}

// Artifact is a stored artifact of a session.
type Artifact struct {
	// Name is the artifact's name; GET
	// /v1/sessions/{id}/artifacts/{name} downloads it.
	Name        string `json:"name"`
	Size        int64  `json:"size"`
	ContentType string `json:"content_type"`
	// CreatedAt is an RFC 3339 time, unlike the Unix seconds elsewhere.
	CreatedAt time.Time `json:"created_at"`
	// SHA256 is the hex digest of the content.
	SHA256 string `json:"sha256,omitempty"`
	// CallSeq is the call that uploaded it.
	CallSeq int64 `json:"call_seq,omitempty"`
}

// ArtifactList is the answer of GET /v1/sessions/{id}/artifacts.
type ArtifactList struct {
	Items []Artifact `json:"items"`
}

// ArtifactFrame is the artifact part of a FrameArtifact or
// FrameArtifactAck. The call it belongs to is the frame's Seq.
type ArtifactFrame struct {
	// ID numbers the upload within the remote process.
	ID int64 `json:"id"`
	// Phase is ArtifactBegin, ArtifactEnd or ArtifactAbort.
	Phase       string `json:"phase,omitempty"`
	Name        string `json:"name,omitempty"`
	ContentType string `json:"content_type,omitempty"`
	// Size and SHA256 (hex) are sent with end and in the ack.
	Size   int64  `json:"size,omitempty"`
	SHA256 string `json:"sha256,omitempty"`
}

var artifactNameRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`) })

// ValidateArtifactName returns an error when name is not a valid artifact
// name.
func ValidateArtifactName(name string) error {
	if !artifactNameRE().MatchString(name) {
		return fmt.Errorf("artifact name %q is not valid: use 1 to 128 letters, digits, '.', '_' and '-', starting with a letter or digit", name)
	}
	return nil
}

// ArtifactChunk is a piece of an artifact upload. On the wire it is a
// binary message: one byte 'a', eight bytes big-endian upload ID, then the
// data.
type ArtifactChunk struct {
	// ID is the upload's ArtifactFrame.ID.
	ID   int64
	Data []byte
}

const artifactHeaderLen = 9

// AppendBinary appends the wire form of c to b.
func (c ArtifactChunk) AppendBinary(b []byte) []byte {
	b = append(b, 'a')
	b = binary.BigEndian.AppendUint64(b, uint64(c.ID))
	return append(b, c.Data...)
}

// IsArtifactChunk reports whether a binary gateway message is an artifact
// chunk.
func IsArtifactChunk(msg []byte) bool { return len(msg) > 0 && msg[0] == 'a' }

// ParseArtifactChunk decodes a binary artifact chunk. Data aliases msg.
func ParseArtifactChunk(msg []byte) (ArtifactChunk, error) {
	if len(msg) < artifactHeaderLen || msg[0] != 'a' {
		return ArtifactChunk{}, errors.New("malformed artifact chunk")
	}
	return ArtifactChunk{ID: int64(binary.BigEndian.Uint64(msg[1:9])), Data: msg[artifactHeaderLen:]}, nil
}
