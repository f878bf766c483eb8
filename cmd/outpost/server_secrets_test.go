package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/hex"
	"strings"
	"testing"

	"github.com/outpost-sh/outpost/internal/store/sealed"
)

func TestServerSecretKeys(t *testing.T) {
	t.Parallel()
	k1, _ := sealed.GenerateKey()
	k2, _ := sealed.GenerateKey()
	k3, _ := sealed.GenerateKey()
	parse := func(env map[string]string, args ...string) (*ServerOptions, *testFactory, error) {
		var got *ServerOptions
		tf := newTestFactory(t, env)
		cmd := NewCmdServer(tf.Factory, func(_ context.Context, o *ServerOptions) error { got = o; return nil })
		cmd.SetArgs(args)
		cmd.SetErr(tf.errOut)
		return got, tf, cmd.Execute()
	}
	o, _, err := parse(map[string]string{
		"OUTPOST_SECRET_KEY":      base64.StdEncoding.EncodeToString(k1),
		"OUTPOST_SECRET_KEYS_OLD": hex.EncodeToString(k2) + ", " + base64.RawURLEncoding.EncodeToString(k3),
		"OUTPOST_SECRET_KEY_FILE": "/etc/outpost/key",
	})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(o.SecretKey, k1) || len(o.OldSecretKeys) != 2 || !bytes.Equal(o.OldSecretKeys[0], k2) || !bytes.Equal(o.OldSecretKeys[1], k3) {
		t.Errorf("keys: current %x, old %x", o.SecretKey, o.OldSecretKeys)
	}
	if o.SecretKeyFile != "/etc/outpost/key" {
		t.Errorf("key file %q", o.SecretKeyFile)
	}
	if o, _, _ := parse(map[string]string{"OUTPOST_SECRET_KEY_FILE": "/env"}, "--secret-key-file", "/flag"); o.SecretKeyFile != "/flag" {
		t.Errorf("the flag does not beat the environment: %q", o.SecretKeyFile)
	}
	if o, _, _ := parse(nil); o.SecretKey != nil || o.OldSecretKeys != nil || o.SecretKeyFile != "" {
		t.Errorf("defaults: %+v", o)
	}

	// A bad key: a usage error (exit 2) that names the variable, never the value.
	for _, env := range []map[string]string{
		{"OUTPOST_SECRET_KEY": "hunter2-not-a-key"},
		{"OUTPOST_SECRET_KEY": base64.StdEncoding.EncodeToString(k1[:16])},
		{"OUTPOST_SECRET_KEYS_OLD": hex.EncodeToString(k2) + ",hunter2-not-a-key"},
	} {
		tf := newTestFactory(t, env)
		code := tf.run(t, "server", "--data-dir", t.TempDir(), "--listen", "127.0.0.1:0")
		msg := tf.errOut.String()
		var name string
		for k := range env {
			name = k
		}
		if code != 2 || !strings.Contains(msg, name) || strings.Contains(msg, "hunter2") || strings.Contains(msg, hex.EncodeToString(k2)) {
			t.Errorf("%s: exit %d, stderr %q", name, code, msg)
		}
	}
}
