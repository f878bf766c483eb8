package main

import (
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"strings"
	"testing"

	"github.com/outpost-sh/outpost/internal/server"
	"github.com/outpost-sh/outpost/internal/servertest"
)

// TestCertsCreate follows the TLS recipe: `outpost certs create` makes a
// CA and a certificate for 127.0.0.1, a real server speaks TLS with them,
// and `outpost login --ca-file` trusts it; a renewal with --force keeps
// the CA, so the same ca.crt trusts the new certificate; what cannot work
// is refused before anything is written.
func TestCertsCreate(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "tls")
	tf := newTestFactory(t, nil)
	if code := tf.run(t, "certs", "create", "--name", "127.0.0.1", "--name", "localhost", "--dir", dir); code != 0 {
		t.Fatalf("certs create: exit %d: %s", code, tf.errOut)
	}
	for name, mode := range map[string]os.FileMode{"ca.crt": 0o644, "ca.key": 0o600, "tls.crt": 0o644, "tls.key": 0o600} {
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil || fi.Mode().Perm() != mode {
			t.Errorf("%s: %v %v, want mode %04o", name, fi, err, mode)
		}
	}
	leaf := readCert(t, filepath.Join(dir, "tls.crt"))
	if len(leaf.IPAddresses) != 1 || leaf.IPAddresses[0].String() != "127.0.0.1" || len(leaf.DNSNames) != 1 || leaf.DNSNames[0] != "localhost" {
		t.Errorf("names: %v %v", leaf.IPAddresses, leaf.DNSNames)
	}
	if d := leaf.NotAfter.Sub(leaf.NotBefore).Hours() / 24; d < 396 || d > 398 {
		t.Errorf("valid for %.1f days, want 397", d)
	}

	const admin = "opt_certs-recipe-admin-token"
	srv := servertest.Start(t, server.Options{TLSCertFile: filepath.Join(dir, "tls.crt"), TLSKeyFile: filepath.Join(dir, "tls.key"), AdminToken: admin})
	if !strings.HasPrefix(srv.URL(), "https://127.0.0.1:") {
		t.Fatalf("server URL %s", srv.URL())
	}
	login := newTestFactory(t, nil)
	if code := login.run(t, "login", "--server", srv.URL(), "--token", admin, "--ca-file", filepath.Join(dir, "ca.crt")); code != 0 {
		t.Fatalf("login with the made CA: exit %d: %s", code, login.errOut)
	}

	// Again without --force: refused, nothing changed.
	before, _ := os.ReadFile(filepath.Join(dir, "tls.crt"))
	tf = newTestFactory(t, nil)
	if code := tf.run(t, "certs", "create", "--name", "127.0.0.1", "--dir", dir); code != exitUsage || !strings.Contains(tf.errOut.String(), "pass --force") {
		t.Errorf("a second create: exit %d, stderr %q", code, tf.errOut)
	}
	// A renewal: same CA, new certificate, other names.
	caBefore, _ := os.ReadFile(filepath.Join(dir, "ca.crt"))
	tf = newTestFactory(t, nil)
	if code := tf.run(t, "certs", "create", "--name", "127.0.0.1", "--name", "outpost.internal", "--dir", dir, "--force", "--days", "30"); code != 0 ||
		!strings.Contains(tf.out.String(), "Signed with the existing CA") {
		t.Fatalf("renewal: exit %d: %s %s", code, tf.out, tf.errOut)
	}
	after, _ := os.ReadFile(filepath.Join(dir, "tls.crt"))
	caAfter, _ := os.ReadFile(filepath.Join(dir, "ca.crt"))
	if string(after) == string(before) || string(caAfter) != string(caBefore) {
		t.Error("the renewal must replace the certificate and keep the CA")
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caAfter)
	if _, err := readCert(t, filepath.Join(dir, "tls.crt")).Verify(x509.VerifyOptions{DNSName: "outpost.internal", Roots: pool}); err != nil {
		t.Errorf("the renewed certificate does not verify with the kept CA: %v", err)
	}

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"certs", "create"}, "needs --name"},
		{[]string{"certs", "create", "--name", "bad_name.example"}, "is not a host name or IP address"},
		{[]string{"certs", "create", "--name", "*.com"}, "is not a host name"},
		{[]string{"certs", "create", "--name", "a.example", "--days", "0"}, "at least 1"},
	} {
		empty := t.TempDir()
		tf := newTestFactory(t, nil)
		if code := tf.run(t, append(tc.args, "--dir", empty)...); code != exitUsage || !strings.Contains(tf.errOut.String(), tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want %q", tc.args, code, tf.errOut, tc.want)
		}
		if entries, _ := os.ReadDir(empty); len(entries) > 0 {
			t.Errorf("%v wrote %v", tc.args, entries)
		}
	}
	// A key the server's group reads.
	if os.Geteuid() == 0 {
		tf = newTestFactory(t, nil)
		if code := tf.run(t, "certs", "create", "--name", "127.0.0.1", "--dir", dir, "--force", "--key-group", "nogroup"); code != 0 {
			t.Fatalf("--key-group: exit %d: %s", code, tf.errOut)
		}
		fi, _ := os.Stat(filepath.Join(dir, "tls.key"))
		g, _ := user.LookupGroup("nogroup")
		_, gid, _ := fileOwner(fi)
		if fi.Mode().Perm() != 0o640 || g == nil || fmt.Sprint(gid) != g.Gid {
			t.Errorf("tls.key with --key-group: %v %v", fi.Mode(), fi.Sys())
		}
		// A renewal as the help shows it, without --key-group, keeps
		// the group: the server must still read its key.
		tf = newTestFactory(t, nil)
		if code := tf.run(t, "certs", "create", "--name", "127.0.0.1", "--dir", dir, "--force"); code != 0 {
			t.Fatalf("renewal: exit %d: %s", code, tf.errOut)
		}
		fi, _ = os.Stat(filepath.Join(dir, "tls.key"))
		if _, gid, _ := fileOwner(fi); fi.Mode().Perm() != 0o640 || fmt.Sprint(gid) != g.Gid {
			t.Errorf("tls.key after a renewal without --key-group: %v, group %d; want 0640 and %s", fi.Mode(), gid, g.Gid)
		}
	}
	// More days than the CA has left.
	tf = newTestFactory(t, nil)
	if code := tf.run(t, "certs", "create", "--name", "a.example", "--dir", dir, "--force", "--days", "4000"); code == 0 || !strings.Contains(tf.errOut.String(), "the CA expires") {
		t.Errorf("past the CA: exit %d, stderr %q", code, tf.errOut)
	}
}

