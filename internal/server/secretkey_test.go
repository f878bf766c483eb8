package server

import (
	"bytes"
	"database/sql"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/store"
	"github.com/outpost-sh/outpost/internal/store/sealed"
)

// openServer runs New on a data dir without serving, as one start of the
// server; the returned func stops it. Its log goes to logs when not nil.
func openServer(t *testing.T, opts Options, logs io.Writer) (*Server, func(), error) {
	t.Helper()
	opts.Listen = "127.0.0.1:0"
	opts.Stdout = io.Discard
	if logs == nil {
		logs = io.Discard
	}
	opts.Logger = slog.New(slog.NewTextHandler(logs, nil))
	srv, err := New(t.Context(), opts)
	if err != nil {
		return nil, nil, err
	}
	return srv, func() { srv.listener.Close(); srv.store.Close(); srv.dirLock.Release() }, nil
}

// plantSession stores a session with one secret through the server's store.
func plantSession(t *testing.T, srv *Server, id, value string) {
	t.Helper()
	now := time.Now()
	sess := store.Session{ID: id, OutpostID: "op", Status: api.StatusNew, CreatedAt: now, UpdatedAt: now,
		Spec: api.SessionSpec{Outpost: "op", Agent: api.Agent{Kind: api.AgentScript}}, Secrets: map[string]string{"API_TOKEN": value}}
	if err := srv.store.CreateSession(t.Context(), sess, nil, nil); err != nil {
		t.Fatal(err)
	}
}

// secretOf reads a session's secret back through the server's store.
func secretOf(t *testing.T, srv *Server, id string) string {
	t.Helper()
	sess, err := srv.store.GetSession(t.Context(), id)
	if err != nil {
		t.Fatalf("get session %s: %v", id, err)
	}
	return sess.Secrets["API_TOKEN"]
}

// rawSecrets reads the secrets column of the data dir's SQLite database.
func rawSecrets(t *testing.T, dir, id string) string {
	t.Helper()
	db, err := sql.Open("sqlite", filepath.Join(dir, "outpost.db")+"?_busy_timeout=10000")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var v string
	if err := db.QueryRowContext(t.Context(), `SELECT secrets_json FROM sessions WHERE id = ?`, id).Scan(&v); err != nil {
		t.Fatal(err)
	}
	return v
}

// TestSecretKeyFile: the first start creates <data-dir>/secret-key (0600,
// one base64 key), seals secrets with it and never logs it; the next
// start reads the same file and opens them.
func TestSecretKeyFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	var logs bytes.Buffer
	srv, stop, err := openServer(t, Options{DataDir: dir}, &logs)
	if err != nil {
		t.Fatal(err)
	}
	plantSession(t, srv, "s1", "hunter2-file-key")
	stop()
	path := filepath.Join(dir, SecretKeyFileName)
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file: %v, %v; want mode 0600", fi, err)
	}
	text, _ := os.ReadFile(path)
	key, err := sealed.ParseKey(string(text))
	if err != nil {
		t.Fatalf("key file: %v", err)
	}
	if strings.Contains(logs.String(), strings.TrimSpace(string(text))) || !strings.Contains(logs.String(), sealed.KeyID(key)) {
		t.Errorf("start log shows the key, or not its id:\n%s", logs.String())
	}
	if raw := rawSecrets(t, dir, "s1"); strings.Contains(raw, "hunter2") || !strings.HasPrefix(raw, "v1:"+sealed.KeyID(key)+":") {
		t.Errorf("secrets column %q", raw)
	}

	srv, stop, err = openServer(t, Options{DataDir: dir}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	if got := secretOf(t, srv, "s1"); got != "hunter2-file-key" {
		t.Errorf("after a restart the secret is %q", got)
	}
	if again, _ := os.ReadFile(path); !bytes.Equal(again, text) {
		t.Error("the restart changed the key file")
	}
}

