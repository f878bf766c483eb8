package netpolicy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/outpost-sh/outpost/api"
)

// CheckRequest validates the arguments of a network access request and
// returns its domains normalized as hostname rules are (lower-case, no
// trailing dot), in the order given, without duplicates.
func CheckRequest(a api.NetworkAccessRequestArgs) ([]string, error) {
	switch {
	case len(a.Domains) == 0:
		return nil, errors.New("domains is empty; name at least one host name or *. wildcard")
	case len(a.Domains) > api.MaxNetworkRequestDomains:
		return nil, fmt.Errorf("domains names %d domains; at most %d are allowed in one request", len(a.Domains), api.MaxNetworkRequestDomains)
	case strings.TrimSpace(a.Reason) == "":
		return nil, errors.New("reason is empty; say why the task needs these domains")
	case len(a.Reason) > api.MaxNetworkRequestReason:
		return nil, fmt.Errorf("reason is %d bytes long; at most %d are allowed", len(a.Reason), api.MaxNetworkRequestReason)
	case !utf8.ValidString(a.Reason):
		return nil, errors.New("reason is not valid UTF-8")
	}
	out := make([]string, 0, len(a.Domains))
	for i, d := range a.Domains {
		h, err := normalizeHostname(d)
		if err != nil {
			return nil, fmt.Errorf("domains[%d]: %w", i, err)
		}
		if !slices.Contains(out, h) {
			out = append(out, h)
		}
	}
	return out, nil
}

// AllowHostnames returns a copy of p, enabled, with a hostname rule (any
// port) for each domain it does not already name that way, normalized.
// It fails when the result would hold more rules than a policy may.
func AllowHostnames(p api.NetworkPolicy, domains []string) (api.NetworkPolicy, error) {
	out := api.NetworkPolicy{Enabled: true, Allow: slices.Clone(p.Allow)}
	for _, d := range domains {
		if !slices.ContainsFunc(out.Allow, func(r api.NetworkPolicyRule) bool { return r.Hostname == d && len(r.Ports) == 0 }) {
			out.Allow = append(out.Allow, api.NetworkPolicyRule{Hostname: d})
		}
	}
	return Normalize(out)
}

// ParseRequest decodes the arguments of a network access request strictly
// (no unknown fields) and checks them (CheckRequest); the result holds the
// normalized domains.
func ParseRequest(raw json.RawMessage) (api.NetworkAccessRequestArgs, error) {
	var a api.NetworkAccessRequestArgs
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&a); err != nil {
		return api.NetworkAccessRequestArgs{}, fmt.Errorf("the arguments are not a network access request: %w", err)
	}
	domains, err := CheckRequest(a)
	if err != nil {
		return api.NetworkAccessRequestArgs{}, err
	}
	a.Domains = domains
	return a, nil
}
