package datadir

import (
	"archive/tar"
	"compress/gzip"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	_ "modernc.org/sqlite"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/store"
	"github.com/outpost-sh/outpost/internal/store/sealed"
	"github.com/outpost-sh/outpost/internal/store/sqlite"
)

// fixture is a data dir as a server leaves it: a database whose sessions
// have sealed secrets, the key file, the admin token, artifacts (one upload
// in progress) and spilled output.
type fixture struct {
	dir  string
	key  []byte
	keys *sealed.Keyring
}

func newFixture(t *testing.T, sessions int) fixture {
	t.Helper()
	fx := fixture{dir: t.TempDir()}
	var err error
	if fx.key, err = sealed.GenerateKey(); err != nil {
		t.Fatal(err)
	}
	if fx.keys, err = sealed.NewKeyring(fx.key); err != nil {
		t.Fatal(err)
	}
	s, err := sqlite.Open(t.Context(), filepath.Join(fx.dir, Database), sqlite.WithKeyring(fx.keys))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for i := range sessions {
		now := time.Now()
		sess := store.Session{ID: fmt.Sprint("s", i), OutpostID: "op", Status: api.StatusNew, CreatedAt: now, UpdatedAt: now,
			Secrets: map[string]string{"API_TOKEN": fmt.Sprint("hunter", i)}}
		if err := s.CreateSession(t.Context(), sess, &store.QueueEntry{OutpostID: "op", Phase: api.PhasePending}, nil); err != nil {
			t.Fatal(err)
		}
	}
	files := map[string]string{
		SecretKey:                            sealed.EncodeKey(fx.key) + "\n",
		AdminToken:                           "opt_admin\n",
		"artifacts/s0/report.txt":            "the report",
		"artifacts/s0/.meta/report.txt.json": `{"name":"report.txt"}`,
		"artifacts/s0/.tmp-7-upload":         "half an upload",
		"output/s0/3.log":                    "much output",
	}
	for name, body := range files {
		p := filepath.Join(fx.dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return fx
}

func (fx fixture) backup(t *testing.T, o BackupOptions) (string, Manifest) {
	t.Helper()
	o.DataDir = fx.dir
	dst := filepath.Join(t.TempDir(), "backup.tar.gz")
	m, err := Backup(t.Context(), dst, o)
	if err != nil {
		t.Fatal(err)
	}
	return dst, m
}

// TestBackupRestore: an archive restores into an empty dir as the data dir
// was — the database opens with the archived key and its secrets read,
// artifacts and output are there, an upload in progress is not — and the
// archive is private.
func TestBackupRestore(t *testing.T) {
	fx := newFixture(t, 3)
	dst, m := fx.backup(t, BackupOptions{SecretKeyFile: filepath.Join(fx.dir, SecretKey), Version: "v-test"})
	if fi, err := os.Stat(dst); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("archive: %v, %v; want mode 0600", fi, err)
	}
	if m.Sessions != 3 || m.SecretKeyID != fx.keys.ID() || !slices.Equal(m.SealedWith, []string{fx.keys.ID()}) || !m.KeyOpensAll() ||
		m.Files != 3 || !m.HasAdminToken || m.Version != "v-test" || len(m.Migrations) == 0 {
		t.Errorf("manifest %+v", m)
	}

	into := filepath.Join(t.TempDir(), "restored")
	res, err := Restore(t.Context(), dst, RestoreOptions{DataDir: into})
	if err != nil {
		t.Fatal(err)
	}
	if res.KeyID != fx.keys.ID() || res.Manifest.Sessions != 3 {
		t.Errorf("restore result %+v", res)
	}
	for _, name := range []string{SecretKey, AdminToken, "artifacts/s0/report.txt", "artifacts/s0/.meta/report.txt.json", "output/s0/3.log"} {
		want, _ := os.ReadFile(filepath.Join(fx.dir, name))
		got, err := os.ReadFile(filepath.Join(into, name))
		if err != nil || string(got) != string(want) {
			t.Errorf("%s restored as %q, %v; want %q", name, got, err, want)
		}
	}
	if _, err := os.Stat(filepath.Join(into, "artifacts/s0/.tmp-7-upload")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("an upload in progress was restored: %v", err)
	}
	ents, _ := os.ReadDir(into)
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), ".restore-") || e.Name() == ManifestName {
			t.Errorf("restore left %s in the data dir", e.Name())
		}
	}
	s, err := sqlite.Open(t.Context(), filepath.Join(into, Database), sqlite.WithKeyring(fx.keys))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for i := range 3 {
		sess, err := s.GetSession(t.Context(), fmt.Sprint("s", i))
		if err != nil || sess.Secrets["API_TOKEN"] != fmt.Sprint("hunter", i) {
			t.Errorf("restored session s%d: %v, secrets %v", i, err, sess.Secrets)
		}
	}
}

