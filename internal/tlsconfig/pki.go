package tlsconfig

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"strings"
	"time"
)

// A private certificate authority for a server that is not reached
// through a public name: NewCA makes one, IssueServer signs the server's
// certificate with it. Keys are ECDSA P-256, which every TLS client
// Outpost meets accepts.

// PEM holds a certificate and its private key, PEM-encoded.
type PEM struct {
	Cert, Key []byte
}

// NewCA makes a self-signed certificate authority named name, valid from
// now for validFor.
func NewCA(name string, now time.Time, validFor time.Duration) (PEM, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return PEM{}, fmt.Errorf("make the CA's key: %w", err)
	}
	serial, err := newSerial()
	if err != nil {
		return PEM{}, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: name, Organization: []string{"Outpost"}},
		NotBefore:             now.Add(-5 * time.Minute), // clocks differ a little
		NotAfter:              now.Add(validFor),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true, // it signs servers, not other CAs
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return PEM{}, fmt.Errorf("sign the CA: %w", err)
	}
	return encode(der, key)
}

// IssueServer signs a server certificate for names — DNS names (a
// wildcard only as the whole first label) and IP addresses — with the
// CA, valid from now for validFor. The first DNS name, else the first
// address, is also the subject's common name.
func IssueServer(ca PEM, names []string, now time.Time, validFor time.Duration) (PEM, error) {
	caCert, caKey, err := parse(ca)
	if err != nil {
		return PEM{}, err
	}
	if !caCert.IsCA {
		return PEM{}, errors.New("the CA certificate is not a CA's")
	}
	var dns []string
	var ips []net.IP
	for _, n := range names {
		if ip := net.ParseIP(n); ip != nil {
			ips = append(ips, ip)
			continue
		}
		if err := CheckDNSName(n); err != nil {
			return PEM{}, err
		}
		dns = append(dns, strings.ToLower(n))
	}
	if len(dns)+len(ips) == 0 {
		return PEM{}, errors.New("a server certificate needs at least one name")
	}
	cn := ""
	if len(dns) > 0 {
		cn = dns[0]
	} else {
		cn = ips[0].String()
	}
	notAfter := now.Add(validFor)
	if notAfter.After(caCert.NotAfter) {
		return PEM{}, fmt.Errorf("the CA expires on %s, before the certificate would (%s): make a new CA or ask for fewer days", caCert.NotAfter.Format(time.DateOnly), notAfter.Format(time.DateOnly))
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return PEM{}, fmt.Errorf("make the server's key: %w", err)
	}
	serial, err := newSerial()
	if err != nil {
		return PEM{}, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    now.Add(-5 * time.Minute),
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:     dns,
		IPAddresses:  ips,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
	if err != nil {
		return PEM{}, fmt.Errorf("sign the server certificate: %w", err)
	}
	return encode(der, key)
}

// CheckDNSName says why n is not a host name a certificate can carry.
func CheckDNSName(n string) error {
	bad := func(why string) error { return fmt.Errorf("%q is not a host name or IP address: %s", n, why) }
	if n == "" || len(n) > 253 {
		return bad("a name has 1 to 253 characters")
	}
	labels := strings.Split(strings.TrimSuffix(n, "."), ".")
	for i, l := range labels {
		if l == "*" && i == 0 && len(labels) > 2 {
			continue
		}
		if l == "" || len(l) > 63 {
			return bad("each dot-separated part has 1 to 63 characters")
		}
		for j, c := range l {
			switch {
			case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
			case c == '-' && j > 0 && j < len(l)-1:
			default:
				return bad("use letters, digits and inner hyphens; a wildcard only as *.name.tld")
			}
		}
	}
	return nil
}

func parse(p PEM) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	cb, _ := pem.Decode(p.Cert)
	if cb == nil || cb.Type != "CERTIFICATE" {
		return nil, nil, errors.New("the CA certificate is not a PEM certificate")
	}
	cert, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		return nil, nil, fmt.Errorf("read the CA certificate: %w", err)
	}
	kb, _ := pem.Decode(p.Key)
	if kb == nil {
		return nil, nil, errors.New("the CA key is not a PEM key")
	}
	k, err := x509.ParsePKCS8PrivateKey(kb.Bytes)
	if err != nil {
		if ek, err2 := x509.ParseECPrivateKey(kb.Bytes); err2 == nil {
			k = ek
		} else {
			return nil, nil, fmt.Errorf("read the CA key: %w", err)
		}
	}
	key, ok := k.(*ecdsa.PrivateKey)
	if !ok {
		return nil, nil, errors.New("the CA key is not an ECDSA key")
	}
	if !key.PublicKey.Equal(cert.PublicKey) {
		return nil, nil, errors.New("the CA key does not match the CA certificate")
	}
	return cert, key, nil
}

func encode(der []byte, key *ecdsa.PrivateKey) (PEM, error) {
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return PEM{}, fmt.Errorf("encode the key: %w", err)
	}
	return PEM{
		Cert: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		Key:  pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}),
	}, nil
}

func newSerial() (*big.Int, error) {
	s, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, fmt.Errorf("make a serial number: %w", err)
	}
	return s, nil
}
