package doctor

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/client"
	"github.com/outpost-sh/outpost/internal/tlsconfig"
)

// Limits of the server checks.
const (
	// DefaultTimeout bounds each request of the server checks.
	DefaultTimeout = 10 * time.Second
	// ClockWarn and ClockFail are the clock skews from which the clock
	// check warns and fails: claim deadlines, token expiry and
	// certificate validity are the server's times, read by this clock.
	ClockWarn = 5 * time.Second
	ClockFail = time.Minute
	// CertWarn is how long before its expiry the TLS check warns.
	CertWarn = 14 * 24 * time.Hour
	// TokenWarn is how long before its expiry the token check warns.
	TokenWarn = 7 * 24 * time.Hour
)

// ServerOptions say which server to check, and with what.
type ServerOptions struct {
	// Server is the server's URL, the origin (https://outpost.example.com).
	// Required.
	Server string
	// Token is the API token to check; empty fails the token check.
	Token string
	// CAFile is a PEM file of CA certificates trusted besides the
	// system's roots; empty means the system's alone.
	CAFile string
	// Outpost, when set, is the outpost this machine is to serve: it must
	// exist, the token must reach it, and its platform must be Platform.
	Outpost string
	// Platform is this machine's outpost platform (worker.HostPlatform).
	Platform string
	// UserAgent is sent with every request; empty means Go's.
	UserAgent string
	// Now is this machine's clock; nil means time.Now.
	Now func() time.Time
	// Timeout bounds each request; zero means DefaultTimeout.
	Timeout time.Duration
}

// ServerInfo is what the server checks found, for scripts.
type ServerInfo struct {
	URL string `json:"url"`
	// TLS is the certificate the server presented; nil over plain HTTP or
	// when no handshake was made.
	TLS *TLSInfo `json:"tls,omitempty"`
	// ClockSkewMS is the server's clock minus this one's, in milliseconds
	// (±500: the Date header counts whole seconds); nil when unknown.
	ClockSkewMS *int64 `json:"clock_skew_ms,omitempty"`
	// Token is the token as the server knows it; nil when not valid.
	Token *api.WhoAmI `json:"token,omitempty"`
}

// TLSInfo describes the server's certificate.
type TLSInfo struct {
	Subject  string    `json:"subject"`
	Names    []string  `json:"names,omitempty"`
	Issuer   string    `json:"issuer"`
	NotAfter time.Time `json:"not_after"`
	// DaysLeft is whole days until NotAfter; negative once it passed.
	DaysLeft int `json:"days_left"`
	// Verified is whether the certificate verified with the trusted roots.
	Verified bool `json:"verified"`
}

// CheckServer checks the server: server (it answers), tls, clock, token,
// and outpost when ServerOptions.Outpost is set. A check that needs an
// earlier one that failed is skipped. Every check it returns is required.
func CheckServer(ctx context.Context, o ServerOptions) ([]Check, ServerInfo) {
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	r := &serverRun{o: o, info: ServerInfo{URL: o.Server}}
	r.run(ctx)
	for i := range r.checks {
		r.checks[i].Required = true
	}
	return r.checks, r.info
}

// serverRun is one run of the server checks.
type serverRun struct {
	o      ServerOptions
	info   ServerInfo
	checks []Check
	hc     *http.Client
}

func (r *serverRun) add(c Check) { r.checks = append(r.checks, c) }

// skip records the checks from names on as not made, for why.
func (r *serverRun) skip(why string, names ...string) {
	for _, n := range names {
		r.add(Check{Name: n, Status: Skip, Detail: "not checked: " + why})
	}
}

