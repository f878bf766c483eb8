package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/outpost-sh/outpost/api"
)

// TestUpKeepsItsWorkerToken: outpost up reuses the machine token it kept
// for outpost local; a token of another kind found in its file (an admin
// token put there by hand) is neither used for the worker nor revoked.
func TestUpKeepsItsWorkerToken(t *testing.T) {
	t.Parallel()
	ts := startTestServer(t)
	file := filepath.Join(t.TempDir(), "worker-token")

	first, err := upOutpost(t.Context(), ts.c, ts.url, file)
	if err != nil {
		t.Fatal(err)
	}
	again, err := upOutpost(t.Context(), ts.c, ts.url, file)
	if err != nil || again != first {
		t.Fatalf("a second start made another token (%v)", err)
	}

	other := ts.token(t, "", api.ScopeAdmin)
	if err := os.WriteFile(file, []byte(other+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := upOutpost(t.Context(), ts.c, ts.url, file)
	if err != nil {
		t.Fatal(err)
	}
	if got == other {
		t.Error("an admin token found in the file was given to the worker")
	}
	list, err := ts.c.Tokens.List(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for _, tok := range list.Items {
		if tok.RevokedAt != nil && !strings.HasPrefix(tok.Name, "outpost-up") {
			t.Errorf("token %s (%s) was revoked", tok.ID, tok.Name)
		}
	}
	if b, _ := os.ReadFile(file); strings.TrimSpace(string(b)) != got {
		t.Error("the new worker token was not kept in the file")
	}
}
