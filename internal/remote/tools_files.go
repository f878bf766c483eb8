package remote

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/outpost-sh/outpost/api"
)

// maxReadFile is the largest file read_file and edit_file accept.
const maxReadFile = 10 << 20

func runReadFile(_ context.Context, c *callEnv, raw json.RawMessage) (any, error) {
	var a api.ReadFileArgs
	if err := decodeArgs(raw, &a); err != nil {
		return nil, err
	}
	if a.Path == "" {
		return nil, errors.New("bad arguments: path is required")
	}
	if a.StartLine < 0 || a.EndLine < 0 {
		return nil, errors.New("bad arguments: start_line and end_line must not be negative")
	}
	if a.EndLine > 0 && a.StartLine > a.EndLine {
		return nil, fmt.Errorf("bad arguments: start_line %d is after end_line %d", a.StartLine, a.EndLine)
	}
	path := c.path(a.Path)
	b, err := readLimited(path)
	if err != nil {
		return nil, err
	}
	if isBinary(b) {
		return nil, fmt.Errorf("read %s: it looks like a binary file (a NUL byte in its first 8 KiB); inspect it with exec, e.g. xxd %s | head or base64 %s", path, path, path)
	}
	res := api.ReadFileResult{Content: string(b), Size: int64(len(b))}
	if a.StartLine > 0 || a.EndLine > 0 {
		res.Content, res.TotalLines = lineRange(res.Content, a.StartLine, a.EndLine)
	}
	return res, nil
}

// binarySniff is how much of a file isBinary looks at.
const binarySniff = 8 << 10

// isBinary reports whether b looks binary: a NUL byte in its first 8 KiB.
func isBinary(b []byte) bool {
	return bytes.IndexByte(b[:min(len(b), binarySniff)], 0) >= 0
}

// lineRange returns lines start to end (1-based, inclusive; 0 means the
// first and the last) of s, each with its newline, and s's line count.
func lineRange(s string, start, end int) (string, int) {
	lines := strings.SplitAfter(s, "\n")
	if lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1] // s ends with a newline, or is empty
	}
	total := len(lines)
	start = max(start, 1)
	if end == 0 || end > total {
		end = total
	}
	if start > end {
		return "", total
	}
	return strings.Join(lines[start-1:end], ""), total
}