func (r *serverRun) run(ctx context.Context) {
	later := []string{"tls", "clock", "token"}
	if r.o.Outpost != "" {
		later = append(later, "outpost")
	}
	u, err := url.Parse(r.o.Server)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		r.add(Check{Name: "server", Status: Fail, Detail: fmt.Sprintf("%q is not an http:// or https:// URL", r.o.Server),
			Fix: "pass --server (or set OUTPOST_SERVER) to the server's origin, e.g. https://outpost.example.com."})
		r.skip("no server URL", later...)
		return
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tlsCfg, caErr := tlsconfig.Client(r.o.CAFile)
	if caErr != nil {
		tlsCfg = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	tr.TLSClientConfig = tlsCfg
	r.hc = &http.Client{Transport: tr, Timeout: r.o.Timeout}
	defer tr.CloseIdleConnections()

	h, err := r.health(ctx)
	if err != nil {
		var verr *tls.CertificateVerificationError
		if u.Scheme == "https" && (errors.As(err, &verr) || tlsconfig.IsVerificationError(err)) {
			r.add(Check{Name: "server", Status: OK, Detail: "answers at " + u.Host + " (TLS handshake made)"})
			r.add(r.tlsFailure(u, err, verr, caErr))
			r.skip("the TLS certificate does not verify", later[1:]...)
			return
		}
		r.add(Check{Name: "server", Status: Fail, Detail: fmt.Sprintf("cannot reach %s: %v", r.o.Server, unwrapURL(err)),
			Fix: "start 'outpost server' there, or pass --server (or set OUTPOST_SERVER) to the server's URL; workers need outbound HTTP(S) to it."})
		r.skip("the server cannot be reached", later...)
		return
	}
	if h.resp.StatusCode != http.StatusOK {
		r.add(Check{Name: "server", Status: Fail, Detail: fmt.Sprintf("%s/healthz answers %s: not an Outpost server, or a proxy in front of it", strings.TrimRight(r.o.Server, "/"), h.resp.Status),
			Fix: "pass --server the Outpost server's origin (scheme and host, no path)."})
		r.skip("the server does not answer as Outpost", later...)
		return
	}
	r.add(Check{Name: "server", Status: OK, Detail: fmt.Sprintf("%s answers (%s)", r.o.Server, h.rtt.Round(time.Millisecond))})
	r.add(r.tlsCheck(u, h.resp, caErr))
	r.add(r.clockCheck(h))
	r.tokenChecks(ctx)
}

// healthAnswer is the server's answer to GET /healthz and when it came.
type healthAnswer struct {
	resp *http.Response
	// mid is the middle of the request by this machine's clock, rtt its
	// length: the Date header of the answer tells the server's time then.
	mid time.Time
	rtt time.Duration
}

// health fetches /healthz.
func (r *serverRun) health(ctx context.Context) (healthAnswer, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(r.o.Server, "/")+"/healthz", nil)
	if err != nil {
		return healthAnswer{}, err
	}
	if r.o.UserAgent != "" {
		req.Header.Set("User-Agent", r.o.UserAgent)
	}
	start := r.o.Now()
	resp, err := r.hc.Do(req)
	if err != nil {
		return healthAnswer{}, err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
	resp.Body.Close()
	rtt := r.o.Now().Sub(start)
	return healthAnswer{resp: resp, mid: start.Add(rtt / 2), rtt: rtt}, nil
}

func unwrapURL(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

func (r *serverRun) tlsCheck(u *url.URL, resp *http.Response, caErr error) Check {
	c := Check{Name: "tls"}
	if u.Scheme == "http" {
		if isLoopback(u.Hostname()) {
			c.Status, c.Detail = Skip, "plain HTTP to this machine: nothing to encrypt"
			return c
		}
		c.Status, c.Detail = Warn, "plain HTTP: tokens and session traffic cross the network unencrypted"
		c.Fix = "serve TLS (outpost server --tls-cert/--tls-key, or a TLS proxy in front) and use an https:// server URL."
		return c
	}
	if caErr != nil {
		c.Status, c.Detail = Fail, caErr.Error()
		c.Fix = "point --ca-file (or OUTPOST_CA_FILE) at a readable PEM file of the CA certificates to trust."
		return c
	}
	if resp.TLS == nil || len(resp.TLS.PeerCertificates) == 0 {
		c.Status, c.Detail = Skip, "no certificate seen"
		return c
	}
	info := r.certInfo(resp.TLS.PeerCertificates[0], true)
	r.info.TLS = &info
	left := info.NotAfter.Sub(r.o.Now())
	roots := "the system's roots"
	if r.o.CAFile != "" {
		roots += " and " + r.o.CAFile
	}
	c.Detail = fmt.Sprintf("the certificate for %s (issued by %s) verifies with %s; it expires in %s", strings.Join(info.Names, ", "), info.Issuer, roots, daysText(left))
	c.Status = OK
	if left < CertWarn {
		c.Status = Warn
		c.Fix = "renew the server's certificate (the server reads renewed files without a restart)."
	}
	return c
}

// tlsFailure is the tls check of a certificate that did not verify.
func (r *serverRun) tlsFailure(u *url.URL, err error, verr *tls.CertificateVerificationError, caErr error) Check {
	c := Check{Name: "tls", Status: Fail}
	if verr != nil && len(verr.UnverifiedCertificates) > 0 {
		info := r.certInfo(verr.UnverifiedCertificates[0], false)
		r.info.TLS = &info
	}
	var he x509.HostnameError
	var ie x509.CertificateInvalidError
	switch {
	case caErr != nil:
		c.Detail = caErr.Error()
		c.Fix = "point --ca-file (or OUTPOST_CA_FILE) at a readable PEM file of the CA certificates to trust."
	case tlsconfig.IsUnknownAuthority(err):
		c.Detail = "the certificate is signed by an authority this machine does not trust"
		c.Fix = "pass --ca-file (or set OUTPOST_CA_FILE) to the PEM file of the CA that signed it."
	case errors.As(err, &he):
		c.Detail = fmt.Sprintf("the certificate is not for %s", u.Hostname())
		c.Fix = "pass --server with a host name the certificate is for."
	case errors.As(err, &ie) && ie.Reason == x509.Expired:
		c.Detail = "the certificate has expired or is not valid yet"
		c.Fix = "renew the server's certificate, and check this machine's clock."
	default:
		c.Detail = "the certificate does not verify"
		c.Fix = "give the server a certificate that chains to a trusted CA (or pass that CA with --ca-file)."
	}
	if r.info.TLS != nil {
		c.Detail += fmt.Sprintf(" (for %s, issued by %s, expires in %s)", strings.Join(r.info.TLS.Names, ", "), r.info.TLS.Issuer, daysText(r.info.TLS.NotAfter.Sub(r.o.Now())))
	}
	c.Detail += ": " + unwrapURL(err).Error()
	return c
}

func (r *serverRun) certInfo(cert *x509.Certificate, verified bool) TLSInfo {
	names := append([]string{}, cert.DNSNames...)
	for _, ip := range cert.IPAddresses {
		names = append(names, ip.String())
	}
	if len(names) == 0 {
		names = []string{cert.Subject.CommonName}
	}
	issuer := cert.Issuer.CommonName
	if issuer == "" {
		issuer = cert.Issuer.String()
	}
	left := cert.NotAfter.Sub(r.o.Now())
	return TLSInfo{Subject: cert.Subject.String(), Names: names, Issuer: issuer, NotAfter: cert.NotAfter.UTC(),
		DaysLeft: int(left / (24 * time.Hour)), Verified: verified}
}

// daysText says how long d is: in minutes under two hours, in hours under
// two days, else in days; "… ago" when d is negative.
func daysText(d time.Duration) string {
	suffix := ""
	if d < 0 {
		d, suffix = -d, " ago"
	}
	switch {
	case d < 2*time.Hour:
		return fmt.Sprintf("%d minutes%s", int(d/time.Minute), suffix)
	case d < 48*time.Hour:
		return fmt.Sprintf("%d hours%s", int(d/time.Hour), suffix)
	}
	return fmt.Sprintf("%d days%s", int(d/(24*time.Hour)), suffix)
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func (r *serverRun) clockCheck(h healthAnswer) Check {
	c := Check{Name: "clock"}
	date, err := http.ParseTime(h.resp.Header.Get("Date"))
	if err != nil {
		c.Status, c.Detail = Skip, "the server sent no Date header"
		return c
	}
	// Date counts whole seconds: the server's time was within the second
	// after it.
	skew := date.Add(500 * time.Millisecond).Sub(h.mid)
	ms := skew.Milliseconds()
	r.info.ClockSkewMS = &ms
	abs := skew.Abs()
	if abs < 2*time.Second {
		c.Status, c.Detail = OK, "in step with the server's (within 2 seconds)"
		return c
	}
	way := "behind"
	if skew < 0 {
		way = "ahead of"
	}
	c.Detail = fmt.Sprintf("this clock is %s %s the server's", abs.Round(time.Second), way)
	switch {
	case abs >= ClockFail:
		c.Status = Fail
	case abs >= ClockWarn:
		c.Status = Warn
	default:
		c.Status = OK
		return c
	}
	c.Fix = "synchronize the clocks with NTP (timedatectl set-ntp true, or chrony) on this machine and the server's."
	return c
}

// tokenChecks asks the server who the token is, and checks the outpost.
func (r *serverRun) tokenChecks(ctx context.Context) {
	skipOutpost := func(why string) {
		if r.o.Outpost != "" {
			r.skip(why, "outpost")
		}
	}
	if r.o.Token == "" {
		r.add(Check{Name: "token", Status: Fail, Detail: "no API token given",
			Fix: "pass --token, set OUTPOST_TOKEN, or run 'outpost login'; a worker needs one with the outposts.machine scope."})
		skipOutpost("no token")
		return
	}
	opts := []client.Option{client.WithHTTPClient(r.hc)}
	if r.o.UserAgent != "" {
		opts = append(opts, client.WithUserAgent(r.o.UserAgent))
	}
	c, err := client.New(r.o.Server, r.o.Token, opts...)
	if err != nil {
		r.add(Check{Name: "token", Status: Fail, Detail: err.Error(), Fix: "pass --server the server's URL."})
		skipOutpost("no client")
		return
	}
	ctx, cancel := context.WithTimeout(ctx, r.o.Timeout)
	defer cancel()
	me, err := c.Tokens.WhoAmI(ctx)
	switch {
	case client.IsUnauthorized(err):
		var ce *client.Error
		detail := "the server refuses it"
		if errors.As(err, &ce) && ce.Message != "" {
			detail = ce.Message
		}
		r.add(Check{Name: "token", Status: Fail, Detail: detail,
			Fix: "use a valid token: an admin makes one with 'outpost tokens create --scope outposts.machine --outpost NAME'."})
		skipOutpost("the token is not valid")
		return
	case client.IsNotFound(err):
		r.add(Check{Name: "token", Status: Warn, Detail: "the server is older than GET /v1/whoami: the token's scopes are unknown",
			Fix: "upgrade the server to check tokens."})
	case err != nil:
		r.add(Check{Name: "token", Status: Fail, Detail: "cannot ask the server who the token is: " + err.Error(), Fix: "try again; check the server's log."})
		skipOutpost("the token was not checked")
		return
	default:
		r.info.Token = me
		r.add(r.tokenCheck(me))
	}
	if r.o.Outpost != "" {
		r.add(r.outpostCheck(ctx, c, me))
	}
}

func (r *serverRun) tokenCheck(me *api.WhoAmI) Check {
	c := Check{Name: "token", Status: OK}
	name := me.ID
	if me.Name != "" {
		name = fmt.Sprintf("%q (%s)", me.Name, me.ID)
	}
	parts := []string{name + ": " + strings.Join(me.Scopes, ", ")}
	switch {
	case me.Outpost != "":
		parts = append(parts, "limited to outpost "+me.Outpost)
	case me.OutpostID != "":
		parts = append(parts, "limited to outpost "+me.OutpostID+", which no longer exists")
	default:
		parts = append(parts, "for every outpost")
	}
	if me.ExpiresAt == nil {
		parts = append(parts, "never expires")
	} else {
		left := time.Unix(*me.ExpiresAt, 0).Sub(r.o.Now())
		parts = append(parts, "expires in "+daysText(left))
		if left < TokenWarn {
			c.Status = Warn
			c.Fix = "ask an admin for a new token before this one expires."
		}
	}
	c.Detail = strings.Join(parts, "; ")
	if !api.HasScope(me.Scopes, api.ScopeMachine) {
		c.Status = Fail
		c.Detail += ": without the outposts.machine scope a worker cannot claim sessions"
		c.Fix = "use a token with outposts.machine: 'outpost tokens create --scope outposts.machine --outpost NAME'."
	}
	return c
}

func (r *serverRun) outpostCheck(ctx context.Context, c *client.Client, me *api.WhoAmI) Check {
	chk := Check{Name: "outpost"}
	o, err := c.Outposts.Get(ctx, r.o.Outpost)
	// The server answers 404 for an outpost outside the token's as for a
	// missing one; the token itself says which it is limited to.
	limitedElsewhere := me != nil && me.Outpost != "" && me.OutpostID != r.o.Outpost && me.Outpost != r.o.Outpost
	switch {
	case client.IsNotFound(err) && limitedElsewhere, client.IsForbidden(err):
		chk.Status, chk.Detail = Fail, fmt.Sprintf("the token may not serve outpost %q", r.o.Outpost)
		if me != nil && me.Outpost != "" {
			chk.Detail += " (it is limited to " + me.Outpost + ")"
		}
		chk.Fix = "use a token made for that outpost (--outpost " + r.o.Outpost + " when an admin creates it)."
		return chk
	case client.IsNotFound(err):
		chk.Status, chk.Detail = Fail, fmt.Sprintf("outpost %q does not exist", r.o.Outpost)
		chk.Fix = "create it (outpost outposts create " + r.o.Outpost + " --platform " + r.o.Platform + ") or pass the name of an existing one."
		return chk
	case err != nil:
		chk.Status, chk.Detail, chk.Fix = Fail, "cannot look it up: "+err.Error(), "try again; check the server's log."
		return chk
	}
	platform := o.Spec.Platform
	if platform == "" {
		platform = api.PlatformLinux
	}
	if r.o.Platform != "" && platform != r.o.Platform {
		chk.Status = Fail
		chk.Detail = fmt.Sprintf("%s serves %s sessions, but this machine runs %s", o.Spec.Name, platform, r.o.Platform)
		chk.Fix = "serve it from a " + platform + " machine, or serve an outpost created with --platform " + r.o.Platform + "."
		return chk
	}
	chk.Status, chk.Detail = OK, fmt.Sprintf("%s (%s): %s sessions", o.Spec.Name, o.Metadata.OutpostID, platform)
	return chk
}
