package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/client"
)

// userMessage turns err, returned by command c, into the sentence people
// see, naming what went wrong with a hint of what to do for the failures
// that have an obvious fix.
func userMessage(f *Factory, c *cobra.Command, err error) string {
	msg := strings.TrimSpace(err.Error())
	if s, ok := listenProblem(c, err); ok {
		return s
	}
	server, _, _ := f.Endpoint()
	switch {
	case client.IsNotOutpost(err):
		return fmt.Sprintf("%s does not answer like an Outpost server: the %s; check --server or %s",
			server, strings.TrimSuffix(msg, ", not the Outpost API"), api.EnvServer.Name)
	case client.IsUnauthorized(err):
		return strings.TrimSuffix(msg, ".") + "; pass --token, set " + api.EnvToken.Name + " or run 'outpost login'."
	case client.IsForbidden(err):
		return forbiddenText(msg)
	case client.IsNotFound(err):
		return notFoundText(f, err, msg)
	}
	var ce *client.Error
	if errors.As(err, &ce) {
		return msg
	}
	if s, ok := connectionProblem(server, err); ok {
		return s
	}
	return msg
}

// forbiddenText adds to a 403 answer the hint that fits its cause.
func forbiddenText(msg string) string {
	msg = strings.TrimSuffix(msg, ".")
	switch {
	case strings.Contains(msg, "lacks the"):
		return msg + "; use a token that has it."
	case strings.Contains(msg, "limited to one outpost"):
		return msg + "; use a token not limited to an outpost."
	}
	return msg + "."
}

// whoAmITimeout bounds the call notFoundText makes.
const whoAmITimeout = 5 * time.Second

// notFoundText adds to a 404 answer about an outpost or a session, when
// the token is limited to an outpost, that it sees nothing of the others:
// the server answers for another outpost's resources exactly as for missing
// ones, so the hint comes from the token itself (GET /v1/whoami), not from
// the resource, and says nothing of whether it exists.
func notFoundText(f *Factory, err error, msg string) string {
	var ce *client.Error
	if !errors.As(err, &ce) || !strings.HasPrefix(ce.Message, "Outpost ") && !strings.HasPrefix(ce.Message, "Session ") {
		return msg
	}
	c, err := f.Client()
	if err != nil {
		return msg
	}
	ctx, cancel := context.WithTimeout(context.Background(), whoAmITimeout)
	defer cancel()
	me, err := c.Tokens.WhoAmI(ctx)
	if err != nil || me.OutpostID == "" {
		return msg
	}
	limit := "an outpost that no longer exists"
	if me.Outpost != "" {
		limit = fmt.Sprintf("outpost %q", me.Outpost)
	}
	return strings.TrimSuffix(msg, ".") + "; this token is limited to " + limit + " and sees nothing of other outposts."
}