// readLimited reads a regular file of at most maxReadFile bytes.
func readLimited(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if st.IsDir() {
		return nil, fmt.Errorf("read %s: it is a directory; use list_dir", path)
	}
	if st.Size() > maxReadFile {
		return nil, fmt.Errorf("read %s: the file is %d bytes, over the 10 MiB limit; read part of it with exec (head, tail, sed -n)", path, st.Size())
	}
	b, err := io.ReadAll(io.LimitReader(f, maxReadFile+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if len(b) > maxReadFile {
		return nil, fmt.Errorf("read %s: the file is over the 10 MiB limit; read part of it with exec (head, tail, sed -n)", path)
	}
	return b, nil
}

func runWriteFile(_ context.Context, c *callEnv, raw json.RawMessage) (any, error) {
	var a api.WriteFileArgs
	if err := decodeArgs(raw, &a); err != nil {
		return nil, err
	}
	if a.Path == "" {
		return nil, errors.New("bad arguments: path is required")
	}
	if err := writeAtomic(c.path(a.Path), []byte(a.Content)); err != nil {
		return nil, err
	}
	return api.WriteFileResult{Bytes: int64(len(a.Content))}, nil
}

// writeAtomic replaces path with data through a temporary file and a rename,
// creating parent directories and keeping an existing file's mode. A symlink
// is followed.
func writeAtomic(path string, data []byte) error {
	if target, err := filepath.EvalSymlinks(path); err == nil {
		path = target // write through a symlink, not over it
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	mode := fs.FileMode(0o644)
	if st, err := os.Stat(path); err == nil {
		if st.IsDir() {
			return fmt.Errorf("write %s: it is a directory", path)
		}
		mode = st.Mode().Perm()
	}
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	tmp := f.Name()
	_, err = f.Write(data)
	if err == nil {
		err = f.Chmod(mode)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

func runEditFile(_ context.Context, c *callEnv, raw json.RawMessage) (any, error) {
	var a api.EditFileArgs
	if err := decodeArgs(raw, &a); err != nil {
		return nil, err
	}
	if a.Path == "" {
		return nil, errors.New("bad arguments: path is required")
	}
	if a.Old == "" {
		return nil, errors.New("bad arguments: old must not be empty")
	}
	path := c.path(a.Path)
	b, err := readLimited(path)
	if err != nil {
		return nil, fmt.Errorf("edit: %w", err)
	}
	content := string(b)
	switch n := strings.Count(content, a.Old); n {
	case 1:
	case 0:
		return nil, fmt.Errorf("edit %s: old text not found (0 matches); it must match exactly once, including whitespace", path)
	default:
		return nil, fmt.Errorf("edit %s: old text matches %d times; it must match exactly once: include more surrounding lines", path, n)
	}
	i := strings.Index(content, a.Old)
	updated := content[:i] + a.New + content[i+len(a.Old):]
	if err := writeAtomic(path, []byte(updated)); err != nil {
		return nil, fmt.Errorf("edit: %w", err)
	}
	return api.EditFileResult{Line: 1 + strings.Count(content[:i], "\n"), Diff: editDiff(a.Path, content, updated, i, len(a.Old), len(a.New))}, nil
}

// maxDiff bounds the diff edit_file returns.
const maxDiff = 16 << 10

// editDiff renders one replacement (at byte i, old length n, new length m)
// as a unified diff hunk with three lines of context.
func editDiff(name, before, after string, i, n, m int) string {
	const context = 3
	lineStart := strings.LastIndex(before[:i], "\n") + 1
	oldLines := strings.Split(strings.TrimSuffix(before[lineStart:], "\n"), "\n")
	newLines := strings.Split(strings.TrimSuffix(after[lineStart:], "\n"), "\n")
	// Lines the replacement touches, counted from lineStart.
	oldN := strings.Count(before[lineStart:i+n], "\n") + 1
	newN := strings.Count(after[lineStart:i+m], "\n") + 1
	first := strings.Count(before[:lineStart], "\n") // lines above, 0-based index of the first changed line
	preLines := strings.Split(before[:lineStart], "\n")
	pre := preLines[:len(preLines)-1]
	if len(pre) > context {
		pre = pre[len(pre)-context:]
	}
	post := []string{}
	if oldN < len(oldLines) {
		post = oldLines[oldN:min(len(oldLines), oldN+context)]
	}
	var b strings.Builder
	fmt.Fprintf(&b, "--- a/%s\n+++ b/%s\n@@ -%d,%d +%d,%d @@\n", name, name,
		first-len(pre)+1, len(pre)+oldN+len(post), first-len(pre)+1, len(pre)+newN+len(post))
	for _, l := range pre {
		b.WriteString(" " + l + "\n")
	}
	for _, l := range oldLines[:min(oldN, len(oldLines))] {
		b.WriteString("-" + l + "\n")
	}
	for _, l := range newLines[:min(newN, len(newLines))] {
		b.WriteString("+" + l + "\n")
	}
	for _, l := range post {
		b.WriteString(" " + l + "\n")
	}
	if b.Len() > maxDiff {
		return b.String()[:maxDiff] + "\n[diff cut]\n"
	}
	return b.String()
}

func runListDir(_ context.Context, c *callEnv, raw json.RawMessage) (any, error) {
	var a api.ListDirArgs
	if err := decodeArgs(raw, &a); err != nil {
		return nil, err
	}
	path := c.path(a.Path)
	entries, err := os.ReadDir(path) // sorted by name
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", path, err)
	}
	res := api.ListDirResult{Entries: make([]api.DirEntry, 0, len(entries))}
	for _, e := range entries {
		d := api.DirEntry{Name: e.Name(), Type: "other"}
		switch t := e.Type(); {
		case t.IsRegular():
			d.Type = "file"
			if info, err := e.Info(); err == nil {
				d.Size = info.Size()
			}
		case t.IsDir():
			d.Type = "dir"
		case t&fs.ModeSymlink != 0:
			d.Type = "symlink"
		}
		res.Entries = append(res.Entries, d)
	}
	return res, nil
}