// TestBackupWithoutKeyOrFiles: the archive then holds neither, and says
// whose key the secrets need.
func TestBackupWithoutKeyOrFiles(t *testing.T) {
	fx := newFixture(t, 1)
	dst, m := fx.backup(t, BackupOptions{LeaveOutFiles: true})
	if m.SecretKeyID != "" || m.KeyOpensAll() || !m.FilesLeftOut || m.Files != 0 {
		t.Errorf("manifest %+v", m)
	}
	names := archiveNames(t, dst)
	if slices.Contains(names, SecretKey) || slices.ContainsFunc(names, func(n string) bool { return strings.HasPrefix(n, Artifacts) || strings.HasPrefix(n, Output) }) {
		t.Errorf("archive holds %v", names)
	}
	if names[len(names)-1] != ManifestName || names[0] != Database {
		t.Errorf("archive entries %v: want the database first and the manifest last", names)
	}
	res, err := Restore(t.Context(), dst, RestoreOptions{DataDir: t.TempDir()})
	if err != nil || res.KeyID != "" {
		t.Errorf("restore: %+v, %v", res, err)
	}
}

func TestBackupRefusals(t *testing.T) {
	fx := newFixture(t, 1)
	if _, err := Backup(t.Context(), filepath.Join(fx.dir, "backup.tar.gz"), BackupOptions{DataDir: fx.dir}); err == nil || !strings.Contains(err.Error(), "outside the data dir") {
		t.Errorf("backup into the data dir: %v", err)
	}
	empty := t.TempDir()
	if _, err := Backup(t.Context(), filepath.Join(t.TempDir(), "b.tar.gz"), BackupOptions{DataDir: empty}); err == nil || !strings.Contains(err.Error(), "no database") {
		t.Errorf("backup of a data dir without a database: %v", err)
	}
	if _, err := os.Stat(filepath.Join(empty, Database)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("backup created a database: %v", err)
	}
	bad := filepath.Join(t.TempDir(), "bad-key")
	os.WriteFile(bad, []byte("short"), 0o600)
	if _, err := Backup(t.Context(), filepath.Join(t.TempDir(), "b.tar.gz"), BackupOptions{DataDir: fx.dir, SecretKeyFile: bad}); err == nil {
		t.Error("backup with a key file that holds no key succeeded")
	}
}

// TestRestoreRefusals: a data dir that is not empty (without Force) or
// that a process holds, and archives that are cut short, hold names a
// backup never has, or come from a newer version, are refused and leave
// the data dir as it was.
func TestRestoreRefusals(t *testing.T) {
	fx := newFixture(t, 2)
	dst, _ := fx.backup(t, BackupOptions{SecretKeyFile: filepath.Join(fx.dir, SecretKey)})

	full := t.TempDir()
	os.WriteFile(filepath.Join(full, "notes.txt"), []byte("mine"), 0o600)
	var ne *NotEmptyError
	if _, err := Restore(t.Context(), dst, RestoreOptions{DataDir: full}); !errors.As(err, &ne) || !slices.Contains(ne.Names, "notes.txt") {
		t.Errorf("restore into a dir that is not empty: %v", err)
	}

	busy := t.TempDir()
	l, err := Acquire(busy)
	if err != nil {
		t.Fatal(err)
	}
	_, err = Restore(t.Context(), dst, RestoreOptions{DataDir: busy})
	var le *LockedError
	if !errors.As(err, &le) || le.PID != os.Getpid() || !strings.Contains(err.Error(), fmt.Sprint("pid ", os.Getpid())) {
		t.Errorf("restore into a locked dir: %v", err)
	}
	l.Release()

	raw, _ := os.ReadFile(dst)
	cut := filepath.Join(t.TempDir(), "cut.tar.gz")
	os.WriteFile(cut, raw[:len(raw)*2/3], 0o600)
	evil := writeArchive(t, map[string]string{Database: "x", "../escape": "x", ManifestName: "{}"})
	junk := filepath.Join(t.TempDir(), "junk.tar.gz")
	os.WriteFile(junk, []byte("not an archive"), 0o600)
	for name, src := range map[string]string{"cut short": cut, "escaping": evil, "not gzip": junk} {
		into := t.TempDir()
		if _, err := Restore(t.Context(), src, RestoreOptions{DataDir: into}); err == nil {
			t.Errorf("restore of an archive %s succeeded", name)
		}
		if ents, _ := os.ReadDir(into); len(ents) != 1 || ents[0].Name() != LockFile {
			t.Errorf("restore of an archive %s left %v", name, ents)
		}
	}

	// A database of a newer version.
	newer := newFixture(t, 1)
	db, err := sql.Open("sqlite", filepath.Join(newer.dir, Database))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`INSERT INTO schema_migrations (version, name, applied_at) VALUES (9999, '9999_future', 0)`); err != nil {
		t.Fatal(err)
	}
	db.Close()
	src, _ := newer.backup(t, BackupOptions{Version: "v9"})
	if _, err := Restore(t.Context(), src, RestoreOptions{DataDir: t.TempDir()}); err == nil || !strings.Contains(err.Error(), "newer version") {
		t.Errorf("restore of a newer database: %v", err)
	}
}

