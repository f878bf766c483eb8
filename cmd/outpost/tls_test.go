package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/outpost-sh/outpost/internal/server"
	"github.com/outpost-sh/outpost/internal/servertest"
	"github.com/outpost-sh/outpost/internal/tlsconfig/tlstest"
)

func TestServerEdgeFlags(t *testing.T) {
	t.Parallel()
	parse := func(env map[string]string, args ...string) *ServerOptions {
		t.Helper()
		var got *ServerOptions
		cmd := NewCmdServer(newTestFactory(t, env).Factory, func(_ context.Context, o *ServerOptions) error { got = o; return nil })
		cmd.SetArgs(args)
		if err := cmd.Execute(); err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		return got
	}
	o := parse(nil)
	if o.TLSCertFile != "" || o.IdleTimeout != server.DefaultIdleTimeout || o.ReadHeaderTimeout != server.DefaultReadHeaderTimeout ||
		o.MaxHeaderBytes != server.DefaultMaxHeaderBytes || o.MaxUnauthenticatedConns != server.DefaultMaxUnauthenticatedConns ||
		o.MaxStreamsPerToken != server.DefaultMaxStreamsPerToken || o.MetricsListen != "" || o.MetricsTokenRequired {
		t.Errorf("defaults: %+v", o)
	}
	o = parse(map[string]string{"OUTPOST_TLS_CERT": "/env/c.pem", "OUTPOST_TLS_KEY": "/env/k.pem"})
	if o.TLSCertFile != "/env/c.pem" || o.TLSKeyFile != "/env/k.pem" {
		t.Errorf("TLS from the environment: %q %q", o.TLSCertFile, o.TLSKeyFile)
	}
	o = parse(map[string]string{"OUTPOST_TLS_CERT": "/env/c.pem", "OUTPOST_TLS_KEY": "/env/k.pem"}, "--tls-cert", "/flag/c.pem", "--tls-key", "/flag/k.pem",
		"--max-streams-per-token", "0", "--metrics-listen", "127.0.0.1:9420", "--metrics-token-required", "--idle-timeout", "30s")
	if o.TLSCertFile != "/flag/c.pem" || o.TLSKeyFile != "/flag/k.pem" || o.MetricsListen != "127.0.0.1:9420" || !o.MetricsTokenRequired ||
		o.IdleTimeout != 30*time.Second || o.serverOptions().MaxStreamsPerToken != -1 || o.serverOptions().MaxUnauthenticatedConns != server.DefaultMaxUnauthenticatedConns {
		t.Errorf("flags: %+v", o)
	}

	for _, tc := range []struct {
		name string
		env  map[string]string
		args []string
		want string
	}{
		{name: "cert without key", args: []string{"--tls-cert", "/c.pem"}, want: "--tls-cert and --tls-key go together"},
		{name: "key from env without cert", env: map[string]string{"OUTPOST_TLS_KEY": "/k.pem"}, want: "--tls-cert and --tls-key go together"},
		{name: "negative bound", args: []string{"--max-unauthenticated-conns", "-1"}, want: "must not be negative"},
		{name: "zero idle timeout", args: []string{"--idle-timeout", "0"}, want: "must be positive"},
		{name: "tiny headers", args: []string{"--max-header-bytes", "100"}, want: "at least 4096"},
	} {
		tf := newTestFactory(t, tc.env)
		args := append([]string{"server", "--data-dir", t.TempDir(), "--listen", "127.0.0.1:0"}, tc.args...)
		if code := tf.run(t, args...); code != 2 || !strings.Contains(tf.errOut.String(), tc.want) {
			t.Errorf("%s: exit %d, stderr %q; want 2 and %q", tc.name, code, tf.errOut, tc.want)
		}
	}
}

// TestServerTLSFilesAtStart: a pair that does not load stops the server
// with one line naming the file.
func TestServerTLSFilesAtStart(t *testing.T) {
	t.Parallel()
	ca := tlstest.NewCA(t, "cli test CA")
	dir := t.TempDir()
	cert, key := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	ca.Issue(t).Write(t, cert, key)
	other := filepath.Join(dir, "other.key")
	if err := os.WriteFile(other, ca.Issue(t).KeyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ cert, key, want string }{
		{filepath.Join(dir, "missing.crt"), key, "TLS certificate file " + filepath.Join(dir, "missing.crt") + " cannot be read: no such file or directory"},
		{cert, other, "TLS key file " + other + " does not match the certificate in " + cert},
	} {
		tf := newTestFactory(t, nil)
		code := tf.run(t, "server", "--data-dir", t.TempDir(), "--listen", "127.0.0.1:0", "--tls-cert", tc.cert, "--tls-key", tc.key)
		if lines := strings.Split(strings.TrimSpace(tf.errOut.String()), "\n"); code != 3 || len(lines) != 1 || !strings.Contains(lines[0], tc.want) {
			t.Errorf("exit %d, stderr %q; want 3 and one line with %q", code, tf.errOut, tc.want)
		}
	}
}

