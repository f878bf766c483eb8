package operator

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
)

// AllowList is the set of Outpost servers pools may send their tokens to:
// origins (scheme, host, port) given to the operator with
// --allowed-api-url, and wildcards such as https://*.example.com, which
// match one more DNS label in front of the rest (a.example.com, not
// a.b.example.com nor example.com), as a TLS certificate's wildcard does.
// A pool's apiUrl is allowed when it is an origin equal to one of them.
type AllowList struct {
	exact map[origin]bool
	wild  []origin // host is the part after "*."
	names []string // as given, for messages
}

// origin is a URL's scheme, lowercased host and port (the scheme's
// default when the URL gives none).
type origin struct{ scheme, host, port string }

// NewAllowList parses the allowed origins. Each must be an http:// or
// https:// origin without user, path, query or fragment; the host may start
// with "*." (then it needs at least two more labels).
func NewAllowList(urls ...string) (*AllowList, error) {
	a := &AllowList{exact: map[origin]bool{}}
	for _, raw := range urls {
		o, err := parseOrigin(raw, true)
		if err != nil {
			return nil, err
		}
		if rest, ok := strings.CutPrefix(o.host, "*."); ok {
			o.host = rest
			a.wild = append(a.wild, o)
		} else {
			a.exact[o] = true
		}
		a.names = append(a.names, raw)
	}
	return a, nil
}

// Check returns an error saying why raw may not be a pool's apiUrl, nil
// when the list allows it.
func (a *AllowList) Check(raw string) error {
	o, err := parseOrigin(raw, false)
	if err != nil {
		return err
	}
	if a.allows(o) {
		return nil
	}
	if len(a.names) == 0 {
		return fmt.Errorf("apiUrl %s is not allowed: the operator allows no server (give it --default-api-url or --allowed-api-url)", raw)
	}
	return fmt.Errorf("apiUrl %s is not allowed by the operator (--allowed-api-url): allowed are %s", raw, strings.Join(a.names, ", "))
}

func (a *AllowList) allows(o origin) bool {
	if a == nil {
		return false
	}
	if a.exact[o] {
		return true
	}
	for _, w := range a.wild {
		label, ok := strings.CutSuffix(o.host, "."+w.host)
		if ok && w.scheme == o.scheme && w.port == o.port && label != "" && !strings.Contains(label, ".") {
			return true
		}
	}
	return false
}

// parseOrigin parses an http:// or https:// origin; wildcard allows a
// host of the form *.rest.
func parseOrigin(raw string, wildcard bool) (origin, error) {
	fail := func(why string) (origin, error) {
		return origin{}, fmt.Errorf("%q is not a server origin (scheme://host[:port]): %s", raw, why)
	}
	u, err := url.Parse(raw)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return fail(err.Error())
	}
	scheme := strings.ToLower(u.Scheme)
	switch {
	case scheme != "http" && scheme != "https":
		return fail("the scheme must be http or https")
	case u.Opaque != "" || u.Host == "":
		return fail("it has no host")
	case u.User != nil:
		return fail("it must not hold a user or password")
	case u.Path != "" && u.Path != "/" || u.RawPath != "":
		return fail("it must not have a path")
	case u.RawQuery != "" || u.ForceQuery:
		return fail("it must not have a query")
	case u.Fragment != "" || strings.Contains(raw, "#"):
		return fail("it must not have a fragment")
	}
	host := strings.TrimSuffix(strings.ToLower(u.Hostname()), ".")
	if host == "" {
		return fail("it has no host")
	}
	if strings.Contains(host, "*") {
		rest, ok := strings.CutPrefix(host, "*.")
		switch {
		case !wildcard:
			return fail("a wildcard is allowed only in the operator's --allowed-api-url")
		case !ok || strings.Contains(rest, "*"):
			return fail("a wildcard must be the host's whole first label (*.example.com)")
		case !strings.Contains(rest, ".") || net.ParseIP(rest) != nil:
			return fail("a wildcard needs a domain of at least two labels after it (*.example.com)")
		}
	}
	port := u.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[scheme]
	} else if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return fail("the port must be from 1 to 65535")
	} else {
		port = strconv.Itoa(n) // :0443 is :443
	}
	return origin{scheme: scheme, host: host, port: port}, nil
}
