// Package snapshot archives a workspace directory into a zstd-compressed
// tar stream and restores one: the whole tree (regular files with their
// modes and modification times, directories, empty ones too, and symbolic
// links stored as links, never followed), checksummed with SHA-256 and
// size-limited. Sockets, devices and named pipes are skipped and counted.
//
// Both directions stream with bounded buffers: memory stays flat whatever
// the size of the workspace. Restore verifies the checksum before it lets
// the archive replace anything, writes no more than the snapshot recorded
// and the disk has free, keeps the holes of sparse files, and on failure
// leaves the workspace as it was (see Restore).
package snapshot

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"github.com/klauspost/compress/zstd"
)

// ErrTooLarge is matched (errors.Is) by the *TooLargeError Write returns
// when the compressed archive would exceed Options.Limit.
var ErrTooLarge = errors.New("workspace snapshot too large")

// TooLargeError reports that a snapshot would exceed its limit.
type TooLargeError struct {
	// Limit is the largest archive allowed, in bytes.
	Limit int64
}

func (e *TooLargeError) Error() string {
	return fmt.Sprintf("the workspace snapshot exceeds the limit of %s (%d bytes) compressed; delete large files from the workspace or ask for a higher limit", humanBytes(e.Limit), e.Limit)
}

// Is makes errors.Is(err, ErrTooLarge) true.
func (e *TooLargeError) Is(target error) bool { return target == ErrTooLarge }

// Options configure Write and Restore.
type Options struct {
	// Limit is the largest compressed archive Write produces and Restore
	// reads, in bytes. Zero means no limit.
	Limit int64
	// Exclude lists paths relative to the directory (slash-separated,
	// e.g. ".outpost/state") that Write leaves out and Restore neither
	// extracts nor removes: the remote's own state directory when it lies
	// inside its workspace.
	Exclude []string
}

// excluded reports whether rel (slash-separated, relative) is one of the
// excluded paths or inside one.
func (o Options) excluded(rel string) bool {
	for _, e := range o.cleanExclude() {
		if rel == e || strings.HasPrefix(rel, e+"/") {
			return true
		}
	}
	return false
}

// holdsExcluded reports whether the directory rel contains an excluded
// path (so Restore must descend into it instead of replacing it whole).
func (o Options) holdsExcluded(rel string) bool {
	for _, e := range o.cleanExclude() {
		if strings.HasPrefix(e, rel+"/") {
			return true
		}
	}
	return false
}

func (o Options) cleanExclude() []string {
	out := make([]string, 0, len(o.Exclude))
	for _, e := range o.Exclude {
		e = filepath.ToSlash(filepath.Clean(e))
		if e != "." && e != "" && filepath.IsLocal(e) {
			out = append(out, e)
		}
	}
	return slices.Compact(out)
}

// encoderWindow is the zstd window: the encoder keeps about two of them per
// concurrent block, and a decoder one, so it bounds memory both ways.
const encoderWindow = 8 << 20

// maxDecoderWindow is the largest window Restore accepts (an archive of a
// later build with a larger window still restores up to this).
const maxDecoderWindow = 32 << 20

// concurrency is how many goroutines the encoder and decoder each use: two
// at most (compression overlapped with reading files), whatever the CPU
// count, so memory does not grow with the machine.
const concurrency = 2

func newEncoder(w interface{ Write([]byte) (int, error) }) (*zstd.Encoder, error) {
	return zstd.NewWriter(w,
		zstd.WithEncoderLevel(zstd.SpeedDefault),
		zstd.WithWindowSize(encoderWindow),
		zstd.WithEncoderConcurrency(concurrency),
		zstd.WithEncoderCRC(true),
	)
}

func newDecoder(r interface{ Read([]byte) (int, error) }) (*zstd.Decoder, error) {
	return zstd.NewReader(r,
		zstd.WithDecoderConcurrency(concurrency),
		zstd.WithDecoderMaxWindow(maxDecoderWindow),
		zstd.WithDecoderMaxMemory(maxDecoderWindow),
	)
}

func humanBytes(n int64) string {
	switch {
	case n >= 1<<30 && n%(1<<30) == 0:
		return fmt.Sprintf("%d GiB", n>>30)
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d bytes", n)
}
