package client

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"math/rand/v2"
	"net/http"
	"time"
)

// retryPolicy is the one place that decides what is retried and how long to
// wait between attempts.
type retryPolicy struct {
	attempts int           // total tries of one call, including the first
	base     time.Duration // wait after the first failure
	max      time.Duration // cap on any wait
}

var defaultRetryPolicy = retryPolicy{attempts: 4, base: 250 * time.Millisecond, max: 5 * time.Second}

// retryable reports whether a call that failed with err may be tried again:
// only idempotent reads, and only when the server could not be reached or
// answered with a 5xx other than 501.
func (p retryPolicy) retryable(method string, err error) bool {
	if method != http.MethodGet || isCtxErr(err) {
		return false
	}
	return temporary(err)
}

// temporary reports whether err may go away by itself: a transport failure
// other than a server certificate this client does not accept, or a 5xx
// answer.
func temporary(err error) bool {
	var te *transportError
	if errors.As(err, &te) {
		return !isCtxErr(err) && !isCertificateError(err)
	}
	var e *Error
	if errors.As(err, &e) {
		return e.StatusCode >= 500 && e.StatusCode != http.StatusNotImplemented
	}
	return false
}

// delay is the wait after the n-th consecutive failure (n ≥ 1): exponential
// from base, capped at max, with up to 25% random jitter so that many
// clients do not retry in step.
func (p retryPolicy) delay(n int) time.Duration {
	d := p.base
	for i := 1; i < n && d < p.max; i++ {
		d *= 2
	}
	d = min(d, p.max)
	if d > 0 {
		d += time.Duration(rand.Int64N(int64(d)/4 + 1))
	}
	return d
}

// isCertificateError reports whether err is a server certificate that failed
// verification: trying again gets the same certificate.
func isCertificateError(err error) bool {
	var ve *tls.CertificateVerificationError
	var ua x509.UnknownAuthorityError
	var he x509.HostnameError
	var ie x509.CertificateInvalidError
	return errors.As(err, &ve) || errors.As(err, &ua) || errors.As(err, &he) || errors.As(err, &ie)
}