// connectionProblem describes a failure of the API client to talk to the
// server at all; ok is false when err is not one. Other network errors (a
// database, a Docker daemon) are not the Outpost server's and keep their
// own words.
func connectionProblem(server string, err error) (string, bool) {
	if !client.IsTransport(err) {
		return "", false
	}
	var ue *url.Error
	var ne net.Error
	cause := err
	if errors.As(err, &ue) {
		cause = ue.Err
	}
	unreachable := func(why string) (string, bool) {
		return fmt.Sprintf("cannot reach the Outpost server at %s (is 'outpost server' running? set --server or %s): %s", server, api.EnvServer.Name, why), true
	}
	var dns *net.DNSError
	var rec tls.RecordHeaderError
	var unknownCA x509.UnknownAuthorityError
	var badHost x509.HostnameError
	var badCert x509.CertificateInvalidError
	var verify *tls.CertificateVerificationError
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return unreachable("connection refused, nothing listens there")
	case errors.As(err, &dns):
		if dns.IsNotFound {
			return unreachable(fmt.Sprintf("the host name %s is not known", dns.Name))
		}
		return unreachable(fmt.Sprintf("looking up %s failed: %v", dns.Name, dns.Err))
	case errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH):
		return unreachable("no route to the host")
	case errors.As(err, &ne) && ne.Timeout():
		return unreachable("it did not answer in time")
	case errors.As(err, &rec), strings.Contains(err.Error(), "server gave HTTP response to HTTPS client"):
		return fmt.Sprintf("the server at %s does not speak HTTPS; if it serves plain HTTP, use an http:// URL", server), true
	case errors.As(err, &unknownCA), errors.As(err, &badHost), errors.As(err, &badCert), errors.As(err, &verify):
		if errors.As(err, &unknownCA) {
			return fmt.Sprintf("the TLS certificate of the server at %s is signed by an authority this machine does not trust: pass --ca-file or set %s to the PEM file of the CA that signed it (%v)", server, envCAFile.Name, cause), true
		}
		return fmt.Sprintf("the TLS certificate of the server at %s is not trusted (check that the URL names a host the certificate is for and that it has not expired): %v", server, cause), true
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return fmt.Sprintf("the connection to the Outpost server at %s broke before it answered: %v", server, cause), true
	}
	return fmt.Sprintf("talking to the Outpost server at %s failed: %s", server, strings.TrimSpace(err.Error())), true
}

// listenProblem describes a failure to listen on an address, naming the
// flag that sets it; ok is false when err is not one.
func listenProblem(c *cobra.Command, err error) (string, bool) {
	var op *net.OpError
	if !errors.As(err, &op) || op.Op != "listen" || op.Addr == nil {
		return "", false
	}
	addr := op.Addr.String()
	flag := listenFlag(c, addr)
	pick := ""
	if flag != "" {
		pick = "; pick another --" + flag
	}
	switch {
	case errors.Is(err, syscall.EADDRINUSE):
		s := "listen " + addr + ": address already in use"
		if flag == "listen" {
			return s + " — another outpost server? pick --listen", true
		}
		return s + pick, true
	case errors.Is(err, syscall.EACCES):
		return "listen " + addr + ": permission denied (ports below 1024 need privileges)" + pick, true
	case errors.Is(err, syscall.EADDRNOTAVAIL):
		return "listen " + addr + ": this machine has no such address" + pick, true
	}
	return fmt.Sprintf("listen %s: %v%s", addr, op.Err, pick), true
}

// listenFlag finds the flag of c that holds addr: the one whose value it is,
// else "listen" when c has that flag.
func listenFlag(c *cobra.Command, addr string) string {
	if c == nil {
		return ""
	}
	name := ""
	c.Flags().VisitAll(func(fl *pflag.Flag) {
		if name == "" && strings.Contains(fl.Name, "listen") && fl.Value.String() == addr {
			name = fl.Name
		}
	})
	if name == "" && c.Flags().Lookup("listen") != nil {
		name = "listen"
	}
	return name
}

// checkServerURL refuses a server URL that is not an absolute http:// or
// https:// URL, naming where it came from.
func checkServerURL(f *Factory, server string) error {
	u, err := url.Parse(strings.TrimSpace(server))
	if err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != "" {
		return nil
	}
	from := "the saved login's server"
	switch {
	case f.Server != "":
		from = "--server"
	case f.Getenv(api.EnvServer.Name) != "":
		from = api.EnvServer.Name
	}
	if err == nil && u.Scheme != "" && u.Scheme != "http" && u.Scheme != "https" && u.Opaque == "" {
		return usageErrorf("%s must start with http:// or https://, not %s:// (%q)", from, u.Scheme, server)
	}
	if !strings.Contains(server, "://") {
		return usageErrorf("%s must start with http:// or https:// (%q); try http://%s", from, server, strings.TrimSpace(server))
	}
	return usageErrorf("%s must be an http:// or https:// URL with a host (%q)", from, server)
}
