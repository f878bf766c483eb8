package tlsconfig_test

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outpost-sh/outpost/internal/tlsconfig"
	"github.com/outpost-sh/outpost/internal/tlsconfig/tlstest"
)

// clock is a settable clock.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) { s.mu.Lock(); defer s.mu.Unlock(); return s.b.Write(p) }
func (s *syncBuf) String() string              { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

func serving(t *testing.T, r *tlsconfig.CertReloader) string {
	t.Helper()
	c, err := r.GetCertificate(&tls.ClientHelloInfo{})
	if err != nil || c == nil || c.Leaf == nil {
		t.Fatalf("GetCertificate: %v %v", c, err)
	}
	return c.Leaf.SerialNumber.String()
}

func TestCertReloaderRotates(t *testing.T) {
	t.Parallel()
	ca := tlstest.NewCA(t, "test CA")
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	first := ca.Issue(t)
	first.Write(t, certFile, keyFile)
	clk := &clock{t: time.Now()}
	logs := &syncBuf{}
	r, err := tlsconfig.NewCertReloader(certFile, keyFile, tlsconfig.ReloaderOptions{
		CheckInterval: 5 * time.Second, Now: clk.now, Logger: slog.New(slog.NewTextHandler(logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if got := serving(t, r); got != first.Cert.SerialNumber.String() {
		t.Fatalf("serving %s, want the first certificate", got)
	}

	second := ca.Issue(t)
	second.Write(t, certFile, keyFile)
	if got := serving(t, r); got != first.Cert.SerialNumber.String() {
		t.Fatalf("reloaded before the check interval passed")
	}
	clk.add(5 * time.Second)
	if got := serving(t, r); got != second.Cert.SerialNumber.String() {
		t.Fatalf("serving %s after the interval, want the second certificate %s", got, second.Cert.SerialNumber)
	}

	// A key that does not match: the second certificate stays, logged once.
	third := ca.Issue(t)
	if err := os.WriteFile(keyFile, third.KeyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		clk.add(5 * time.Second)
		if got := serving(t, r); got != second.Cert.SerialNumber.String() {
			t.Fatalf("a mismatched pair replaced the certificate: serving %s", got)
		}
	}
	if n := strings.Count(logs.String(), "TLS certificate reload failed"); n != 1 {
		t.Fatalf("the failed reload was logged %d times, want once:\n%s", n, logs)
	}
	if !strings.Contains(logs.String(), "does not match the certificate") {
		t.Errorf("the log does not say why:\n%s", logs)
	}
	// The matching certificate arrives: served at the next check.
	if err := os.WriteFile(certFile, third.CertPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	clk.add(5 * time.Second)
	if got := serving(t, r); got != third.Cert.SerialNumber.String() {
		t.Fatalf("serving %s, want the third certificate", got)
	}

	// Files that vanish keep the certificate too.
	os.Remove(certFile)
	clk.add(5 * time.Second)
	if got := serving(t, r); got != third.Cert.SerialNumber.String() {
		t.Fatalf("a missing file replaced the certificate: serving %s", got)
	}
}

func TestCertReloaderStartErrors(t *testing.T) {
	t.Parallel()
	ca := tlstest.NewCA(t, "test CA")
	dir := t.TempDir()
	p, other := ca.Issue(t), ca.Issue(t)
	write := func(name string, b []byte, mode os.FileMode) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, b, mode); err != nil {
			t.Fatal(err)
		}
		return path
	}
	cert, key := write("c.pem", p.CertPEM, 0o600), write("k.pem", p.KeyPEM, 0o600)
	otherKey := write("other.pem", other.KeyPEM, 0o600)
	junk := write("junk.pem", []byte("not pem\n"), 0o600)
	unreadable := write("unreadable.pem", p.CertPEM, 0o000)
	for _, tc := range []struct {
		name, cert, key, want string
	}{
		{"missing cert", filepath.Join(dir, "nope.pem"), key, "nope.pem cannot be read: no such file or directory"},
		{"missing key", cert, filepath.Join(dir, "nokey.pem"), "nokey.pem cannot be read: no such file or directory"},
		{"mismatch", cert, otherKey, "TLS key file " + otherKey + " does not match the certificate in " + cert},
		{"junk cert", junk, key, "junk.pem holds no PEM certificate"},
		{"switched", key, cert, "are the certificate and key files switched?"},
		{"junk key", cert, junk, "TLS key file " + junk},
		{"unreadable", unreadable, key, "permission denied"},
	} {
		if tc.name == "unreadable" && os.Geteuid() == 0 {
			continue // root reads anything
		}
		_, err := tlsconfig.NewCertReloader(tc.cert, tc.key, tlsconfig.ReloaderOptions{Logger: slog.New(slog.DiscardHandler)})
		if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%s: error %v, want one line containing %q", tc.name, err, tc.want)
		}
	}
}

func TestClientTrustsCAFileAndSystemRoots(t *testing.T) {
	t.Parallel()
	ca := tlstest.NewCA(t, "test CA")
	pair := ca.Issue(t)
	cert, err := tls.X509KeyPair(pair.CertPEM, pair.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(204) }),
		ErrorLog: log.New(io.Discard, "", 0)}
	go srv.Serve(tls.NewListener(ln, tlsconfig.Server(func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return &cert, nil })))
	defer srv.Close()
	url := "https://" + ln.Addr().String()

	// Without the CA: unknown authority.
	plain, err := tlsconfig.Transport("")
	if err != nil {
		t.Fatal(err)
	}
	_, err = (&http.Client{Transport: plain}).Get(url)
	if !tlsconfig.IsUnknownAuthority(err) || !tlsconfig.IsVerificationError(err) {
		t.Fatalf("without the CA: %v, want an unknown authority", err)
	}

	caFile := ca.WriteCA(t, t.TempDir(), "ca.pem")
	tr, err := tlsconfig.Transport(caFile)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := (&http.Client{Transport: tr}).Get(url)
	if err != nil {
		t.Fatalf("with the CA: %v", err)
	}
	resp.Body.Close()
	if v := resp.TLS.Version; v < tls.VersionTLS12 || resp.TLS.NegotiatedProtocol != "http/1.1" {
		t.Errorf("negotiated TLS %x, protocol %q", v, resp.TLS.NegotiatedProtocol)
	}
	// The system's roots are still trusted: the pool is more than the CA.
	if sys, err := x509.SystemCertPool(); err == nil && !sys.Equal(x509.NewCertPool()) && tr.TLSClientConfig.RootCAs.Equal(ca.Pool()) {
		t.Errorf("the pool holds only the CA file's certificate; the system roots are gone")
	}

	if _, err := tlsconfig.Client(filepath.Join(t.TempDir(), "missing.pem")); err == nil || !strings.Contains(err.Error(), "missing.pem cannot be read") {
		t.Errorf("a missing CA file: %v", err)
	}
	junk := filepath.Join(t.TempDir(), "junk.pem")
	os.WriteFile(junk, []byte("junk"), 0o600)
	if _, err := tlsconfig.Client(junk); err == nil || !strings.Contains(err.Error(), "holds no PEM certificate") {
		t.Errorf("a CA file without certificates: %v", err)
	}
	if tlsconfig.IsUnknownAuthority(errors.New("x")) {
		t.Error("any error is an unknown authority")
	}
}
