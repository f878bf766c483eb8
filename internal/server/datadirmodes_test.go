package server

import (
	"bytes"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/outpost-sh/outpost/internal/datadir"
)

// TestDataDirMadeByHand: a server started on a data dir a person made
// with the usual umask (0755) keeps its database, -wal, -shm, secret key
// and admin token to itself (0600), and warns about the directory.
func TestDataDirMadeByHand(t *testing.T) {
	t.Parallel()
	if runtime.GOOS == "windows" {
		t.Skip("no Unix modes")
	}
	dir := filepath.Join(t.TempDir(), "outpost")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	ts := startServer(t, Options{DataDir: dir, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	ts.outpost("modes") // a write: the -wal and -shm exist
	for _, name := range []string{datadir.Database, datadir.Database + "-wal", datadir.Database + "-shm", datadir.SecretKey, datadir.AdminToken} {
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if fi.Mode().Perm() != 0o600 {
			t.Errorf("%s is mode %04o, want 0600", name, fi.Mode().Perm())
		}
	}
	if !strings.Contains(logs.String(), "chmod 0700 "+dir) {
		t.Errorf("no warning about the 0755 data dir in the log:\n%s", logs.String())
	}
}

// TestPlainHTTPWarning: plain HTTP beyond loopback with an https:// public
// URL is warned about; TLS, loopback or an http:// URL are not.
func TestPlainHTTPWarning(t *testing.T) {
	t.Parallel()
	any4 := &net.TCPAddr{IP: net.IPv4zero, Port: 7420}
	lo := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 7420}
	lo6 := &net.TCPAddr{IP: net.IPv6loopback, Port: 7420}
	for _, c := range []struct {
		tls  bool
		addr net.Addr
		url  string
		warn bool
	}{
		{false, any4, "https://outpost.example.com", true},
		{false, &net.TCPAddr{IP: net.IPv6unspecified, Port: 7420}, "https://outpost.example.com", true},
		{true, any4, "https://outpost.example.com", false},
		{false, lo, "https://outpost.example.com", false},
		{false, lo6, "https://outpost.example.com", false},
		{false, any4, "http://10.0.0.5:7420", false},
	} {
		w := plainHTTPWarning(c.tls, c.addr, c.url)
		if (w != "") != c.warn || c.warn && !strings.Contains(w, "--tls-cert") {
			t.Errorf("tls %v, %v, %s: %q", c.tls, c.addr, c.url, w)
		}
	}
}
