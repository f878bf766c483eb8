package dist

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/outpost-sh/outpost/internal/atomicfile"
)

// cacheSubdir is the part of the cache directory holding remotes.
const cacheSubdir = "remote"

// CachedPath is where a downloaded build of id for suffix is kept under
// cacheDir: <cacheDir>/remote/<id>_<suffix>/devin-remote (devin-remote.exe
// for Windows), with its check line beside it in devin-remote.sha256.
func CachedPath(cacheDir, id, suffix string) string {
	return filepath.Join(cacheDir, cacheSubdir, id+"_"+suffix, ExecName(suffix))
}

// fetch returns the path of a verified copy of build id in the cache,
// downloading it when the cache has none.
func (r *Resolver) fetch(ctx context.Context, id string) (string, error) {
	suffix := r.opts.Suffix
	path := CachedPath(r.opts.CacheDir, id, suffix)
	checkPath := path + checksumSuffix
	if ok, err := r.cachedOK(path, checkPath); err != nil {
		r.opts.Logger.Warn("the cached remote does not verify; downloading it again", "path", path, "err", err)
	} else if ok {
		r.opts.Logger.Debug("remote resolved to a cached build", "id", id, "path", path)
		return path, nil
	}

	sumURL := r.urlOf(ChecksumName(id, suffix))
	binURL := r.urlOf(BinaryName(id, suffix))
	sctx, cancel := context.WithTimeout(ctx, checksumTimeout)
	line, err := r.get(sctx, sumURL, maxLatestBytes)
	cancel()
	if err != nil {
		return "", fmt.Errorf("cannot read its checksum: %w", err)
	}
	want, err := ParseCheckLine(line)
	if err != nil {
		return "", fmt.Errorf("%s: %w", sumURL, err)
	}

	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("create the cache directory: %w", err)
	}
	r.opts.Logger.Info("downloading remote build", "id", id, "url", binURL)
	start := time.Now()
	tmp, n, got, err := r.download(ctx, binURL, dir)
	if err != nil {
		return "", err
	}
	defer os.Remove(tmp) // a no-op once renamed
	if got != want {
		return "", fmt.Errorf("the binary at %s has SHA-256 %s, but %s says %s: refusing to run it (the download was deleted)",
			binURL, got, sumURL, want)
	}
	if err := os.Chmod(tmp, 0o755); err != nil {
		return "", fmt.Errorf("make the remote executable: %w", err)
	}
	// The check line first: a binary in place always has one beside it.
	if err := atomicfile.Write(checkPath, []byte(CheckLine(want, suffix)), 0o644); err != nil {
		return "", fmt.Errorf("save the checksum in the cache: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		// Another worker may have put the same build in place meanwhile
		// (on Windows a running binary cannot be replaced).
		if ok, verr := r.cachedOK(path, checkPath); verr != nil || !ok {
			return "", fmt.Errorf("save the remote in the cache: %w", err)
		}
	}
	r.remember(path)
	r.opts.Logger.Info("remote build downloaded and verified", "id", id, "sha256", want, "bytes", n,
		"duration", time.Since(start).Round(time.Millisecond), "path", path)
	return path, nil
}

// download streams url into a new temporary file in dir and returns the
// file's path, its size and its hex SHA-256. On error nothing is left.
func (r *Resolver) download(ctx context.Context, url, dir string) (string, int64, string, error) {
	ctx, cancel := context.WithTimeout(ctx, binaryTimeout)
	defer cancel()
	resp, err := r.do(ctx, url)
	if err != nil {
		return "", 0, "", fmt.Errorf("cannot download it: %w", err)
	}
	defer resp.Body.Close()
	f, err := os.CreateTemp(dir, ".download-*")
	if err != nil {
		return "", 0, "", fmt.Errorf("create a file in the cache: %w", err)
	}
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(f, h), io.LimitReader(resp.Body, maxBinaryBytes+1))
	if err == nil && n > maxBinaryBytes {
		err = fmt.Errorf("it is larger than %d bytes", int64(maxBinaryBytes))
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(f.Name())
		return "", 0, "", fmt.Errorf("cannot download it from %s: %w", url, err)
	}
	return f.Name(), n, hex.EncodeToString(h.Sum(nil)), nil
}

// cachedOK reports whether path holds a binary matching the check line in
// checkPath. Missing files are (false, nil); a mismatch is an error. A file
// already verified by this Resolver and unchanged since is not hashed again.
func (r *Resolver) cachedOK(path, checkPath string) (bool, error) {
	fi, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	line, err := os.ReadFile(checkPath)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	want, err := ParseCheckLine(line)
	if err != nil {
		return false, err
	}
	key := fileKey{fi.Size(), fi.ModTime()}
	r.mu.Lock()
	known, ok := r.verified[path]
	r.mu.Unlock()
	if ok && known == key {
		return true, nil
	}
	got, err := FileSHA256(path)
	if err != nil {
		return false, err
	}
	if got != want {
		return false, fmt.Errorf("it has SHA-256 %s, but its check line says %s", got, want)
	}
	r.mu.Lock()
	r.verified[path] = key
	r.mu.Unlock()
	return true, nil
}

// remember marks path verified as it is now.
func (r *Resolver) remember(path string) {
	if fi, err := os.Stat(path); err == nil {
		r.mu.Lock()
		r.verified[path] = fileKey{fi.Size(), fi.ModTime()}
		r.mu.Unlock()
	}
}
