package server

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/outpost-sh/outpost/api"
)

// testServer is a real server on loopback.
type testServer struct {
	t     *testing.T
	srv   *Server
	url   string
	admin string
	// client sends do's requests; nil means http.DefaultClient.
	client *http.Client
}

func startServer(t *testing.T, opts Options) *testServer {
	t.Helper()
	if opts.DataDir == "" {
		opts.DataDir = t.TempDir()
	}
	opts.Listen = "127.0.0.1:0"
	if opts.Stdout == nil {
		opts.Stdout = io.Discard
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	ctx, cancel := context.WithCancel(context.Background())
	srv, err := New(ctx, opts)
	if err != nil {
		t.Fatalf("new server: %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	return &testServer{t: t, srv: srv, url: srv.URL(), admin: srv.AdminToken()}
}

// do sends a request and decodes a JSON answer into out (when non-nil).
func (ts *testServer) do(method, path, token string, body any, out any) int {
	ts.t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	case []byte:
		rd = bytes.NewReader(b)
	default:
		raw, err := json.Marshal(b)
		if err != nil {
			ts.t.Fatal(err)
		}
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequest(method, ts.url+path, rd)
	if err != nil {
		ts.t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	hc := ts.client
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		ts.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode >= 400 {
		var e api.ErrorResponse
		if err := json.Unmarshal(raw, &e); err != nil || e.Error.Code == "" || e.Error.Message == "" || e.Detail != e.Error.Message {
			ts.t.Errorf("%s %s: status %d without a JSON error envelope whose detail repeats its message: %s", method, path, resp.StatusCode, raw)
		}
	}
	if out != nil && resp.StatusCode < 300 && len(raw) > 0 {
		if err := json.Unmarshal(raw, out); err != nil {
			ts.t.Fatalf("%s %s: decode %s: %v", method, path, raw, err)
		}
	}
	return resp.StatusCode
}

// mustDo is do that fails the test on an unexpected status.
func (ts *testServer) mustDo(want int, method, path, token string, body, out any) {
	ts.t.Helper()
	if got := ts.do(method, path, token, body, out); got != want {
		ts.t.Fatalf("%s %s: status %d, want %d", method, path, got, want)
	}
}

func (ts *testServer) token(scopes []string, outpost string) string {
	ts.t.Helper()
	var resp api.CreateTokenResponse
	ts.mustDo(201, "POST", "/v1/tokens", ts.admin, api.CreateTokenRequest{Name: "t", Scopes: scopes, Outpost: outpost}, &resp)
	return resp.Secret
}

func (ts *testServer) outpost(name string) api.Outpost {
	ts.t.Helper()
	var o api.Outpost
	ts.mustDo(201, "POST", "/v1/outposts", ts.admin, api.CreateOutpostRequest{Name: name, Platform: "linux"}, &o)
	return o
}

func (ts *testServer) session(outpost string) api.Session {
	ts.t.Helper()
	var s api.Session
	ts.mustDo(201, "POST", "/v1/sessions", ts.admin, map[string]any{
		"outpost": outpost, "title": "t",
		"agent": map[string]any{"kind": "script", "steps": []any{map[string]any{"tool": "exec", "args": map[string]any{"command": "true"}}}},
	}, &s)
	return s
}

func TestHealthAndReady(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Options{})
	ts.mustDo(200, "GET", "/healthz", "", nil, nil)
	ts.mustDo(200, "GET", "/readyz", "", nil, nil)
	ts.mustDo(200, "GET", "/metrics", "", nil, nil)
}

func TestAdminTokenFromOption(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ts := startServer(t, Options{DataDir: dir, AdminToken: "opt_fixed-admin-token-for-test"})
	if ts.admin != "opt_fixed-admin-token-for-test" {
		t.Fatalf("admin token %q", ts.admin)
	}
	ts.mustDo(200, "GET", "/v1/tokens", ts.admin, nil, nil)
	ts.mustDo(401, "GET", "/v1/tokens", "opt_wrong", nil, nil)
}

func jsonString(v any) (string, error) {
	b, err := json.Marshal(v)
	return string(b), err
}

func TestAdminTokenCreatedOnceAndSaved(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	var first bytes.Buffer
	ctx := context.Background()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	srv, err := New(ctx, Options{DataDir: dir, Listen: "127.0.0.1:0", Stdout: &first, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	token := srv.AdminToken()
	if token == "" || !strings.Contains(first.String(), token) {
		t.Fatalf("first start did not print the admin token: %q", first.String())
	}
	srv.listener.Close()
	srv.store.Close()
	srv.dirLock.Release()
	fi, err := os.Stat(filepath.Join(dir, "admin-token"))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("admin-token file: %v %v", fi, err)
	}
	saved, _ := os.ReadFile(filepath.Join(dir, "admin-token"))
	if strings.TrimSpace(string(saved)) != token {
		t.Fatalf("admin-token file holds %q", saved)
	}
	var second bytes.Buffer
	ts := startServer(t, Options{DataDir: dir, Stdout: &second})
	if ts.admin != "" || second.Len() != 0 {
		t.Fatalf("second start made or printed a token: %q %q", ts.admin, second.String())
	}
	ts.mustDo(200, "GET", "/v1/tokens", token, nil, nil)
}

// TestDataDirLocked: a second server on a data dir in use is refused,
// naming the process that holds it; once the first stops, a server starts
// there again.
func TestDataDirLocked(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	ctx, cancel := context.WithCancel(t.Context())
	first, err := New(ctx, Options{DataDir: dir, Listen: "127.0.0.1:0", Stdout: io.Discard, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- first.Serve(ctx) }()
	_, err = New(t.Context(), Options{DataDir: dir, Listen: "127.0.0.1:0", Stdout: io.Discard, Logger: quiet})
	if err == nil || !strings.Contains(err.Error(), "in use by another outpost process") || !strings.Contains(err.Error(), "--data-dir") {
		t.Fatalf("second server on one data dir: %v", err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	startServer(t, Options{DataDir: dir})
}
