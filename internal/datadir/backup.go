package datadir

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/outpost-sh/outpost/internal/store/sealed"
	"github.com/outpost-sh/outpost/internal/store/sqlite"
)

// An archive is a gzip-compressed tar file of these entries, in order:
// outpost.db (a consistent copy of the database), secret-key (when
// included), admin-token (when the data dir has one), artifacts/… and
// output/… (unless left out), and last the manifest. An archive without
// its manifest is incomplete and is never restored.

// ManifestName is the archive's last entry, its Manifest as JSON.
const ManifestName = "outpost-backup.json"

// FormatVersion is the archive format Backup writes and Restore reads.
const FormatVersion = 1

// Manifest describes an archive.
type Manifest struct {
	Format    int       `json:"format"`
	CreatedAt time.Time `json:"created_at"`
	// Version is the outpost version that made the archive.
	Version string `json:"outpost_version"`
	// DataDir is the data dir it was made of.
	DataDir string `json:"data_dir"`
	// Migrations are the schema versions the database records.
	Migrations []int `json:"migrations"`
	Sessions   int   `json:"sessions"`
	// SealedWith are the ids of the keys the sessions' secrets are sealed
	// under: a restored server needs them.
	SealedWith []string `json:"secrets_sealed_with"`
	// SecretKeyID is the id of the key the archive holds, "" for none.
	SecretKeyID string `json:"secret_key_id,omitempty"`
	// Files and Bytes count the artifact and output files in the archive.
	Files         int   `json:"files"`
	Bytes         int64 `json:"bytes"`
	FilesLeftOut  bool  `json:"files_left_out,omitempty"`
	DatabaseBytes int64 `json:"database_bytes"`
	HasAdminToken bool  `json:"admin_token,omitempty"`
}

// KeyOpensAll reports whether the archive's key opens every session's
// secrets: it is the one they are sealed under (or there are none).
func (m Manifest) KeyOpensAll() bool {
	for _, id := range m.SealedWith {
		if id != "" && id != m.SecretKeyID {
			return false
		}
	}
	return true
}

// BackupOptions configure Backup.
type BackupOptions struct {
	// DataDir is the data dir to back up; required. Its database must
	// exist; a server may be using it.
	DataDir string
	// SecretKeyFile is the key file to put in the archive, as secret-key;
	// "" puts none (the key comes from elsewhere, or is kept apart on
	// purpose). A file named here must exist and hold a key.
	SecretKeyFile string
	// LeaveOutFiles leaves artifacts/ and output/ out of the archive.
	LeaveOutFiles bool
	// Version is recorded in the manifest.
	Version string
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Backup writes an archive of the data dir to dst, replacing dst only once
// the archive is complete (through a temporary file beside it, synced and
// renamed). The database is copied in one read transaction (see
// sqlite.Snapshot), so it is consistent while a server writes, and the copy
// is integrity-checked before it goes in. Files are copied after it: an
// artifact uploaded meanwhile may come along without its session, never the
// other way round. The archive is mode 0600: with its key it holds the
// sessions' secrets.
func Backup(ctx context.Context, dst string, o BackupOptions) (Manifest, error) {
	if o.Now == nil {
		o.Now = time.Now
	}
	var m Manifest
	dir, err := filepath.Abs(o.DataDir)
	if err != nil {
		return m, fmt.Errorf("backup: %w", err)
	}
	if dst, err = filepath.Abs(dst); err != nil {
		return m, fmt.Errorf("backup: %w", err)
	}
	if rel, err := filepath.Rel(dir, dst); err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		return m, fmt.Errorf("backup: write the archive outside the data dir %s, ideally on another disk", dir)
	}
	m = Manifest{Format: FormatVersion, CreatedAt: o.Now().UTC().Truncate(time.Second), Version: o.Version, DataDir: dir}

	var key []byte
	if o.SecretKeyFile != "" {
		b, err := os.ReadFile(o.SecretKeyFile)
		if err != nil {
			return m, fmt.Errorf("backup: read the secret key file: %w", err)
		}
		k, err := sealed.ParseKey(string(b))
		if err != nil {
			return m, fmt.Errorf("backup: the secret key file %s: %w", o.SecretKeyFile, err)
		}
		key, m.SecretKeyID = b, sealed.KeyID(k)
	}

	tmp, err := os.MkdirTemp(filepath.Dir(dst), ".outpost-backup-")
	if err != nil {
		return m, fmt.Errorf("backup: %w", err)
	}
	defer os.RemoveAll(tmp)
	snap := filepath.Join(tmp, Database)
	if err := sqlite.Snapshot(ctx, filepath.Join(dir, Database), snap); err != nil {
		return m, fmt.Errorf("backup: %w", err)
	}
	info, err := sqlite.Inspect(ctx, snap)
	if err != nil {
		return m, fmt.Errorf("backup: the copy of the database: %w", err)
	}
	m.Migrations, m.Sessions, m.SealedWith = info.Migrations, info.Sessions, info.SecretKeyIDs
	if m.SealedWith == nil {
		m.SealedWith = []string{}
	}

	f, err := os.CreateTemp(filepath.Dir(dst), "."+filepath.Base(dst)+".tmp-")
	if err != nil {
		return m, fmt.Errorf("backup: %w", err)
	}
	defer os.Remove(f.Name()) // after the rename, a no-op
	a := &archiveWriter{gz: gzip.NewWriter(f)}
	a.tw = tar.NewWriter(a.gz)
	if m.DatabaseBytes, err = a.addFile(ctx, Database, snap); err != nil {
		f.Close()
		return m, fmt.Errorf("backup: %w", err)
	}
	if key != nil {
		if err := a.addBytes(SecretKey, key, m.CreatedAt); err != nil {
			f.Close()
			return m, fmt.Errorf("backup: %w", err)
		}
	}
	if b, err := os.ReadFile(filepath.Join(dir, AdminToken)); err == nil {
		if err := a.addBytes(AdminToken, b, m.CreatedAt); err != nil {
			f.Close()
			return m, fmt.Errorf("backup: %w", err)
		}
		m.HasAdminToken = true
	}
	m.FilesLeftOut = o.LeaveOutFiles
	if !o.LeaveOutFiles {
		for _, sub := range []string{Artifacts, Output} {
			if err := a.addTree(ctx, dir, sub); err != nil {
				f.Close()
				return m, fmt.Errorf("backup: %w", err)
			}
		}
		m.Files, m.Bytes = a.files, a.bytes
	}
	manifest, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		f.Close()
		return m, err
	}
	err = a.addBytes(ManifestName, append(manifest, '\n'), m.CreatedAt)
	if err = errors.Join(err, a.tw.Close(), a.gz.Close(), f.Chmod(0o600), f.Sync(), f.Close()); err != nil {
		return m, fmt.Errorf("backup: write %s: %w", dst, err)
	}
	if err := os.Rename(f.Name(), dst); err != nil {
		return m, fmt.Errorf("backup: %w", err)
	}
	syncDir(filepath.Dir(dst))
	return m, nil
}

