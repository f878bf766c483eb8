package storetest

import (
	"encoding/base64"
	"errors"
	"strings"
	"testing"

	"github.com/outpost-sh/outpost/internal/store"
	"github.com/outpost-sh/outpost/internal/store/sealed"
)

// SealedDB is one database that the sealing suite opens several times, with
// different keys (a server restarting with a new configuration), and whose
// secrets column it reads and writes behind the store's back.
type SealedDB interface {
	// Open opens the database with keys; nil keys mean none.
	Open(t *testing.T, keys *sealed.Keyring) (store.Store, error)
	// RawSecrets returns a session's secrets column as stored.
	RawSecrets(t *testing.T, sessionID string) string
	// SetRawSecrets overwrites a session's secrets column.
	SetRawSecrets(t *testing.T, sessionID, text string)
	// RawOutpostSecret returns the value column of an outpost's stored
	// secret as stored; SetRawOutpostSecret overwrites it.
	RawOutpostSecret(t *testing.T, outpostID, name string) string
	SetRawOutpostSecret(t *testing.T, outpostID, name, text string)
}

// RunSealed runs the suite of secrets sealed at rest. newDB must return a
// new, empty database each time it is called.
func RunSealed(t *testing.T, newDB func(t *testing.T) SealedDB) {
	tests := []struct {
		name string
		fn   func(t *testing.T, db SealedDB)
	}{
		{"AtRest", testSealedAtRest},
		{"WrongKey", testSealedWrongKey},
		{"Rotation", testSealedRotation},
		{"LegacyPlaintext", testSealedLegacyPlaintext},
		{"OutpostSecrets", testSealedOutpostSecrets},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t, newDB(t))
		})
	}
}

// secretValue is the value the suite looks for in the raw column.
const secretValue = "hunter2-at-rest-value"

// newKeyring returns a keyring of current and old, failing t on error.
func newKeyring(t *testing.T, current []byte, old ...[]byte) *sealed.Keyring {
	t.Helper()
	k, err := sealed.NewKeyring(current, old...)
	must(t, "keyring", err)
	return k
}

// newKey returns a random key.
func newKey(t *testing.T) []byte {
	t.Helper()
	k, err := sealed.GenerateKey()
	must(t, "key", err)
	return k
}

// openSealed opens db with keys, failing t on error; the store is closed
// when t ends unless closed before through the returned func.
func openSealed(t *testing.T, db SealedDB, keys *sealed.Keyring) (store.Store, func()) {
	t.Helper()
	s, err := db.Open(t, keys)
	must(t, "open", err)
	closed := false
	closeFn := func() {
		if !closed {
			closed = true
			must(t, "close", s.Close())
		}
	}
	t.Cleanup(closeFn)
	return s, closeFn
}

// secretSession is a session with one secret.
func secretSession(id, value string) store.Session {
	sess := newSession(id, "op", "sealed", 0)
	sess.Secrets = map[string]string{"API_TOKEN": value}
	sess.Spec.SecretNames = []string{"API_TOKEN"}
	return sess
}

// wantSecret fails t unless the session reads back with its secret.
func wantSecret(t *testing.T, s store.Store, id, value string) {
	t.Helper()
	got, err := s.GetSession(ctx(t), id)
	must(t, "get "+id, err)
	if got.Secrets["API_TOKEN"] != value {
		t.Errorf("session %s secrets = %v, want API_TOKEN=%s", id, got.Secrets, value)
	}
}

// wantSealed fails t unless the raw column of id is sealed under keys'
// current key and does not hold the value.
func wantSealed(t *testing.T, db SealedDB, keys *sealed.Keyring, id, value string) {
	t.Helper()
	raw := db.RawSecrets(t, id)
	if strings.Contains(raw, value) || strings.Contains(raw, "API_TOKEN") {
		t.Errorf("the raw secrets column of %s shows the secret: %q", id, raw)
	}
	if !keys.Current(raw) {
		t.Errorf("the raw secrets column of %s is not sealed under key %s: %.20q…", id, keys.ID(), raw)
	}
}

func testSealedAtRest(t *testing.T, db SealedDB) {
	keys := newKeyring(t, newKey(t))
	s, closeS := openSealed(t, db, keys)
	sess := secretSession("s1", secretValue)
	must(t, "create", s.CreateSession(ctx(t), sess, newEntry(sess), nil))
	wantSealed(t, db, keys, "s1", secretValue)
	got, err := s.GetSession(ctx(t), "s1")
	must(t, "get", err)
	equal(t, "session", got, sess)
	list, _, err := s.ListSessions(ctx(t), store.SessionFilter{})
	must(t, "list", err)
	if len(list) != 1 || list[0].Secrets["API_TOKEN"] != secretValue {
		t.Errorf("listed secrets = %+v", list)
	}
	// A write of the session's state leaves the sealed column as it is.
	raw := db.RawSecrets(t, "s1")
	_, err = s.UpdateSession(ctx(t), "s1", func(cur store.Session, e store.QueueEntry) (store.Mutation, error) {
		cur.Reason = "updated"
		return store.Mutation{Session: &cur}, nil
	})
	must(t, "update", err)
	if db.RawSecrets(t, "s1") != raw {
		t.Error("UpdateSession rewrote the sealed secrets")
	}
	closeS()

	// A restart with the same key reads it and changes nothing.
	s, _ = openSealed(t, db, keys)
	wantSecret(t, s, "s1", secretValue)
	if db.RawSecrets(t, "s1") != raw {
		t.Error("reopening with the same key resealed the secrets")
	}
}

