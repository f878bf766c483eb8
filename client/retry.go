package client

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net/http"
	"time"

	"github.com/outpost-sh/outpost/backoff"
)

// retryPolicy is the one place that decides what is retried and how long to
// wait between attempts.
type retryPolicy struct {
	attempts int // total tries of one call, including the first
	// wait is the wait after the n-th consecutive failure: exponential from
	// 250ms, capped at 5s, less up to a fifth at random so that many
	// clients do not retry in step.
	wait backoff.Policy
}

var defaultRetryPolicy = retryPolicy{
	attempts: 4,
	wait:     backoff.Policy{Base: 250 * time.Millisecond, Max: 5 * time.Second, Jitter: 0.2},
}

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

// isCertificateError reports whether err is a server certificate that failed
// verification: trying again gets the same certificate.
func isCertificateError(err error) bool {
	var ve *tls.CertificateVerificationError
	var ua x509.UnknownAuthorityError
	var he x509.HostnameError
	var ie x509.CertificateInvalidError
	return errors.As(err, &ve) || errors.As(err, &ua) || errors.As(err, &he) || errors.As(err, &ie)
}
