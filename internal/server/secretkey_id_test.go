package server

import (
	"crypto/rand"
	"io"
	"strings"
	"testing"

	"github.com/outpost-sh/outpost/internal/store/postgres/pgtest"
	"github.com/outpost-sh/outpost/internal/store/sealed"
)

// newKey returns a random secret key.
func newKey(t *testing.T) []byte {
	t.Helper()
	k := make([]byte, sealed.KeySize)
	if _, err := rand.Read(k); err != nil {
		t.Fatal(err)
	}
	return k
}

// TestReplicaWithAnotherKeyRefused starts a replica on a PostgreSQL
// database with one key, then another replica with a key of its own: the
// second refuses to start, naming the key id to set and the setting, and
// the first goes on serving.
func TestReplicaWithAnotherKeyRefused(t *testing.T) {
	t.Parallel()
	pg := pgtest.StartT(t, pgtest.Options{})
	db := pg.Database(t)
	rs := startReplicaSetC(t, db, 1, Options{})
	first := rs[0]
	other := newKey(t)
	_, closeFn, err := openServer(t, Options{DatabaseURL: db, SecretKey: other, ReplicaID: "r1", DataDir: t.TempDir()}, nil)
	if err == nil {
		closeFn()
		t.Fatal("a replica with another secret key started")
	}
	msg := err.Error()
	for _, s := range []string{"this server's key has id " + sealed.KeyID(other), "must have the same secret key",
		"Set OUTPOST_SECRET_KEY (or --secret-key-file) to the key with id ", "OUTPOST_SECRET_KEYS_OLD"} {
		if !strings.Contains(msg, s) {
			t.Errorf("refusal %q does not say %q", msg, s)
		}
	}
	if code := first.do("GET", "/v1/outposts", first.admin, nil, nil); code != 200 {
		t.Errorf("the first replica answers %d after the refusal", code)
	}
}

// TestSecretKeyRecorded: a server restarted on its database with another
// key refuses to start even when no session holds a secret yet; given the
// recorded key as an old key it starts (a rotation) and records the new
// one, after which the old key alone is refused.
func TestSecretKeyRecorded(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	a, b := newKey(t), newKey(t)
	start := func(current []byte, old ...[]byte) error {
		_, closeFn, err := openServer(t, Options{DataDir: dir, SecretKey: current, OldSecretKeys: old}, io.Discard)
		if err == nil {
			closeFn()
		}
		return err
	}
	if err := start(a); err != nil {
		t.Fatalf("first start: %v", err)
	}
	if err := start(b); err == nil || !strings.Contains(err.Error(), "sealed under key id "+sealed.KeyID(a)) {
		t.Fatalf("start with another key: %v, want a refusal naming key id %s", err, sealed.KeyID(a))
	}
	if err := start(a); err != nil {
		t.Fatalf("start with the recorded key after a refusal: %v", err)
	}
	if err := start(b, a); err != nil {
		t.Fatalf("rotation to a new key: %v", err)
	}
	if err := start(a); err == nil || !strings.Contains(err.Error(), "sealed under key id "+sealed.KeyID(b)) {
		t.Fatalf("start with the old key after the rotation: %v, want a refusal naming key id %s", err, sealed.KeyID(b))
	}
}