func testSealedWrongKey(t *testing.T, db SealedDB) {
	k1 := newKeyring(t, newKey(t))
	s, closeS := openSealed(t, db, k1)
	sess := secretSession("s1", secretValue)
	must(t, "create", s.CreateSession(ctx(t), sess, newEntry(sess), nil))
	closeS()

	// Another key: Open refuses, naming the key the secrets need.
	k2 := newKeyring(t, newKey(t))
	if s, err := db.Open(t, k2); err == nil {
		s.Close()
		t.Fatal("Open with another key succeeded")
	} else if !errors.Is(err, sealed.ErrUnknownKey) || !strings.Contains(err.Error(), k1.ID()) {
		t.Errorf("Open with another key: %v; want ErrUnknownKey naming key %s", err, k1.ID())
	}
	// The refused Open changed nothing: the right key still reads it.
	s, closeS = openSealed(t, db, k1)
	wantSecret(t, s, "s1", secretValue)
	closeS()

	// No keys at all: the store opens, the sealed secrets do not.
	s, closeS = openSealed(t, db, nil)
	_, err := s.GetSession(ctx(t), "s1")
	wantErr(t, "get without keys", err, sealed.ErrUnknownKey)
	closeS()

	// An altered value is an error, never garbage.
	s, _ = openSealed(t, db, k1)
	raw := db.RawSecrets(t, "s1")
	body, err := base64.RawURLEncoding.DecodeString(strings.TrimPrefix(raw, k1.CurrentPrefix()))
	must(t, "decode raw", err)
	body[len(body)/2] ^= 0x40
	db.SetRawSecrets(t, "s1", k1.CurrentPrefix()+base64.RawURLEncoding.EncodeToString(body))
	_, err = s.GetSession(ctx(t), "s1")
	wantErr(t, "get altered", err, sealed.ErrDecrypt)
	_, _, err = s.ListSessions(ctx(t), store.SessionFilter{})
	wantErr(t, "list altered", err, sealed.ErrDecrypt)
}

func testSealedRotation(t *testing.T, db SealedDB) {
	oldKey, newKeyBytes := newKey(t), newKey(t)
	before := newKeyring(t, oldKey)
	s, closeS := openSealed(t, db, before)
	for _, id := range []string{"s1", "s2"} {
		sess := secretSession(id, secretValue+"-"+id)
		must(t, "create", s.CreateSession(ctx(t), sess, newEntry(sess), nil))
	}
	closeS()

	// The new key current, the old one listed: the rows open and are
	// resealed under the new key at Open.
	during := newKeyring(t, newKeyBytes, oldKey)
	s, closeS = openSealed(t, db, during)
	for _, id := range []string{"s1", "s2"} {
		wantSecret(t, s, id, secretValue+"-"+id)
		wantSealed(t, db, during, id, secretValue+"-"+id)
	}
	sess := secretSession("s3", secretValue+"-s3")
	must(t, "create", s.CreateSession(ctx(t), sess, newEntry(sess), nil))
	wantSealed(t, db, during, "s3", secretValue+"-s3")
	closeS()

	// The old key dropped: everything still opens.
	after := newKeyring(t, newKeyBytes)
	s, closeS = openSealed(t, db, after)
	for _, id := range []string{"s1", "s2", "s3"} {
		wantSecret(t, s, id, secretValue+"-"+id)
	}
	closeS()

	// And the old key alone no longer does.
	if s, err := db.Open(t, before); err == nil {
		s.Close()
		t.Error("Open with only the retired key succeeded")
	} else {
		wantErr(t, "open with the retired key", err, sealed.ErrUnknownKey)
	}
}

func testSealedLegacyPlaintext(t *testing.T, db SealedDB) {
	// A database written before secrets were sealed.
	s, closeS := openSealed(t, db, nil)
	sess := secretSession("s1", secretValue)
	must(t, "create", s.CreateSession(ctx(t), sess, newEntry(sess), nil))
	if raw := db.RawSecrets(t, "s1"); raw != `{"API_TOKEN":"`+secretValue+`"}` {
		t.Fatalf("without keys the column is %q, want plaintext JSON", raw)
	}
	closeS()

	// The first start with a key seals it.
	keys := newKeyring(t, newKey(t))
	s, _ = openSealed(t, db, keys)
	wantSecret(t, s, "s1", secretValue)
	wantSealed(t, db, keys, "s1", secretValue)

	// A plaintext row still reads while the store is open.
	legacy := secretSession("s2", "x")
	must(t, "create", s.CreateSession(ctx(t), legacy, newEntry(legacy), nil))
	db.SetRawSecrets(t, "s2", `{"API_TOKEN":"plain-old"}`)
	wantSecret(t, s, "s2", "plain-old")
}
