package datadir

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"github.com/outpost-sh/outpost/internal/store/sealed"
	"github.com/outpost-sh/outpost/internal/store/sqlite"
)

// RestoreOptions configure Restore.
type RestoreOptions struct {
	// DataDir is the directory to restore into; created when missing.
	DataDir string
	// Force restores into a data dir that is not empty: its database (and
	// -wal, -shm), admin-token, artifacts/ and output/ are replaced, and
	// its secret-key when the archive holds one. Other files stay.
	Force bool
}

// RestoreResult says what Restore did.
type RestoreResult struct {
	Manifest Manifest
	// KeyID is the id of the key in the data dir's secret-key after the
	// restore — the archive's, or one the data dir kept — "" for none.
	KeyID string
}

// NotEmptyError is Restore's error for a data dir that holds something
// and no Force.
type NotEmptyError struct {
	Dir   string
	Names []string // some of what it holds
}

func (e *NotEmptyError) Error() string {
	return fmt.Sprintf("the data dir %s is not empty (it holds %s)", e.Dir, strings.Join(e.Names, ", "))
}

// Restore unpacks the archive src (made by Backup) into a data dir, which
// must be empty unless Force, while holding the data dir's lock, so it
// refuses while a server uses the directory and no server starts on it
// before it is done. Everything is unpacked and checked first — the archive
// complete (its manifest last), every name one the data dir has, the
// database whole (PRAGMA integrity_check) and of a schema this build knows
// — into a directory inside the data dir, then renamed into place, the
// database last. A restore that fails leaves the data dir as it was, but
// for what Force removed.
func Restore(ctx context.Context, src string, o RestoreOptions) (RestoreResult, error) {
	var res RestoreResult
	dir, err := filepath.Abs(o.DataDir)
	if err != nil {
		return res, fmt.Errorf("restore: %w", err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return res, fmt.Errorf("restore: create the data dir: %w", err)
	}
	lock, err := Acquire(dir)
	if err != nil {
		return res, fmt.Errorf("restore: %w", err)
	}
	defer lock.Release()
	if !o.Force {
		ents, err := os.ReadDir(dir)
		if err != nil {
			return res, fmt.Errorf("restore: %w", err)
		}
		var names []string
		for _, e := range ents {
			if e.Name() != LockFile {
				names = append(names, e.Name())
			}
		}
		if len(names) > 0 {
			return res, &NotEmptyError{Dir: dir, Names: names[:min(len(names), 5)]}
		}
	}

	staging, err := os.MkdirTemp(dir, ".restore-")
	if err != nil {
		return res, fmt.Errorf("restore: %w", err)
	}
	defer os.RemoveAll(staging)
	m, err := unpack(ctx, src, staging)
	if err != nil {
		return res, fmt.Errorf("restore %s: %w", src, err)
	}
	res.Manifest = m
	if m.Format != FormatVersion {
		return res, fmt.Errorf("restore %s: the archive's format %d is not one this version reads (%d); restore it with the version that made it (%s)", src, m.Format, FormatVersion, m.Version)
	}
	info, err := sqlite.Inspect(ctx, filepath.Join(staging, Database))
	if err != nil {
		return res, fmt.Errorf("restore %s: %w", src, err)
	}
	if len(info.Unknown) > 0 {
		return res, fmt.Errorf("restore %s: the database was written by a newer version of outpost (%s; migrations %v are unknown to this build): restore it with that version or a newer one", src, m.Version, info.Unknown)
	}

	staged, err := os.ReadDir(staging)
	if err != nil {
		return res, fmt.Errorf("restore: %w", err)
	}
	if o.Force {
		remove := []string{Database, Database + "-wal", Database + "-shm", Database + "-journal", AdminToken, Artifacts, Output}
		if slices.ContainsFunc(staged, func(e os.DirEntry) bool { return e.Name() == SecretKey }) {
			remove = append(remove, SecretKey)
		}
		for _, name := range remove {
			if err := os.RemoveAll(filepath.Join(dir, name)); err != nil {
				return res, fmt.Errorf("restore: replace %s: %w", name, err)
			}
		}
	}
	// The database last: a data dir with a database is a restored one.
	slices.SortStableFunc(staged, func(a, b os.DirEntry) int {
		return boolCmp(a.Name() == Database, b.Name() == Database)
	})
	for _, e := range staged {
		if e.Name() == ManifestName {
			continue
		}
		if err := os.Rename(filepath.Join(staging, e.Name()), filepath.Join(dir, e.Name())); err != nil {
			return res, fmt.Errorf("restore: %w", err)
		}
	}
	syncDir(dir)
	if b, err := os.ReadFile(filepath.Join(dir, SecretKey)); err == nil {
		if k, err := sealed.ParseKey(string(b)); err == nil {
			res.KeyID = sealed.KeyID(k)
		}
	}
	return res, nil
}

func boolCmp(a, b bool) int {
	switch {
	case a == b:
		return 0
	case a:
		return 1
	}
	return -1
}

// unpack extracts the archive src into dir (empty) and returns its
// manifest. Only the names an archive has are accepted, each once, as
// regular files and directories; a missing manifest or database, or an
// entry after the manifest, is an error.
func unpack(ctx context.Context, src, dir string) (Manifest, error) {
	var m Manifest
	f, err := os.Open(src)
	if err != nil {
		return m, err
	}
	defer f.Close()
	gz, err := gzip.NewReader(f)
	if err != nil {
		return m, fmt.Errorf("not an outpost backup (made by outpost server backup): %w", err)
	}
	tr := tar.NewReader(gz)
	haveDB, haveManifest := false, false
	for {
		if err := ctx.Err(); err != nil {
			return m, err
		}
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return m, fmt.Errorf("read the archive: %w", err)
		}
		if haveManifest {
			return m, fmt.Errorf("the archive has an entry after its manifest (%q)", hdr.Name)
		}
		name, err := entryName(hdr)
		if err != nil {
			return m, err
		}
		target := filepath.Join(dir, filepath.FromSlash(name))
		if hdr.Typeflag == tar.TypeDir {
			if err := os.MkdirAll(target, 0o700); err != nil {
				return m, err
			}
			continue
		}
		if name == ManifestName {
			b, err := io.ReadAll(io.LimitReader(tr, 1<<20))
			if err != nil {
				return m, fmt.Errorf("read the manifest: %w", err)
			}
			if err := json.Unmarshal(b, &m); err != nil {
				return m, fmt.Errorf("the archive's manifest: %w", err)
			}
			haveManifest = true
			continue
		}
		haveDB = haveDB || name == Database
		if err := os.MkdirAll(filepath.Dir(target), 0o700); err != nil {
			return m, err
		}
		out, err := os.OpenFile(target, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			return m, fmt.Errorf("the archive holds %s twice, or: %w", name, err)
		}
		_, err = io.Copy(out, tr)
		if err = errors.Join(err, out.Sync(), out.Close()); err != nil {
			return m, fmt.Errorf("unpack %s: %w", name, err)
		}
	}
	if !haveManifest {
		return m, errors.New("the archive has no manifest: it is incomplete (cut short while it was written or copied) or not an outpost backup")
	}
	if !haveDB {
		return m, fmt.Errorf("the archive has no %s", Database)
	}
	return m, nil
}

// entryName checks a tar entry against what an archive may hold and
// returns its clean slash-separated name.
func entryName(hdr *tar.Header) (string, error) {
	raw := strings.TrimSuffix(hdr.Name, "/")
	name := path.Clean(raw)
	if raw == "" || name != raw || path.IsAbs(name) || name == ".." || strings.HasPrefix(name, "../") || strings.Contains(name, "\\") {
		return "", fmt.Errorf("the archive holds an entry named %q, which a backup never has", hdr.Name)
	}
	top, rest, nested := strings.Cut(name, "/")
	switch hdr.Typeflag {
	case tar.TypeReg:
		switch {
		case !nested && (top == Database || top == SecretKey || top == AdminToken || top == ManifestName):
			return name, nil
		case nested && (top == Artifacts || top == Output) && rest != "":
			return name, nil
		}
	case tar.TypeDir:
		if top == Artifacts || top == Output {
			return name, nil
		}
	}
	return "", fmt.Errorf("the archive holds %q (type %q), which a backup never has", hdr.Name, string(hdr.Typeflag))
}
