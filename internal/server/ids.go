package server

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base32"
	"encoding/hex"
	"strings"
)

var idEncoding = base32.StdEncoding.WithPadding(base32.NoPadding)

// randomString returns n random bytes in lower-case base32.
func randomString(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // crypto/rand.Read never fails
	return strings.ToLower(idEncoding.EncodeToString(b))
}

// The shapes of the ids the public fleet API documents, which its clients
// check: sessions "devin-…" and outposts "outpost_env-…". What follows the
// prefix is lower-case base32 (a-z, 2-7), so the ids are URL-safe and the
// Kubernetes object names derived from them stay DNS labels. Ids minted
// before these shapes ("ses_…", "outpost_…") stay valid: nothing reads an
// id's prefix.
const (
	sessionIDPrefix = "devin-"
	outpostIDPrefix = "outpost_env-"
)

// newID returns a fresh identifier: prefix and 80 random bits.
func newID(prefix string) string { return prefix + randomString(10) }

// newSessionID returns a fresh session id, "devin-…".
func newSessionID() string { return newID(sessionIDPrefix) }

// newOutpostID returns a fresh outpost id, "outpost_env-…".
func newOutpostID() string { return newID(outpostIDPrefix) }

// newSecret returns a fresh bearer secret such as "opt_…".
func newSecret(prefix string) string { return prefix + randomString(20) }

// hashSecret is how secrets are stored and looked up.
func hashSecret(secret string) string {
	sum := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(sum[:])
}
