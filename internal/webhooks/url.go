package webhooks

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"syscall"
	"time"
)

// MaxURLLength bounds a subscription's URL.
const MaxURLLength = 2048

// ValidateURL checks a subscription's URL: absolute http:// or https://,
// a host, no user info, and, unless allowInternal, a host that is not an
// internal address literal (see internal). Names are checked again when
// each request dials, against the addresses they resolve to.
func ValidateURL(raw string, allowInternal bool) error {
	if raw == "" {
		return errors.New("url is required")
	}
	if len(raw) > MaxURLLength {
		return fmt.Errorf("url is longer than %d bytes", MaxURLLength)
	}
	u, err := url.Parse(raw)
	if err != nil {
		return errors.New("url is not a valid URL")
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return errors.New("url must start with http:// or https://")
	}
	if u.Host == "" || u.Hostname() == "" {
		return errors.New("url has no host")
	}
	if u.User != nil {
		return errors.New("url must not carry a user name or password")
	}
	if ip, err := netip.ParseAddr(u.Hostname()); err == nil && !allowInternal && internal(ip) {
		return fmt.Errorf("url's host %s is a loopback, link-local or unspecified address, which the server refuses unless started with --webhook-allow-internal", ip)
	}
	return nil
}

// internal reports an address a webhook may not reach by default:
// loopback, link-local (the cloud metadata address 169.254.169.254
// among them), unspecified and multicast ones. Private networks are
// allowed: receivers inside a company network are the common case.
func internal(ip netip.Addr) bool {
	ip = ip.Unmap()
	return ip.IsLoopback() || ip.IsLinkLocalUnicast() || ip.IsLinkLocalMulticast() || ip.IsUnspecified() ||
		ip.IsMulticast() || ip.IsInterfaceLocalMulticast()
}

// errInternal is a dial refused by the guard.
var errInternal = errors.New("the webhook's host resolves to an internal address")

// NewClient returns the HTTP client deliveries are sent with: each
// request bounded by timeout, redirects not followed (a 3xx is the
// answer), no proxy from the environment, and, unless allowInternal,
// dials to internal addresses refused after resolution.
func NewClient(timeout time.Duration, allowInternal bool) *http.Client {
	d := &net.Dialer{Timeout: timeout}
	if !allowInternal {
		d.Control = func(_, address string, _ syscall.RawConn) error {
			ap, err := netip.ParseAddrPort(address)
			if err != nil {
				return fmt.Errorf("%w: %s", errInternal, address)
			}
			if internal(ap.Addr()) {
				return fmt.Errorf("%w: %s", errInternal, ap.Addr())
			}
			return nil
		}
	}
	tr := &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			return d.DialContext(ctx, network, addr)
		},
		TLSHandshakeTimeout:   timeout,
		ResponseHeaderTimeout: timeout,
		MaxIdleConnsPerHost:   4,
		IdleConnTimeout:       90 * time.Second,
		ForceAttemptHTTP2:     true,
	}
	return &http.Client{
		Transport: tr,
		Timeout:   timeout,
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		},
	}
}