// archiveWriter writes entries of an archive and counts the tree files.
type archiveWriter struct {
	gz    *gzip.Writer
	tw    *tar.Writer
	files int
	bytes int64
}

func (a *archiveWriter) addBytes(name string, b []byte, at time.Time) error {
	hdr := &tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o600, Size: int64(len(b)), ModTime: at, Format: tar.FormatPAX}
	if err := a.tw.WriteHeader(hdr); err != nil {
		return err
	}
	_, err := a.tw.Write(b)
	return err
}

// addFile adds the regular file at path as name (mode 0600: what a data
// dir holds is private), with as many bytes as it had when opened (a file
// appended to meanwhile is cut there), and returns that size.
func (a *archiveWriter) addFile(ctx context.Context, name, path string) (int64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return 0, err
	}
	hdr := &tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o600, Size: fi.Size(), ModTime: fi.ModTime(), Format: tar.FormatPAX}
	if err := a.tw.WriteHeader(hdr); err != nil {
		return 0, err
	}
	if _, err := io.CopyN(a.tw, f, fi.Size()); err != nil {
		return 0, fmt.Errorf("copy %s: %w", path, err)
	}
	return fi.Size(), nil
}

// addTree adds the directory dir/sub with its directories and regular
// files, leaving out uploads still in progress (.tmp-*) and anything that
// is neither. A file that goes while the walk runs (an artifact the
// retention sweep deletes) is skipped.
func (a *archiveWriter) addTree(ctx context.Context, dir, sub string) error {
	root := filepath.Join(dir, sub)
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil {
			return err
		}
		name := filepath.ToSlash(rel)
		switch {
		case d.IsDir():
			fi, err := d.Info()
			if errors.Is(err, fs.ErrNotExist) {
				return fs.SkipDir
			}
			if err != nil {
				return err
			}
			return a.tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: name + "/", Mode: 0o700, ModTime: fi.ModTime(), Format: tar.FormatPAX})
		case !d.Type().IsRegular() || strings.HasPrefix(d.Name(), ".tmp-"):
			return nil
		}
		n, err := a.addFile(ctx, name, path)
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		a.files++
		a.bytes += n
		return nil
	})
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return err
}

// syncDir syncs a directory so the names just renamed into it last; errors
// are ignored (some file systems cannot sync directories).
func syncDir(dir string) {
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
}
