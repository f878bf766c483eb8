// Package gitmirror keeps a worker's shared bare mirrors of the git
// repositories its sessions clone (the directory OUTPOST_GIT_MIRRORS
// names), so that a clone takes most of its objects from the local disk.
//
// A mirror is shared by every session of the machine, so session code must
// never write one: a mirror whose configuration names an upload-pack
// program, a hook or an fsmonitor would run that program in the next
// session that reads it, with that session's secrets. The package splits
// the work accordingly:
//
//   - The remote, inside the session's sandbox, only reads mirrors, with
//     ReadArgs on every git command that touches one, and clones from the
//     upstream URL itself with the mirror as a reference, so the clone has
//     the upstream's newest commits whatever the mirror's age. It records
//     the URLs it cloned in its state dir (Want).
//   - The worker, outside any sandbox, makes and updates the mirrors of
//     those URLs after the session (Wanted, Update): it writes each
//     mirror's configuration anew, with the URL fixed to the one the mirror
//     is for, removes hooks and alternates, and runs git with the same
//     overrides. Sandboxes see the directory read-only, and in user
//     isolation it stays the worker's.
//
// Only network URLs are mirrored (https, http and git): the worker must
// not copy a local repository that session code could not read itself
// into a directory every session reads.
package gitmirror

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
)

// WantFile is the file in a remote's state dir that lists, one a line, the
// URLs its session cloned, for the worker to mirror after the session.
const WantFile = "git-mirror-urls"

// Limits on what the worker reads from a state dir, which session code
// can write: at most maxWanted URLs of at most maxURLLen bytes each.
const (
	maxWanted = 16
	maxURLLen = 2048
)

// mirrorExt ends a mirror's name. Mirrors of earlier versions ended in
// ".git" and could be written by session code: the worker removes them
// (Prepare) rather than trust their objects.
const mirrorExt = ".mirror"

// mirrorSchemes are the URL schemes mirrored.
var mirrorSchemes = []string{"https", "http", "git"}

// Path returns the path of the mirror of rawURL under root, or an error
// saying why rawURL is not mirrored: only https, http and git URLs without
// a user name or password in them are.
func Path(root, rawURL string) (string, error) {
	if err := checkURL(rawURL); err != nil {
		return "", err
	}
	sum := sha256.Sum256([]byte(rawURL))
	return filepath.Join(root, hex.EncodeToString(sum[:8])+mirrorExt), nil
}

// checkURL says why rawURL is not mirrored, or nil.
func checkURL(rawURL string) error {
	if len(rawURL) > maxURLLen || strings.ContainsFunc(rawURL, func(r rune) bool { return r <= 0x20 || r == 0x7f }) {
		return errors.New("the URL is too long or holds spaces or control characters")
	}
	u, err := url.Parse(rawURL)
	if err != nil {
		return fmt.Errorf("parse the URL: %w", err)
	}
	ok := false
	for _, s := range mirrorSchemes {
		ok = ok || u.Scheme == s
	}
	switch {
	case !ok:
		return fmt.Errorf("only %s URLs are mirrored", strings.Join(mirrorSchemes, ", "))
	case u.User != nil:
		// The mirror's config would show the credentials to every session.
		return errors.New("a URL with a user name or password is not mirrored")
	case u.Host == "" || strings.HasPrefix(u.Host, "-"):
		return errors.New("the URL has no usable host")
	}
	return nil
}

// Ready reports whether path holds a mirror the worker made (a directory,
// not a link, with objects and a HEAD).
func Ready(path string) bool {
	fi, err := os.Lstat(path)
	if err != nil || !fi.IsDir() {
		return false
	}
	if fi, err := os.Lstat(filepath.Join(path, "objects")); err != nil || !fi.IsDir() {
		return false
	}
	_, err = os.Lstat(filepath.Join(path, "HEAD"))
	return err == nil
}

// ReadArgs are the git options of every command that reads the mirror at
// path (they reach the git processes it starts too). The mirror's own
// configuration could have been written by an earlier version that let
// sessions write mirrors, or by hand; these keep it from running anything:
// no hooks, no fsmonitor, the standard upload-pack, and the mirror trusted
// as a reference although another user owns it.
func ReadArgs(path string) []string {
	return []string{
		"-c", "core.hooksPath=/dev/null",
		"-c", "core.fsmonitor=false",
		"-c", "remote.origin.uploadpack=git-upload-pack",
		"-c", "safe.directory=" + path,
	}
}

// Want records in stateDir that the session cloned rawURL, once. URLs that
// are not mirrored are not recorded.
func Want(stateDir, rawURL string) error {
	if checkURL(rawURL) != nil {
		return nil
	}
	path := filepath.Join(stateDir, WantFile)
	have, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("read %s: %w", WantFile, err)
	}
	lines := strings.Split(string(have), "\n")
	for _, l := range lines {
		if l == rawURL {
			return nil
		}
	}
	if len(lines) > maxWanted {
		return nil
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("record a URL to mirror: %w", err)
	}
	_, err = f.WriteString(rawURL + "\n")
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("record a URL to mirror: %w", err)
	}
	return nil
}

// Wanted returns the URLs the session of stateDir recorded with Want, at
// most maxWanted, leaving out every line that is not a URL Path accepts.
// Session code can write the state dir, so the file is read only when it
// is a regular file that is not a link, and only so far.
func Wanted(stateDir string) ([]string, error) {
	data, err := readPlain(filepath.Join(stateDir, WantFile), maxWanted*(maxURLLen+1))
	if err != nil || data == nil {
		return nil, err
	}
	var urls []string
	for _, l := range strings.Split(string(data), "\n") {
		if len(urls) == maxWanted {
			break
		}
		if checkURL(l) != nil {
			continue
		}
		dup := false
		for _, u := range urls {
			dup = dup || u == l
		}
		if !dup {
			urls = append(urls, l)
		}
	}
	return urls, nil
}
