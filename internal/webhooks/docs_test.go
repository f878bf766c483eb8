package webhooks_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/server"
	"github.com/outpost-sh/outpost/internal/servertest"
)

// docBlock returns the first fenced block of language lang after the
// heading in docs/api.md.
func docBlock(t *testing.T, heading, lang string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "docs", "api.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(b), "\n"+heading+"\n")
	if !ok {
		t.Fatalf("docs/api.md has no %q", heading)
	}
	_, rest, ok = strings.Cut(rest, "```"+lang+"\n")
	if !ok {
		t.Fatalf("docs/api.md has no %s block after %q", lang, heading)
	}
	block, _, _ := strings.Cut(rest, "```\n")
	return block
}

// TestDocsVerificationSnippets runs the Go program and the shell snippet
// of docs/api.md's "Verifying a delivery" against a delivery a real
// server sent: both say verified, and both refuse the body changed by a
// byte.
func TestDocsVerificationSnippets(t *testing.T) {
	t.Parallel()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command: %v", err)
	}
	if _, err := exec.LookPath("openssl"); err != nil {
		t.Skip("openssl is not installed")
	}
	var mu sync.Mutex
	var sig string
	var body []byte
	done := make(chan struct{})
	rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		defer mu.Unlock()
		if body == nil {
			sig, body = r.Header.Get(api.HeaderWebhookSignature), b
			close(done)
		}
	}))
	defer rcv.Close()
	srv := servertest.Start(t, server.Options{Webhooks: fast()})
	c, ctx := srv.Client, t.Context()
	get(c.Outposts.Create(ctx, api.CreateOutpostRequest{Name: "docs"}))(t)
	h := get(c.Webhooks.Create(ctx, api.CreateWebhookRequest{URL: rcv.URL, Events: []string{api.EventSessionCreated}}))(t)
	session(t, c, "docs")
	select {
	case <-done:
	case <-ctx.Done():
		t.Fatal("no delivery")
	}

	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(docBlock(t, "### Verifying a delivery", "go")), 0o644); err != nil {
		t.Fatal(err)
	}
	shell := docBlock(t, "### Verifying a delivery", "sh")
	run := func(what string, b []byte, wantOK bool) {
		t.Helper()
		mu.Lock()
		err := os.WriteFile(filepath.Join(dir, "body.json"), b, 0o644)
		mu.Unlock()
		if err != nil {
			t.Fatal(err)
		}
		for _, cmd := range []*exec.Cmd{exec.Command(goBin, "run", "main.go"), exec.Command("sh", "-c", shell)} {
			cmd.Dir = dir
			cmd.Env = append(os.Environ(), "SECRET="+h.Secret, "SIGNATURE="+sig, "GOFLAGS=", "GO111MODULE=off")
			out, err := cmd.CombinedOutput()
			ok := err == nil && strings.TrimSpace(string(out)) == "verified"
			if ok != wantOK {
				t.Errorf("%s with %s: %v, %q", cmd.Args[0], what, err, out)
			}
		}
	}
	run("the delivery", body, true)
	tampered := append([]byte(nil), body...)
	tampered[len(tampered)-2] ^= 1
	run("a tampered body", tampered, false)
}
