package server

import (
	"database/sql"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestNewerDatabaseRefused: a server refuses a database a newer version
// migrated (a downgrade), with the sentence docs/production.md quotes.
func TestNewerDatabaseRefused(t *testing.T) {
	t.Parallel()
	const said = "that this build does not know: it was written by a newer version of outpost"
	doc, err := os.ReadFile("../../docs/production.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(doc), said) {
		t.Errorf("docs/production.md does not quote %q", said)
	}
	dir := t.TempDir()
	_, stop, err := openServer(t, Options{DataDir: dir}, nil)
	if err != nil {
		t.Fatal(err)
	}
	stop()
	db, err := sql.Open("sqlite", filepath.Join(dir, "outpost.db"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`INSERT INTO schema_migrations (version, name, applied_at) VALUES (9999, '9999_from_the_future', 0)`); err != nil {
		t.Fatal(err)
	}
	db.Close()
	_, _, err = openServer(t, Options{DataDir: dir}, nil)
	if err == nil || !strings.Contains(err.Error(), said) || !strings.Contains(err.Error(), "9999_from_the_future") {
		t.Fatalf("start on a newer database: %v", err)
	}
}
