//go:build !windows

package operator

import (
	"strings"
	"testing"
)

// TestAllowList: a pool's apiUrl is allowed only as an origin equal to an
// allowed one (scheme, host and port; default ports spelled or not, host
// case and a final dot ignored), or one label under an https wildcard;
// anything carrying more than an origin is refused whatever the list.
func TestAllowList(t *testing.T) {
	t.Parallel()
	a, err := NewAllowList("https://outpost.example.com", "http://outpost.svc.cluster.local:7420",
		"https://*.outposts.example.org", "https://[::1]:8443")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		url string
		ok  bool
		why string // in the error when refused
	}{
		{"https://outpost.example.com", true, ""},
		{"https://outpost.example.com/", true, ""},
		{"https://outpost.example.com:443", true, ""},
		{"https://OUTPOST.Example.com", true, ""},
		{"https://outpost.example.com.", true, ""},
		{"http://outpost.example.com", false, "not allowed"},             // http is not https
		{"https://outpost.example.com:8443", false, "not allowed"},       // another port
		{"https://outpost.example.com.evil.io", false, "not allowed"},    // a suffix is not the host
		{"https://evil-outpost.example.com", false, "not allowed"},       // nor a prefix
		{"http://outpost.svc.cluster.local:7420", true, ""},              //
		{"http://outpost.svc.cluster.local", false, "not allowed"},       // port 80 is not 7420
		{"https://outpost.svc.cluster.local:7420", false, "not allowed"}, // https is not http
		{"https://a.outposts.example.org", true, ""},
		{"https://a.outposts.example.org:443", true, ""},
		{"https://a.b.outposts.example.org", false, "not allowed"},    // one label only
		{"https://outposts.example.org", false, "not allowed"},        // the wildcard needs a label
		{"http://a.outposts.example.org", false, "not allowed"},       // the wildcard is https
		{"https://a.outposts.example.org:8443", false, "not allowed"}, // and port 443
		{"https://aoutposts.example.org", false, "not allowed"},
		{"https://[::1]:8443", true, ""},
		{"https://[::1]", false, "not allowed"},
		{"https://*.outposts.example.org", false, "wildcard"}, // a pool cannot name a wildcard
		{"https://user@outpost.example.com", false, "user or password"},
		{"https://user:pw@outpost.example.com", false, "user or password"},
		{"https://outpost.example.com/api", false, "path"},
		{"https://outpost.example.com/%2e%2e", false, "path"},
		{"https://outpost.example.com?x=1", false, "query"},
		{"https://outpost.example.com?", false, "query"},
		{"https://outpost.example.com#frag", false, "fragment"},
		{"https://outpost.example.com:0", false, "port"},
		{"https://outpost.example.com:99999", false, "port"},
		{"ftp://outpost.example.com", false, "scheme"},
		{"outpost.example.com", false, "scheme"},
		{"https:outpost.example.com", false, "no host"},
		{"https://", false, "no host"},
		{"https://out post.example.com", false, "invalid character"},
		{"", false, "scheme"},
	} {
		err := a.Check(tc.url)
		switch {
		case tc.ok && err != nil:
			t.Errorf("Check(%q) = %v, want allowed", tc.url, err)
		case !tc.ok && err == nil:
			t.Errorf("Check(%q) allowed it, want refused (%s)", tc.url, tc.why)
		case !tc.ok && !strings.Contains(err.Error(), tc.why):
			t.Errorf("Check(%q) = %v, want an error about %q", tc.url, err, tc.why)
		}
	}
}

// TestAllowListRefusesBadEntries: the operator's own list must hold
// origins, and wildcards only as a whole first label of a real domain.
func TestAllowListRefusesBadEntries(t *testing.T) {
	t.Parallel()
	for _, bad := range []string{
		"https://outpost.example.com/api", "https://u@outpost.example.com", "https://outpost.example.com?a",
		"ftp://outpost.example.com", "outpost.example.com", "https://*", "https://*.com", "https://a.*.example.com",
		"https://*a.example.com", "https://*.*.example.com", "https://*.127.0.0.1", "https://x.com:70000",
	} {
		if _, err := NewAllowList(bad); err == nil {
			t.Errorf("NewAllowList(%q) accepted it", bad)
		}
	}
}

// TestEmptyAllowListRefusesAll: with nothing allowed every URL is refused,
// and the error says how to allow one.
func TestEmptyAllowListRefusesAll(t *testing.T) {
	t.Parallel()
	a, err := NewAllowList()
	if err != nil {
		t.Fatal(err)
	}
	err = a.Check("https://outpost.example.com")
	if err == nil || !strings.Contains(err.Error(), "--default-api-url") {
		t.Fatalf("Check = %v, want a refusal naming --default-api-url", err)
	}
}
