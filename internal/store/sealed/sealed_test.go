package sealed

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"maps"
	"strings"
	"testing"
)

func newKey(t *testing.T) []byte {
	t.Helper()
	k, err := GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func keyring(t *testing.T, current []byte, old ...[]byte) *Keyring {
	t.Helper()
	k, err := NewKeyring(current, old...)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func TestSealOpen(t *testing.T) {
	t.Parallel()
	k := keyring(t, newKey(t))
	secrets := map[string]string{"API_TOKEN": "hunter2-sealed", "B": "x"}
	a, err := k.SealSecrets("ses_1", secrets)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := k.SealSecrets("ses_1", secrets)
	if a == b {
		t.Error("two seals of one value are equal: the nonce is not random")
	}
	if strings.Contains(a, "hunter2") || !strings.HasPrefix(a, "v1:"+k.ID()+":") || !k.Current(a) {
		t.Errorf("sealed = %q", a)
	}
	got, err := k.OpenSecrets("ses_1", a)
	if err != nil || !maps.Equal(got, secrets) {
		t.Fatalf("open = %v, %v", got, err)
	}
	// Bound to the session: another row's id does not open it.
	if _, err := k.OpenSecrets("ses_2", a); !errors.Is(err, ErrDecrypt) {
		t.Errorf("open under another session: %v, want ErrDecrypt", err)
	}
	// Nil secrets stay nil.
	n, _ := k.SealSecrets("ses_1", nil)
	if got, err := k.OpenSecrets("ses_1", n); err != nil || got != nil {
		t.Errorf("nil round trip = %v, %v", got, err)
	}
}

func TestWrongKey(t *testing.T) {
	t.Parallel()
	k1, k2 := keyring(t, newKey(t)), keyring(t, newKey(t))
	text, _ := k1.SealSecrets("s", map[string]string{"A": "1"})
	if _, err := k2.OpenSecrets("s", text); !errors.Is(err, ErrUnknownKey) || !strings.Contains(err.Error(), k1.ID()) {
		t.Errorf("other key: %v, want ErrUnknownKey naming %s", err, k1.ID())
	}
	var nilRing *Keyring
	if _, err := nilRing.OpenSecrets("s", text); !errors.Is(err, ErrUnknownKey) {
		t.Errorf("no keys: %v, want ErrUnknownKey", err)
	}
	// One byte of the ciphertext changed: an error, not garbage.
	raw, _ := base64.RawURLEncoding.DecodeString(strings.TrimPrefix(text, k1.CurrentPrefix()))
	raw[len(raw)-1] ^= 1
	bad := k1.CurrentPrefix() + base64.RawURLEncoding.EncodeToString(raw)
	if _, err := k1.OpenSecrets("s", bad); !errors.Is(err, ErrDecrypt) {
		t.Errorf("altered: %v, want ErrDecrypt", err)
	}
	for _, v := range []string{"v1:" + k1.ID() + ":!!", "v1:" + k1.ID() + ":AAAA", "v1:nokeyid", "v9:" + k1.ID() + ":AAAA"} {
		if _, err := k1.OpenSecrets("s", v); !errors.Is(err, ErrFormat) {
			t.Errorf("%q: %v, want ErrFormat", v, err)
		}
	}
}

func TestRotation(t *testing.T) {
	t.Parallel()
	oldKey, newKey := newKey(t), newKey(t)
	before := keyring(t, oldKey)
	after := keyring(t, newKey, oldKey)
	text, _ := before.SealSecrets("s", map[string]string{"A": "1"})
	if after.Current(text) {
		t.Fatal("a value of the old key counts as current")
	}
	if got, err := after.OpenSecrets("s", text); err != nil || got["A"] != "1" {
		t.Fatalf("open with the old key listed: %v, %v", got, err)
	}
	re, err := after.Reseal("s", text)
	if err != nil || !after.Current(re) {
		t.Fatalf("reseal = %q, %v", re, err)
	}
	if _, err := keyring(t, newKey).OpenSecrets("s", re); err != nil {
		t.Errorf("resealed value needs the old key: %v", err)
	}
	if same, _ := after.Reseal("s", re); same != re {
		t.Error("reseal of a current value changed it")
	}
}

func TestLegacyPlaintext(t *testing.T) {
	t.Parallel()
	k := keyring(t, newKey(t))
	legacy := `{"API_TOKEN":"plain-old"}`
	if Sealed(legacy) || Sealed("null") || !Sealed("v1:x:y") || Sealed("vx:a") {
		t.Error("Sealed misclassifies")
	}
	got, err := k.OpenSecrets("s", legacy)
	if err != nil || got["API_TOKEN"] != "plain-old" {
		t.Fatalf("open plaintext = %v, %v", got, err)
	}
	re, err := k.Reseal("s", legacy)
	if err != nil || strings.Contains(re, "plain-old") || !k.Current(re) {
		t.Fatalf("reseal plaintext = %q, %v", re, err)
	}
	if _, err := k.Reseal("s", "not json"); err == nil {
		t.Error("reseal of a plaintext that is not JSON succeeded")
	}
	var nilRing *Keyring
	if text, _ := nilRing.SealSecrets("s", map[string]string{"A": "1"}); text != `{"A":"1"}` {
		t.Errorf("nil keyring wrote %q", text)
	}
}

func TestParseKey(t *testing.T) {
	t.Parallel()
	k := newKey(t)
	for _, s := range []string{
		base64.StdEncoding.EncodeToString(k), base64.RawStdEncoding.EncodeToString(k),
		base64.URLEncoding.EncodeToString(k), base64.RawURLEncoding.EncodeToString(k),
		hex.EncodeToString(k), " " + EncodeKey(k) + "\n",
	} {
		got, err := ParseKey(s)
		if err != nil || !bytes.Equal(got, k) {
			t.Errorf("ParseKey(%q) = %x, %v", s, got, err)
		}
	}
	for _, s := range []string{"", "short", base64.StdEncoding.EncodeToString(k[:16]), hex.EncodeToString(k)[:63] + "g", "hunter2 is not a key"} {
		_, err := ParseKey(s)
		if err == nil {
			t.Errorf("ParseKey(%q) succeeded", s)
			continue
		}
		if s != "" && strings.Contains(err.Error(), strings.TrimSpace(s)) {
			t.Errorf("error quotes the key: %v", err)
		}
	}
	if _, err := NewKeyring(k[:31]); err == nil {
		t.Error("NewKeyring took a 31-byte key")
	}
	if _, err := NewKeyring(k, k[:3]); err == nil || !strings.Contains(err.Error(), "old key 1") {
		t.Errorf("NewKeyring with a short old key: %v", err)
	}
}