// TestRestoreForce replaces the database, its stale -wal, the files and the
// key, and keeps what a backup does not hold.
func TestRestoreForce(t *testing.T) {
	fx := newFixture(t, 2)
	dst, _ := fx.backup(t, BackupOptions{SecretKeyFile: filepath.Join(fx.dir, SecretKey)})
	other := newFixture(t, 5)
	os.WriteFile(filepath.Join(other.dir, Database+"-wal"), []byte("stale"), 0o600)
	os.WriteFile(filepath.Join(other.dir, "notes.txt"), []byte("mine"), 0o600)
	os.WriteFile(filepath.Join(other.dir, "artifacts", "s0", "extra"), []byte("gone after"), 0o600)
	res, err := Restore(t.Context(), dst, RestoreOptions{DataDir: other.dir, Force: true})
	if err != nil {
		t.Fatal(err)
	}
	if res.KeyID != fx.keys.ID() {
		t.Errorf("key after restore %s, want %s", res.KeyID, fx.keys.ID())
	}
	if _, err := os.Stat(filepath.Join(other.dir, Database+"-wal")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("stale -wal kept: %v", err)
	}
	if _, err := os.Stat(filepath.Join(other.dir, "artifacts", "s0", "extra")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("old artifact kept: %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(other.dir, "notes.txt")); string(b) != "mine" {
		t.Errorf("notes.txt = %q", b)
	}
	info, err := sqlite.Inspect(t.Context(), filepath.Join(other.dir, Database))
	if err != nil || info.Sessions != 2 {
		t.Errorf("restored database: %+v, %v", info, err)
	}
}

// TestAcquire: one holder at a time, named in the error; a released lock
// is taken again.
func TestAcquire(t *testing.T) {
	dir := t.TempDir()
	l, err := Acquire(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Acquire(dir); !errors.Is(err, ErrLocked) {
		t.Fatalf("second Acquire: %v", err)
	}
	if err := l.Release(); err != nil {
		t.Fatal(err)
	}
	l2, err := Acquire(dir)
	if err != nil {
		t.Fatalf("Acquire after Release: %v", err)
	}
	l2.Release()
}

// archiveNames lists an archive's entries in order.
func archiveNames(t *testing.T, src string) []string {
	t.Helper()
	f, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	gz, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(gz)
	var names []string
	for {
		hdr, err := tr.Next()
		if err != nil {
			return names
		}
		names = append(names, hdr.Name)
	}
}

// writeArchive writes a gzip tar of regular files, in sorted name order.
func writeArchive(t *testing.T, files map[string]string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "a.tar.gz")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	gz := gzip.NewWriter(f)
	tw := tar.NewWriter(gz)
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: n, Mode: 0o600, Size: int64(len(files[n]))})
		tw.Write([]byte(files[n]))
	}
	tw.Close()
	gz.Close()
	f.Close()
	return p
}