// TestCertsCreateKeepsACAKey: a ca.key without its ca.crt is refused and
// kept, and the CA key is never written over a file or a link that is
// there.
func TestCertsCreateKeepsACAKey(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	key := filepath.Join(dir, "ca.key")
	if err := os.WriteFile(key, []byte("the only copy\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tf := newTestFactory(t, nil)
	if code := tf.run(t, "certs", "create", "--name", "127.0.0.1", "--dir", dir); code == 0 || !strings.Contains(tf.errOut.String(), "the CA certificate "+filepath.Join(dir, "ca.crt")+" cannot be read") {
		t.Errorf("a CA key without its certificate: exit %d, stderr %q", code, tf.errOut)
	}
	if b, _ := os.ReadFile(key); string(b) != "the only copy\n" {
		t.Errorf("ca.key became %q", b)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("wrote %v", entries)
	}

	target := filepath.Join(dir, "target")
	if err := os.Symlink(target, filepath.Join(dir, "link.key")); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{key, filepath.Join(dir, "link.key")} {
		if err := writeNewFile(p, []byte("new"), 0o600); !errors.Is(err, fs.ErrExist) {
			t.Errorf("writeNewFile over %s: %v, want fs.ErrExist", p, err)
		}
	}
	if _, err := os.Lstat(target); !os.IsNotExist(err) {
		t.Errorf("writeNewFile wrote through a dangling link: %v", err)
	}
	if b, _ := os.ReadFile(key); string(b) != "the only copy\n" {
		t.Errorf("ca.key became %q", b)
	}
	fresh := filepath.Join(dir, "fresh.key")
	if err := writeNewFile(fresh, []byte("k"), 0o600); err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(fresh); fi == nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("fresh key: %v", fi)
	}
}

func readCert(t *testing.T, path string) *x509.Certificate {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	blk, _ := pem.Decode(b)
	if blk == nil {
		t.Fatalf("%s holds no PEM", path)
	}
	c, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}