// TestCAFile runs CLI commands against a TLS server signed by a private CA:
// refused with a hint without the CA, served with --ca-file or
// OUTPOST_CA_FILE.
func TestCAFile(t *testing.T) {
	t.Parallel()
	ca := tlstest.NewCA(t, "cli test CA")
	dir := t.TempDir()
	cert, key := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	ca.Issue(t).Write(t, cert, key)
	caFile := ca.WriteCA(t, dir, "ca.pem")
	srv := servertest.Start(t, server.Options{TLSCertFile: cert, TLSKeyFile: key, AdminToken: "opt_cli-tls-admin-token"})
	env := map[string]string{"OUTPOST_SERVER": srv.URL(), "OUTPOST_TOKEN": "opt_cli-tls-admin-token"}

	tf := newTestFactory(t, env)
	if code := tf.run(t, "outposts", "list"); code != 3 {
		t.Fatalf("without the CA: exit %d, want 3", code)
	}
	for _, want := range []string{"x509: certificate signed by unknown authority", "pass --ca-file or set OUTPOST_CA_FILE", srv.URL()} {
		if !strings.Contains(tf.errOut.String(), want) {
			t.Errorf("without the CA, stderr %q lacks %q", tf.errOut, want)
		}
	}

	tf = newTestFactory(t, env)
	if code := tf.run(t, "--ca-file", caFile, "outposts", "list"); code != 0 {
		t.Fatalf("with --ca-file: exit %d: %s", code, tf.errOut)
	}
	withEnv := map[string]string{"OUTPOST_CA_FILE": caFile}
	for k, v := range env {
		withEnv[k] = v
	}
	tf = newTestFactory(t, withEnv)
	if code := tf.run(t, "outposts", "list"); code != 0 {
		t.Fatalf("with OUTPOST_CA_FILE: exit %d: %s", code, tf.errOut)
	}

	tf = newTestFactory(t, env)
	if code := tf.run(t, "--ca-file", cert+".missing", "outposts", "list"); code != 3 || !strings.Contains(tf.errOut.String(), "cannot be read") {
		t.Fatalf("a missing CA file: exit %d: %s", code, tf.errOut)
	}
}

// TestLoginWithPrivateCA: `outpost login` to a server signed by a private
// CA is refused without the CA, with a hint; with --ca-file or
// OUTPOST_CA_FILE it is checked over TLS and saved with the CA's path,
// which later commands trust for that server.
func TestLoginWithPrivateCA(t *testing.T) {
	t.Parallel()
	ca := tlstest.NewCA(t, "login test CA")
	dir := t.TempDir()
	cert, key := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	ca.Issue(t).Write(t, cert, key)
	caFile := ca.WriteCA(t, dir, "ca.pem")
	const admin = "opt_cli-login-ca-admin-token"
	srv := servertest.Start(t, server.Options{TLSCertFile: cert, TLSKeyFile: key, AdminToken: admin})

	tf := newTestFactory(t, nil)
	if code := tf.run(t, "login", "--server", srv.URL(), "--token", admin); code == 0 || !strings.Contains(tf.errOut.String(), "pass --ca-file") {
		t.Fatalf("login without the CA: exit %d, stderr %q; want a failure with the hint", code, tf.errOut)
	}
	if _, err := os.Stat(filepath.Join(tf.configDir, "outpost", "config.json")); !os.IsNotExist(err) {
		t.Errorf("a refused login saved its config: %v", err)
	}

	for _, how := range []string{"flag", "env"} {
		var tf *testFactory
		var code int
		if how == "flag" {
			tf = newTestFactory(t, nil)
			code = tf.run(t, "login", "--server", srv.URL(), "--token", admin, "--ca-file", caFile)
		} else {
			tf = newTestFactory(t, map[string]string{"OUTPOST_CA_FILE": caFile})
			code = tf.run(t, "login", "--server", srv.URL(), "--token", admin)
		}
		if code != 0 || !strings.Contains(tf.out.String(), caFile) {
			t.Fatalf("login with the CA by %s: exit %d, out %q, err %q", how, code, tf.out, tf.errOut)
		}
		cfg, err := loadConfig(tf.Factory)
		if err != nil || cfg.CAFile != caFile || cfg.Server != srv.URL() {
			t.Fatalf("saved login %+v, %v", cfg, err)
		}
		// A later command needs neither the server, the token nor the CA.
		later := newTestFactory(t, nil)
		later.configDir = tf.configDir
		if code := later.run(t, "outposts", "list"); code != 0 {
			t.Errorf("a command after the login (%s): exit %d: %s", how, code, later.errOut)
		}
	}

	// A saved CA file that is gone is named as the login's, not as a
	// flag the user did not give.
	tf = newTestFactory(t, nil)
	gone := filepath.Join(t.TempDir(), "gone.pem")
	if _, err := saveConfig(tf.Factory, config{Server: srv.URL(), Token: admin, CAFile: gone}); err != nil {
		t.Fatal(err)
	}
	if code := tf.run(t, "outposts", "list"); code == 0 || !strings.Contains(tf.errOut.String(), "saved with the login") {
		t.Errorf("a saved CA file that is gone: exit %d, stderr %q", code, tf.errOut)
	}
}
