// Package tlsconfig builds Outpost's TLS configurations: the server's, whose
// certificate is read again when its files change, and the clients' (the
// CLI, workers, orchestrators and remotes), which trust the CA certificates
// of a PEM file besides the system's.
package tlsconfig

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultCheckInterval is how often, at most, a CertReloader looks at its
// files again.
const DefaultCheckInterval = 3 * time.Second

// ReloaderOptions configure a CertReloader. Zero values mean the default.
type ReloaderOptions struct {
	// CheckInterval is the least time between two looks at the files'
	// modification times and sizes; 0 means DefaultCheckInterval.
	CheckInterval time.Duration
	// Logger receives reloads and failed reloads; nil means slog.Default().
	Logger *slog.Logger
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// CertReloader serves the certificate and private key of two PEM files and
// reads them again when either file's modification time or size changes, so
// a renewed certificate is served without a restart. A new pair that cannot
// be loaded (half written, or a key that does not match) is logged and the
// previous one is kept.
type CertReloader struct {
	certFile, keyFile string
	interval          time.Duration
	log               *slog.Logger
	now               func() time.Time
	cert              atomic.Pointer[tls.Certificate]

	mu      sync.Mutex // guards the following; a handshake that finds it held serves the current certificate
	checked time.Time  // when the files were last looked at
	seen    fileStamps // the files as they were at the last load attempt
}

// fileStamps identify a version of the two files.
type fileStamps struct{ cert, key fileStamp }

func (s fileStamps) same(o fileStamps) bool { return s.cert.same(o.cert) && s.key.same(o.key) }

// fileStamp is what a file looked like; nil info means it could not be
// seen.
type fileStamp struct{ info os.FileInfo }

// same reports whether two looks saw the same version of a file: the same
// file (not another renamed over it), modification time and size.
func (s fileStamp) same(o fileStamp) bool {
	if s.info == nil || o.info == nil {
		return s.info == nil && o.info == nil
	}
	return os.SameFile(s.info, o.info) && s.info.ModTime().Equal(o.info.ModTime()) && s.info.Size() == o.info.Size()
}

// NewCertReloader loads the pair at once and fails with a one-line error
// naming the file when either is missing or unreadable, holds no PEM data,
// or when the key does not match the certificate.
func NewCertReloader(certFile, keyFile string, opts ReloaderOptions) (*CertReloader, error) {
	if certFile == "" || keyFile == "" {
		return nil, errors.New("a TLS certificate needs both a certificate file and a key file")
	}
	if opts.CheckInterval <= 0 {
		opts.CheckInterval = DefaultCheckInterval
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	r := &CertReloader{certFile: certFile, keyFile: keyFile, interval: opts.CheckInterval, log: opts.Logger, now: opts.Now}
	stamps, err := r.stat()
	if err != nil {
		return nil, err
	}
	cert, err := loadPair(certFile, keyFile)
	if err != nil {
		return nil, err
	}
	r.cert.Store(cert)
	r.seen, r.checked = stamps, r.now()
	r.logLoaded("TLS certificate loaded", cert)
	return r, nil
}

// GetCertificate is the tls.Config hook: it returns the current certificate,
// first loading the files again when they changed and the last look is
// CheckInterval old.
func (r *CertReloader) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	if r.mu.TryLock() {
		r.checkLocked()
		r.mu.Unlock()
	}
	return r.cert.Load(), nil
}

// Certificate returns the certificate being served.
func (r *CertReloader) Certificate() *tls.Certificate { return r.cert.Load() }

func (r *CertReloader) checkLocked() {
	now := r.now()
	if now.Sub(r.checked) < r.interval {
		return
	}
	r.checked = now
	stamps, err := r.stat()
	if err != nil {
		if !stamps.same(r.seen) {
			r.log.Error("TLS certificate reload failed; serving the previous certificate", "err", err)
		}
		r.seen = stamps
		return
	}
	if stamps.same(r.seen) {
		return
	}
	// Remember this version even when it fails, so a bad pair is logged
	// once, and loaded as soon as either file changes again.
	r.seen = stamps
	cert, err := loadPair(r.certFile, r.keyFile)
	if err != nil {
		r.log.Error("TLS certificate reload failed; serving the previous certificate", "err", err)
		return
	}
	r.cert.Store(cert)
	r.logLoaded("TLS certificate reloaded", cert)
}

// stat returns the files' stamps; a file that cannot be read has a zero
// stamp and yields the error.
func (r *CertReloader) stat() (fileStamps, error) {
	var s fileStamps
	var errs []error
	for _, f := range []struct {
		path, what string
		dst        *fileStamp
	}{{r.certFile, "certificate", &s.cert}, {r.keyFile, "key", &s.key}} {
		fi, err := os.Stat(f.path)
		if err != nil {
			errs = append(errs, fmt.Errorf("TLS %s file %s cannot be read: %w", f.what, f.path, unwrapPath(err)))
			continue
		}
		*f.dst = fileStamp{info: fi}
	}
	return s, errors.Join(errs...)
}

func (r *CertReloader) logLoaded(msg string, c *tls.Certificate) {
	leaf := c.Leaf
	if leaf == nil {
		return
	}
	r.log.Info(msg, "cert_file", r.certFile, "subject", leaf.Subject.String(), "serial", hex.EncodeToString(leaf.SerialNumber.Bytes()),
		"not_after", leaf.NotAfter.UTC().Format(time.RFC3339))
	if now := r.now(); now.After(leaf.NotAfter) || now.Before(leaf.NotBefore) {
		r.log.Warn("the TLS certificate is not valid now; clients will refuse it", "not_before", leaf.NotBefore.UTC().Format(time.RFC3339),
			"not_after", leaf.NotAfter.UTC().Format(time.RFC3339))
	}
}

// loadPair reads a certificate chain and its key, saying which file is at
// fault.
func loadPair(certFile, keyFile string) (*tls.Certificate, error) {
	certPEM, err := os.ReadFile(certFile)
	if err != nil {
		return nil, fmt.Errorf("TLS certificate file %s cannot be read: %w", certFile, unwrapPath(err))
	}
	keyPEM, err := os.ReadFile(keyFile)
	if err != nil {
		return nil, fmt.Errorf("TLS key file %s cannot be read: %w", keyFile, unwrapPath(err))
	}
	if _, err := parseCertificates(certPEM); err != nil {
		return nil, fmt.Errorf("TLS certificate file %s %w", certFile, err)
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		if strings.Contains(err.Error(), "does not match public key") {
			return nil, fmt.Errorf("TLS key file %s does not match the certificate in %s", keyFile, certFile)
		}
		return nil, fmt.Errorf("TLS key file %s: %w", keyFile, err)
	}
	if cert.Leaf == nil {
		if cert.Leaf, err = x509.ParseCertificate(cert.Certificate[0]); err != nil {
			return nil, fmt.Errorf("TLS certificate file %s: %w", certFile, err)
		}
	}
	return &cert, nil
}

// unwrapPath drops the path a *PathError repeats.
func unwrapPath(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// Server returns the TLS configuration of a server whose certificate comes
// from getCertificate: TLS 1.2 at least, Go's default cipher suites and
// curves, and HTTP/1.1 only (the gateway's WebSocket upgrade needs it).
func Server(getCertificate func(*tls.ClientHelloInfo) (*tls.Certificate, error)) *tls.Config {
	return &tls.Config{
		MinVersion:     tls.VersionTLS12,
		GetCertificate: getCertificate,
		NextProtos:     []string{"http/1.1"},
	}
}
