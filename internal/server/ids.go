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

// newID returns a fresh identifier such as "ses_…".
func newID(prefix string) string { return prefix + randomString(10) }

// newSecret returns a fresh bearer secret such as "opt_…".
func newSecret(prefix string) string { return prefix + randomString(20) }

// hashSecret is how secrets are stored and looked up.
func hashSecret(secret string) string {
	sum := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(sum[:])
}
