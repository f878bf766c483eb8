// Package sealed keeps session secrets encrypted at rest. Both stores keep a
// session's secrets as one text column; with a Keyring the text is sealed:
//
//	v1:<key id>:<base64url(nonce ‖ AES-256-GCM ciphertext ‖ tag)>
//
// with a random 96-bit nonce per value and the session's id bound in as
// additional data, so a sealed value copied to another session's row does
// not open. The key id (8 hex digits derived from the key) says which key of
// the keyring opens a value, so a keyring may hold the current key and older
// ones: values sealed under an older key still open, and Reseal moves them
// to the current one. Text without a version prefix is plaintext JSON
// written before secrets were sealed; it still opens.
package sealed

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// KeySize is the length of a key: AES-256.
const KeySize = 32

// version is the prefix of the current format.
const version = "v1"

// Errors of Open; wrap-compatible with errors.Is.
var (
	// ErrUnknownKey: the value was sealed under a key that is not in the
	// keyring (or there is no keyring). The error Open returns is an
	// *UnknownKeyError.
	ErrUnknownKey = errors.New("sealed under a key that is not configured")
	// ErrDecrypt: the key id matches but the value does not open: the key
	// is not the one it was sealed with, or the value was altered.
	ErrDecrypt = errors.New("does not decrypt: the key is wrong or the value was altered")
	// ErrFormat: the value is sealed in a format this build does not know
	// (written by a newer version) or is malformed.
	ErrFormat = errors.New("not in a sealed format this version knows")
)

// UnknownKeyError says which key a value needs; errors.Is(err,
// ErrUnknownKey) holds for it.
type UnknownKeyError struct {
	ID      string // the key the value was sealed under
	Current string // the keyring's current key; "" when there is none
}

func (e *UnknownKeyError) Error() string {
	if e.Current == "" {
		return fmt.Sprintf("sealed under key %s, and no keys are configured", e.ID)
	}
	return fmt.Sprintf("sealed under key %s, which is not configured (the current key is %s)", e.ID, e.Current)
}

// Is makes errors.Is(err, ErrUnknownKey) hold.
func (e *UnknownKeyError) Is(target error) bool { return target == ErrUnknownKey }

// key is one key of a keyring.
type key struct {
	id   string
	aead cipher.AEAD
}

// Keyring seals values under its current key and opens values sealed under
// any of its keys. A nil *Keyring seals nothing: SealSecrets writes
// plaintext JSON and only plaintext opens. A Keyring is safe for concurrent
// use.
type Keyring struct {
	current key
	byID    map[string]cipher.AEAD // every key, the current one included
}

// NewKeyring returns a keyring that seals under current and also opens
// values sealed under old. Every key must be KeySize bytes; a key given
// twice is kept once.
func NewKeyring(current []byte, old ...[]byte) (*Keyring, error) {
	k := &Keyring{byID: map[string]cipher.AEAD{}}
	for i, raw := range append([][]byte{current}, old...) {
		if len(raw) != KeySize {
			what := "the current key"
			if i > 0 {
				what = fmt.Sprintf("old key %d", i)
			}
			return nil, fmt.Errorf("%s is %d bytes; a key is %d bytes", what, len(raw), KeySize)
		}
		id := KeyID(raw)
		if _, dup := k.byID[id]; dup {
			continue
		}
		block, err := aes.NewCipher(raw)
		if err != nil {
			return nil, err
		}
		aead, err := cipher.NewGCM(block)
		if err != nil {
			return nil, err
		}
		k.byID[id] = aead
		if i == 0 {
			k.current = key{id: id, aead: aead}
		}
	}
	return k, nil
}

// KeyID names a key without revealing it: the first 4 bytes of a SHA-256
// over a fixed label and the key, in hex.
func KeyID(k []byte) string {
	h := sha256.New()
	h.Write([]byte("outpost session secrets key id\x00"))
	h.Write(k)
	return hex.EncodeToString(h.Sum(nil)[:4])
}