// TestSecretKeyRotation goes through the documented rotation: the file's
// key, then an explicit key with the file still there, then the explicit
// key with the file gone and the old key listed, then the new key alone.
// A start with a key that opens nothing is refused with what to do.
func TestSecretKeyRotation(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	srv, stop, err := openServer(t, Options{DataDir: dir}, nil)
	if err != nil {
		t.Fatal(err)
	}
	plantSession(t, srv, "s1", "hunter2-rotated")
	stop()
	fileKey, err := os.ReadFile(filepath.Join(dir, SecretKeyFileName))
	if err != nil {
		t.Fatal(err)
	}
	oldKey, _ := sealed.ParseKey(string(fileKey))
	newKey, _ := sealed.GenerateKey()

	// An explicit key while the key file exists: the file's key opens the
	// old rows, which are sealed anew under the explicit key at start.
	var logs bytes.Buffer
	srv, stop, err = openServer(t, Options{DataDir: dir, SecretKey: newKey}, &logs)
	if err != nil {
		t.Fatal(err)
	}
	if got := secretOf(t, srv, "s1"); got != "hunter2-rotated" {
		t.Errorf("secret = %q", got)
	}
	stop()
	if !strings.HasPrefix(rawSecrets(t, dir, "s1"), "v1:"+sealed.KeyID(newKey)+":") || !strings.Contains(logs.String(), "resealed_sessions=1") {
		t.Errorf("not resealed under the new key: %q\n%s", rawSecrets(t, dir, "s1"), logs.String())
	}

	// Rows of an old key open when it is listed.
	plantDir := t.TempDir()
	srv, stop, err = openServer(t, Options{DataDir: plantDir, SecretKey: oldKey}, nil)
	if err != nil {
		t.Fatal(err)
	}
	plantSession(t, srv, "s2", "hunter2-listed")
	stop()
	srv, stop, err = openServer(t, Options{DataDir: plantDir, SecretKey: newKey, OldSecretKeys: [][]byte{oldKey}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := secretOf(t, srv, "s2"); got != "hunter2-listed" {
		t.Errorf("secret under the listed old key = %q", got)
	}
	stop()
	srv, stop, err = openServer(t, Options{DataDir: plantDir, SecretKey: newKey}, nil)
	if err != nil {
		t.Fatalf("the new key alone after the rotation: %v", err)
	}
	if got := secretOf(t, srv, "s2"); got != "hunter2-listed" {
		t.Errorf("secret = %q", got)
	}
	stop()

	// The retired key alone opens nothing: a clear refusal.
	_, _, err = openServer(t, Options{DataDir: plantDir, SecretKey: oldKey}, nil)
	if err == nil || !strings.Contains(err.Error(), "OUTPOST_SECRET_KEYS_OLD") || !strings.Contains(err.Error(), sealed.KeyID(newKey)) {
		t.Fatalf("start with the retired key: %v", err)
	}
}

// TestSecretKeyBadFile: a key file that holds no key, or a named file that
// does not exist, stops the start with a sentence naming the file.
func TestSecretKeyBadFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, SecretKeyFileName)
	if err := os.WriteFile(path, []byte("hunter2-not-a-key\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, _, err := openServer(t, Options{DataDir: dir}, nil)
	if err == nil || !strings.Contains(err.Error(), path) || strings.Contains(err.Error(), "hunter2") {
		t.Errorf("bad key file: %v", err)
	}
	missing := filepath.Join(t.TempDir(), "no-such-key")
	_, _, err = openServer(t, Options{DataDir: t.TempDir(), SecretKeyFile: missing}, nil)
	if err == nil || !strings.Contains(err.Error(), missing) {
		t.Errorf("missing named key file: %v", err)
	}
	if _, err := os.Stat(missing); err == nil {
		t.Error("a named key file was created")
	}
	_, _, err = openServer(t, Options{DataDir: t.TempDir(), SecretKey: []byte("short")}, nil)
	if err == nil || !strings.Contains(err.Error(), "32 bytes") {
		t.Errorf("short key: %v", err)
	}
}
