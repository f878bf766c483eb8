package tlsconfig

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"
	"os"
)

// EnvCAFile names the PEM file of CA certificates that Outpost's clients
// trust besides the system's. A worker or orchestrator passes it on to the
// remotes it starts.
const EnvCAFile = "OUTPOST_CA_FILE"

// CertPool returns the system's trusted roots with the certificates of the
// PEM file caFile added. It fails when the file cannot be read or holds no
// certificate.
func CertPool(caFile string) (*x509.CertPool, error) {
	b, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("CA file %s cannot be read: %w", caFile, unwrapPath(err))
	}
	certs, err := parseCertificates(b)
	if err != nil {
		return nil, fmt.Errorf("CA file %s %w", caFile, err)
	}
	pool, err := x509.SystemCertPool()
	if err != nil || pool == nil {
		pool = x509.NewCertPool() // no system roots here: the CA file's alone
	}
	for _, c := range certs {
		pool.AddCert(c)
	}
	return pool, nil
}

// Client returns the TLS configuration of a client that trusts caFile's
// certificates besides the system's; "" means the system's alone.
func Client(caFile string) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if caFile == "" {
		return cfg, nil
	}
	pool, err := CertPool(caFile)
	if err != nil {
		return nil, err
	}
	cfg.RootCAs = pool
	return cfg, nil
}

// Transport returns a copy of http.DefaultTransport (proxy from the
// environment, its timeouts and connection pool) whose TLS configuration is
// Client(caFile).
func Transport(caFile string) (*http.Transport, error) {
	cfg, err := Client(caFile)
	if err != nil {
		return nil, err
	}
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.TLSClientConfig = cfg
	return t, nil
}

// IsUnknownAuthority reports whether err is a server certificate that does
// not chain to a trusted root: the case a CA file fixes.
func IsUnknownAuthority(err error) bool {
	var ua x509.UnknownAuthorityError
	if errors.As(err, &ua) {
		return true
	}
	var pua *x509.UnknownAuthorityError
	return errors.As(err, &pua)
}

// IsVerificationError reports whether err is a failed verification of the
// server's certificate (unknown authority, expired, another host name).
func IsVerificationError(err error) bool {
	var ve *tls.CertificateVerificationError
	var he x509.HostnameError
	var ie x509.CertificateInvalidError
	return errors.As(err, &ve) || IsUnknownAuthority(err) || errors.As(err, &he) || errors.As(err, &ie)
}

// parseCertificates returns the certificates of PEM data, refusing data
// with none.
func parseCertificates(b []byte) ([]*x509.Certificate, error) {
	var certs []*x509.Certificate
	sawKey := false
	for {
		var block *pem.Block
		block, b = pem.Decode(b)
		if block == nil {
			break
		}
		switch block.Type {
		case "CERTIFICATE":
			c, err := x509.ParseCertificate(block.Bytes)
			if err != nil {
				return nil, fmt.Errorf("holds a certificate that cannot be parsed: %w", err)
			}
			certs = append(certs, c)
		case "PRIVATE KEY", "EC PRIVATE KEY", "RSA PRIVATE KEY":
			sawKey = true
		}
	}
	switch {
	case len(certs) > 0:
		return certs, nil
	case sawKey:
		return nil, errors.New("holds a private key but no PEM certificate (are the certificate and key files switched?)")
	default:
		return nil, errors.New("holds no PEM certificate (-----BEGIN CERTIFICATE-----)")
	}
}
