package server

import (
	"context"
	"crypto/tls"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/remote"
	"github.com/outpost-sh/outpost/internal/tlsconfig"
	"github.com/outpost-sh/outpost/internal/tlsconfig/tlstest"
	"github.com/outpost-sh/outpost/internal/waitfor"
)

// TestServerTLS serves the API and the gateway over TLS: a session runs to
// its end with the real remote dialling wss://, and a renewed certificate
// is served to new connections without a restart.
func TestServerTLS(t *testing.T) {
	t.Parallel()
	ca := tlstest.NewCA(t, "outpost test CA")
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	first := ca.Issue(t)
	first.Write(t, certFile, keyFile)
	ts := startServer(t, Options{TLSCertFile: certFile, TLSKeyFile: keyFile, TLSReloadInterval: 50 * time.Millisecond})
	caFile := ca.WriteCA(t, dir, "ca.pem")
	tr, err := tlsconfig.Transport(caFile)
	if err != nil {
		t.Fatal(err)
	}
	ts.client = &http.Client{Transport: tr}

	if !strings.HasPrefix(ts.url, "https://127.0.0.1:") || !strings.HasPrefix(ts.srv.gatewayURL, "wss://127.0.0.1:") {
		t.Fatalf("URL %s, gateway %s: want https:// and wss://", ts.url, ts.srv.gatewayURL)
	}
	ts.mustDo(200, "GET", "/readyz", "", nil, nil)
	var claim api.QueueEntry
	ts.outpost("tls")
	s := ts.session("tls")
	id := s.Metadata.SessionID
	ts.mustDo(200, "POST", "/v1/queue/"+id+"/claim", ts.admin, api.ClaimRequest{AcceptorID: "m1"}, &claim)
	if !strings.HasPrefix(claim.Status.GatewayURL, "wss://") {
		t.Fatalf("claim's gateway URL %q", claim.Status.GatewayURL)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- remote.Serve(ctx, remote.Options{
			GatewayURL: claim.Status.GatewayURL, ConnectToken: claim.Status.ConnectToken, SessionID: id,
			StateDir: t.TempDir(), WorkDir: t.TempDir(), HTTPClient: &http.Client{Transport: tr},
			Logger:       slog.New(slog.NewTextHandler(io.Discard, nil)),
			Capabilities: &api.Capabilities{OS: "test", Tools: api.ToolNames()},
		})
	}()
	if end := waitEnded(t, ts, id); end.Status.Status != api.StatusExit {
		t.Fatalf("the session over TLS ended %s/%s: %s", end.Status.Status, end.Status.StatusDetail, end.Status.Reason)
	}
	if err := <-done; err != nil {
		t.Fatalf("remote: %v", err)
	}

	// Without the CA: refused as an unknown authority.
	plain, _ := tlsconfig.Transport("")
	_, err = (&http.Client{Transport: plain}).Get(ts.url + "/healthz")
	if !tlsconfig.IsUnknownAuthority(err) {
		t.Fatalf("a client without the CA: %v", err)
	}
	// Older than TLS 1.2: refused.
	old := tr.Clone()
	old.TLSClientConfig = &tls.Config{RootCAs: ca.Pool(), MinVersion: tls.VersionTLS10, MaxVersion: tls.VersionTLS11}
	if _, err := (&http.Client{Transport: old}).Get(ts.url + "/healthz"); err == nil {
		t.Fatal("a TLS 1.1 client was served")
	}

	// Renewal: a new pair is served to new connections.
	addr := hostOf(ts.url)
	second := ca.Issue(t)
	second.Write(t, certFile, keyFile)
	waitfor.True(t, "the renewed certificate", func() bool {
		serial, err := tlstest.PeerSerial(addr, ca.Pool())
		return err == nil && serial.Cmp(second.Cert.SerialNumber) == 0
	})
	// (A pair that does not load keeps the current one: see package
	// tlsconfig's tests, with a clock of their own.)
}

func TestServerTLSStartErrors(t *testing.T) {
	t.Parallel()
	ca := tlstest.NewCA(t, "outpost test CA")
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	ca.Issue(t).Write(t, certFile, keyFile)
	otherKey := filepath.Join(dir, "other.key")
	if err := os.WriteFile(otherKey, ca.Issue(t).KeyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	quiet := slog.New(slog.DiscardHandler)
	for _, tc := range []struct {
		name      string
		cert, key string
		want      string
	}{
		{"cert without key", certFile, "", "TLS needs both a certificate file and a key file"},
		{"key without cert", "", keyFile, "TLS needs both a certificate file and a key file"},
		{"missing", filepath.Join(dir, "none.crt"), keyFile, "none.crt cannot be read: no such file or directory"},
		{"mismatch", certFile, otherKey, "does not match the certificate"},
	} {
		_, err := New(context.Background(), Options{DataDir: t.TempDir(), Listen: "127.0.0.1:0", TLSCertFile: tc.cert, TLSKeyFile: tc.key, Logger: quiet, Stdout: io.Discard})
		if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%s: %v, want one line with %q", tc.name, err, tc.want)
		}
	}
}

// TestGatewayURLFollowsPublicURL: an https public URL gives a wss gateway,
// whatever the listener speaks (a TLS proxy may be in front).
func TestGatewayURLFollowsPublicURL(t *testing.T) {
	t.Parallel()
	for pub, want := range map[string]string{
		"https://outpost.example.com":       "wss://outpost.example.com/v1/gateway",
		"https://outpost.example.com/base/": "wss://outpost.example.com/base/v1/gateway",
		"http://127.0.0.1:7420":             "ws://127.0.0.1:7420/v1/gateway",
	} {
		if got, err := gatewayURL(strings.TrimRight(pub, "/")); err != nil || got != want {
			t.Errorf("%s: %q %v, want %q", pub, got, err, want)
		}
	}
	ts := startServer(t, Options{PublicURL: "https://outpost.example.com"})
	if ts.srv.gatewayURL != "wss://outpost.example.com/v1/gateway" {
		t.Fatalf("gateway %s", ts.srv.gatewayURL)
	}
}