// ID is the id of the current key; "" for a nil keyring.
func (k *Keyring) ID() string {
	if k == nil {
		return ""
	}
	return k.current.id
}

// Has reports whether the key with id is one of the keyring's keys, the
// current one or an old one.
func (k *Keyring) Has(id string) bool {
	if k == nil {
		return false
	}
	_, ok := k.byID[id]
	return ok
}

// GenerateKey returns a new random key.
func GenerateKey() ([]byte, error) {
	b := make([]byte, KeySize)
	if _, err := rand.Read(b); err != nil {
		return nil, fmt.Errorf("generate a key: %w", err)
	}
	return b, nil
}

// EncodeKey writes a key as standard base64, the form ParseKey reads first.
func EncodeKey(k []byte) string { return base64.StdEncoding.EncodeToString(k) }

// ParseKey reads a key written as 64 hex digits or as base64 (standard or
// URL alphabet, padded or not). Errors never quote the text.
func ParseKey(s string) ([]byte, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, errors.New("the key is empty")
	}
	if len(s) == 2*KeySize {
		if b, err := hex.DecodeString(s); err == nil {
			return b, nil
		}
	}
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		if b, err := enc.DecodeString(s); err == nil {
			if len(b) != KeySize {
				return nil, fmt.Errorf("the key is %d bytes of base64; a key is %d random bytes (openssl rand -base64 32)", len(b), KeySize)
			}
			return b, nil
		}
	}
	return nil, fmt.Errorf("the key (%d characters) is neither 64 hex digits nor base64 of %d bytes; make one with openssl rand -base64 32", len(s), KeySize)
}

// prefix is what starts a value sealed under the key id.
func prefix(id string) string { return version + ":" + id + ":" }

