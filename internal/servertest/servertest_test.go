package servertest

import (
	"net/http"
	"os"
	"testing"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/server"
)

// TestStart: a started server answers on loopback, its client holds the
// admin token, and a DataDir given is the one used.
func TestStart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := Start(t, server.Options{DataDir: dir, AdminToken: "opt_servertest-admin-token"})
	if s.AdminToken() != "opt_servertest-admin-token" {
		t.Errorf("admin token %q", s.AdminToken())
	}
	resp, err := http.Get(s.URL() + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("readyz: %d", resp.StatusCode)
	}
	if _, err := s.Client.Outposts.Create(t.Context(), api.CreateOutpostRequest{Name: "dev", Platform: api.PlatformLinux}); err != nil {
		t.Fatalf("create outpost as admin: %v", err)
	}
	if ents, err := os.ReadDir(dir); err != nil || len(ents) == 0 {
		t.Errorf("the data dir given holds nothing: %v", err)
	}
}

// TestServeStop: a server from Serve answers until stop, which returns
// serving's nil error, twice; after stop nothing answers. Serve refuses
// an empty DataDir.
func TestServeStop(t *testing.T) {
	t.Parallel()
	if _, _, err := Serve(server.Options{}); err == nil {
		t.Error("Serve without a DataDir: no error")
	}
	srv, stop, err := Serve(server.Options{DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get(srv.URL() + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if err := stop(); err != nil {
		t.Errorf("stop: %v", err)
	}
	if err := stop(); err != nil {
		t.Errorf("second stop: %v", err)
	}
	if resp, err := http.Get(srv.URL() + "/healthz"); err == nil {
		resp.Body.Close()
		t.Error("the server answers after stop")
	}
}