// Sealed reports whether text is in a sealed format (of any version), as
// opposed to legacy plaintext.
func Sealed(text string) bool {
	v, _, ok := strings.Cut(text, ":")
	if !ok || len(v) < 2 || v[0] != 'v' {
		return false
	}
	for _, c := range v[1:] {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// Current reports whether text is sealed under the keyring's current key,
// so Reseal would leave it as it is. For a nil keyring every plaintext is
// current.
func (k *Keyring) Current(text string) bool {
	if k == nil {
		return !Sealed(text)
	}
	return strings.HasPrefix(text, prefix(k.current.id))
}

// CurrentPrefix is how every value sealed under the current key starts;
// stores select values to reseal with it. "" for a nil keyring.
func (k *Keyring) CurrentPrefix() string {
	if k == nil {
		return ""
	}
	return prefix(k.current.id)
}

// seal encrypts plain under the current key, bound to bind.
func (k *Keyring) seal(plain []byte, bind string) (string, error) {
	aead := k.current.aead
	nonce := make([]byte, aead.NonceSize(), aead.NonceSize()+len(plain)+aead.Overhead())
	if _, err := rand.Read(nonce); err != nil {
		return "", fmt.Errorf("seal: %w", err)
	}
	p := prefix(k.current.id)
	out := aead.Seal(nonce, nonce, plain, []byte(p+bind))
	return p + base64.RawURLEncoding.EncodeToString(out), nil
}

// open decrypts a value sealed by seal with the same bind. Plaintext
// (no version prefix) is returned as it is.
func (k *Keyring) open(text, bind string) ([]byte, error) {
	if !Sealed(text) {
		return []byte(text), nil
	}
	v, rest, _ := strings.Cut(text, ":")
	if v != version {
		return nil, fmt.Errorf("format %s: %w", v, ErrFormat)
	}
	id, body, ok := strings.Cut(rest, ":")
	if !ok {
		return nil, fmt.Errorf("no key id: %w", ErrFormat)
	}
	if k == nil {
		return nil, &UnknownKeyError{ID: id}
	}
	aead, ok := k.byID[id]
	if !ok {
		return nil, &UnknownKeyError{ID: id, Current: k.current.id}
	}
	raw, err := base64.RawURLEncoding.DecodeString(body)
	if err != nil || len(raw) < aead.NonceSize()+aead.Overhead() {
		return nil, fmt.Errorf("malformed value: %w", ErrFormat)
	}
	n := aead.NonceSize()
	plain, err := aead.Open(nil, raw[:n], raw[n:], []byte(prefix(id)+bind))
	if err != nil {
		return nil, fmt.Errorf("key %s: %w", id, ErrDecrypt)
	}
	return plain, nil
}

// SealSecrets encodes a session's secrets for its column: sealed under the
// current key, bound to the session's id, or plaintext JSON for a nil
// keyring.
func (k *Keyring) SealSecrets(sessionID string, secrets map[string]string) (string, error) {
	b, err := json.Marshal(secrets)
	if err != nil {
		return "", err
	}
	if k == nil {
		return string(b), nil
	}
	return k.seal(b, sessionID)
}

// OpenSecrets decodes a session's secrets column written by SealSecrets,
// under any key of the keyring, or plaintext JSON.
func (k *Keyring) OpenSecrets(sessionID, text string) (map[string]string, error) {
	plain, err := k.open(text, sessionID)
	if err != nil {
		return nil, err
	}
	var m map[string]string
	if err := json.Unmarshal(plain, &m); err != nil {
		if Sealed(text) {
			return nil, fmt.Errorf("sealed value is not JSON: %w", ErrFormat)
		}
		return nil, fmt.Errorf("plaintext value is not JSON: %w", err)
	}
	return m, nil
}

// Reseal rewrites a session's secrets column under the current key: text
// that is plaintext or sealed under an older key comes back sealed under
// the current one; text already current comes back as it is.
func (k *Keyring) Reseal(sessionID, text string) (string, error) {
	if k.Current(text) {
		return text, nil
	}
	plain, err := k.open(text, sessionID)
	if err != nil {
		return "", err
	}
	if !Sealed(text) && !json.Valid(plain) {
		return "", errors.New("plaintext value is not JSON")
	}
	return k.seal(plain, sessionID)
}

// outpostSecretBind is what a stored secret of an outpost is bound to: its
// outpost's id and its name, after a label no session id can start with, so
// a value copied to another outpost, another name or a session's row does
// not open.
func outpostSecretBind(outpostID, name string) string {
	return "outpost secret\x00" + outpostID + "\x00" + name
}

// SealOutpostSecret encodes one stored secret of an outpost for its column:
// the value as a JSON string, sealed under the current key and bound to the
// outpost's id and the secret's name, or the JSON string itself for a nil
// keyring. Encoding the value as JSON keeps a plaintext value that happens
// to start like a sealed one ("v1:…") from being read as sealed.
func (k *Keyring) SealOutpostSecret(outpostID, name, value string) (string, error) {
	b, err := json.Marshal(value)
	if err != nil {
		return "", err
	}
	if k == nil {
		return string(b), nil
	}
	return k.seal(b, outpostSecretBind(outpostID, name))
}

// OpenOutpostSecret decodes a column written by SealOutpostSecret for the
// same outpost and name, under any key of the keyring.
func (k *Keyring) OpenOutpostSecret(outpostID, name, text string) (string, error) {
	plain, err := k.open(text, outpostSecretBind(outpostID, name))
	if err != nil {
		return "", err
	}
	var v string
	if err := json.Unmarshal(plain, &v); err != nil {
		return "", fmt.Errorf("stored secret is not a JSON string: %w", ErrFormat)
	}
	return v, nil
}

// ResealOutpostSecret rewrites a column written by SealOutpostSecret under
// the current key; text already current comes back as it is.
func (k *Keyring) ResealOutpostSecret(outpostID, name, text string) (string, error) {
	if k.Current(text) {
		return text, nil
	}
	v, err := k.OpenOutpostSecret(outpostID, name, text)
	if err != nil {
		return "", err
	}
	return k.SealOutpostSecret(outpostID, name, v)
}
