package netpolicy

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/outpost-sh/outpost/api"
)

func rules(rs ...api.NetworkPolicyRule) api.NetworkPolicy {
	return api.NetworkPolicy{Enabled: true, Allow: rs}
}

func host(h string, ports ...int) api.NetworkPolicyRule {
	return api.NetworkPolicyRule{Hostname: h, Ports: ports}
}

func v4(s string, ports ...int) api.NetworkPolicyRule {
	return api.NetworkPolicyRule{IPv4: s, Ports: ports}
}

func v6(s string, ports ...int) api.NetworkPolicyRule {
	return api.NetworkPolicyRule{IPv6: s, Ports: ports}
}

func TestValidate(t *testing.T) {
	t.Parallel()
	tooMany := make([]api.NetworkPolicyRule, api.MaxNetworkPolicyRules+1)
	for i := range tooMany {
		tooMany[i] = host("a.example.test")
	}
	manyPorts := make([]int, api.MaxNetworkPolicyPorts+1)
	for i := range manyPorts {
		manyPorts[i] = i + 1
	}
	for _, tc := range []struct {
		name string
		p    api.NetworkPolicy
		want string // "" for valid; else a part of the error
	}{
		{"empty disabled", api.NetworkPolicy{}, ""},
		{"empty enabled", rules(), ""},
		{"name", rules(host("api.example.test")), ""},
		{"single label", rules(host("localhost")), ""},
		{"glob", rules(host("*.example.test", 443)), ""},
		{"glob of a tld", rules(host("*.test")), ""},
		{"upper and trailing dot", rules(host("API.Example.TEST.")), ""},
		{"underscore", rules(host("_dmarc.example.test")), ""},
		{"v4 address", rules(v4("10.1.2.3")), ""},
		{"v4 cidr", rules(v4("10.1.0.0/16", 80, 443)), ""},
		{"v4 cidr host bits", rules(v4("10.1.2.3/16")), ""},
		{"v6 cidr", rules(v6("fd00::/8")), ""},
		{"v6 address", rules(v6("2001:db8::1")), ""},
		{"none set", rules(api.NetworkPolicyRule{Ports: []int{80}}), `allow[0]: set exactly one of "hostname", "ipv4" and "ipv6"`},
		{"two set", rules(host("a.test"), api.NetworkPolicyRule{Hostname: "a.test", IPv4: "10.0.0.1"}), "allow[1]: set exactly one"},
		{"ip in hostname", rules(host("10.0.0.1")), "allow[0]: hostname \"10.0.0.1\" is an IP address; use an ipv4 or ipv6 rule"},
		{"v6 in hostname", rules(host("[::1]")), "is an IP address"},
		{"numeric tld", rules(host("1.2.3")), "numeric label"},
		{"bare star", rules(host("*")), "names no domain"},
		{"star dot", rules(host("*.")), "names no domain"},
		{"inner star", rules(host("a.*.example.test")), `may hold "*" only as its whole first label`},
		{"partial star", rules(host("a*.example.test")), "only letters, digits"},
		{"double glob", rules(host("*.*.example.test")), `"*" only as its whole first label`},
		{"empty label", rules(host("a..test")), "empty label"},
		{"hyphen", rules(host("-a.test")), "starts or ends with '-'"},
		{"space", rules(host("a b.test")), "only letters, digits"},
		{"long label", rules(host(strings.Repeat("a", 64) + ".test")), "longer than 63"},
		{"long name", rules(host(strings.Repeat("a.", 127) + "test")), "longer than 253"},
		{"v6 in ipv4", rules(v4("fd00::/8")), `allow[0]: ipv4 "fd00::/8": is not IPv4; use an ipv6 rule`},
		{"v4 in ipv6", rules(v6("10.0.0.0/8")), "is not IPv6"},
		{"mapped in ipv6", rules(v6("::ffff:10.0.0.1")), "IPv4-mapped"},
		{"bad cidr", rules(v4("10.0.0.0/33")), "is not an address or CIDR range"},
		{"name in ipv4", rules(v4("example.test")), "is not an address"},
		{"zone", rules(v6("fe80::1%eth0")), "zone"},
		{"port 0", rules(host("a.test", 0)), "port 0 is not between 1 and 65535"},
		{"port high", rules(v4("10.0.0.1", 65536)), "port 65536"},
		{"many ports", rules(host("a.test", manyPorts...)), "at most 100"},
		{"too many rules", rules(tooMany...), "1001 allow rules; at most 1000"},
		{"disabled still checked", api.NetworkPolicy{Allow: []api.NetworkPolicyRule{host("10.0.0.1")}}, "IP address"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := Validate(tc.p)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("Validate: %v", err)
			case tc.want != "" && err == nil:
				t.Fatalf("Validate accepted %+v", tc.p)
			case tc.want != "" && !strings.Contains(err.Error(), tc.want):
				t.Fatalf("Validate: %v, want it to say %q", err, tc.want)
			}
		})
	}
}

func TestNormalize(t *testing.T) {
	t.Parallel()
	got, err := Normalize(rules(host("API.Example.TEST."), v4("10.1.2.3/16", 443, 80, 443), v6("2001:DB8::1"), v6("2001:db8::/32")))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(got)
	want := `{"enabled":true,"allow":[{"hostname":"api.example.test"},{"ipv4":"10.1.0.0/16","ports":[80,443]},{"ipv6":"2001:db8::1"},{"ipv6":"2001:db8::/32"}]}`
	if string(b) != want {
		t.Fatalf("Normalize = %s\nwant %s", b, want)
	}
	empty, _ := Normalize(api.NetworkPolicy{Enabled: true})
	if b, _ := json.Marshal(empty); string(b) != `{"enabled":true,"allow":[]}` {
		t.Fatalf("Normalize of no rules = %s", b)
	}
}

func TestMatcher(t *testing.T) {
	t.Parallel()
	m, err := Compile(rules(
		host("*.example.test"),
		host("api.other.test", 443),
		v4("10.1.0.0/16", 443),
		v4("192.0.2.7"),
		v6("fd00::/8"),
	))
	if err != nil {
		t.Fatal(err)
	}
	if !m.Restricted() {
		t.Fatal("Restricted() = false")
	}
	for _, tc := range []struct {
		host string
		port uint16
		rule string
	}{
		{"a.example.test", 80, "hostname *.example.test"},
		{"a.b.example.test", 22, "hostname *.example.test"},
		{"A.Example.Test.", 443, "hostname *.example.test"},
		{"example.test", 443, ""},
		{"badexample.test", 443, ""},
		{"example.test.evil", 443, ""},
		{"api.other.test", 443, "hostname api.other.test ports 443"},
		{"API.OTHER.TEST", 443, "hostname api.other.test ports 443"},
		{"api.other.test", 80, ""},
		{"x.api.other.test", 443, ""},
		{"", 443, ""},
		{".", 443, ""},
		{"10.1.0.1", 443, ""},
		{"a..example.test", 443, ""},
		{"evil.test\x00.example.test", 443, ""},
		{"evil.test/.example.test", 443, ""},
		{"a b.example.test", 443, ""},
		{"ä.example.test", 443, ""},
		{"xn--4ca.example.test", 443, "hostname *.example.test"},
		{strings.Repeat("a", 64) + ".example.test", 443, ""},
		{strings.Repeat("a.", 125) + "example.test", 443, ""},
	} {
		rule, ok := m.AllowName(tc.host, tc.port)
		if rule != tc.rule || ok != (tc.rule != "") {
			t.Errorf("AllowName(%q, %d) = %q, %v; want %q", tc.host, tc.port, rule, ok, tc.rule)
		}
	}
	for _, tc := range []struct {
		addr string
		port uint16
		rule string
	}{
		{"10.1.255.255", 443, "ipv4 10.1.0.0/16 ports 443"},
		{"::ffff:10.1.0.9", 443, "ipv4 10.1.0.0/16 ports 443"},
		{"10.1.0.1", 80, ""},
		{"10.2.0.1", 443, ""},
		{"192.0.2.7", 1, "ipv4 192.0.2.7"},
		{"192.0.2.8", 1, ""},
		{"fd12::1", 53, "ipv6 fd00::/8"},
		{"fe80::1", 53, ""},
		{"::1", 53, ""},
	} {
		rule, ok := m.AllowAddr(netip.MustParseAddr(tc.addr), tc.port)
		if rule != tc.rule || ok != (tc.rule != "") {
			t.Errorf("AllowAddr(%s, %d) = %q, %v; want %q", tc.addr, tc.port, rule, ok, tc.rule)
		}
	}
	if _, ok := m.AllowAddr(netip.Addr{}, 443); ok {
		t.Error("AllowAddr allowed the zero address")
	}
}

func TestMatcherUnrestricted(t *testing.T) {
	t.Parallel()
	for _, m := range []*Matcher{nil, mustCompile(t, api.NetworkPolicy{Allow: []api.NetworkPolicyRule{host("a.test")}})} {
		if m.Restricted() {
			t.Fatal("Restricted() = true for a disabled policy")
		}
		if rule, ok := m.AllowName("anything.test", 1); !ok || rule != "" {
			t.Errorf("AllowName = %q, %v", rule, ok)
		}
		if rule, ok := m.AllowAddr(netip.MustParseAddr("8.8.8.8"), 1); !ok || rule != "" {
			t.Errorf("AllowAddr = %q, %v", rule, ok)
		}
	}
	// Enabled with no rules: nothing.
	m := mustCompile(t, rules())
	if _, ok := m.AllowName("a.test", 443); ok {
		t.Error("an empty restricted policy allowed a name")
	}
	if _, ok := m.AllowAddr(netip.MustParseAddr("10.0.0.1"), 443); ok {
		t.Error("an empty restricted policy allowed an address")
	}
}

func TestCompileRefusesInvalid(t *testing.T) {
	t.Parallel()
	if m, err := Compile(rules(host("a.test"), v4("nope"))); err == nil || m != nil || !strings.Contains(err.Error(), "allow[1]") {
		t.Fatalf("Compile = %v, %v", m, err)
	}
}

func mustCompile(t *testing.T, p api.NetworkPolicy) *Matcher {
	t.Helper()
	m, err := Compile(p)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestWithin(t *testing.T) {
	t.Parallel()
	outer := rules(host("*.example.test"), host("api.other.test", 443), v4("10.1.0.0/16", 80, 443), v4("10.1.0.0/16", 8080), v6("fd00::/8"))
	for _, tc := range []struct {
		name         string
		outer, inner api.NetworkPolicy
		want         string
	}{
		{"unrestricted outer admits unrestricted", api.NetworkPolicy{}, api.NetworkPolicy{}, ""},
		{"unrestricted outer admits anything", api.NetworkPolicy{}, rules(v4("0.0.0.0/0")), ""},
		{"same", outer, outer, ""},
		{"empty inner", outer, rules(), ""},
		{"name under glob", outer, rules(host("a.example.test", 22)), ""},
		{"glob under glob", outer, rules(host("*.a.example.test")), ""},
		{"equal name with ports", outer, rules(host("API.other.test", 443)), ""},
		{"sub range", outer, rules(v4("10.1.2.0/24", 443)), ""},
		{"ports across two outer rules", outer, rules(v4("10.1.2.3", 443, 8080)), ""},
		{"v6 sub range", outer, rules(v6("fd12::/16")), ""},
		{"restricted refuses unrestricted", outer, api.NetworkPolicy{}, "unrestricted, which widens"},
		{"glob domain itself", outer, rules(host("example.test")), "allow[0] (hostname example.test) is not within"},
		{"glob equal to outer glob", outer, rules(host("*.example.test")), ""},
		{"wider glob", outer, rules(host("*.test")), "allow[0] (hostname *.test)"},
		{"name port widened", outer, rules(host("api.other.test")), "allow[0] (hostname api.other.test)"},
		{"name other port", outer, rules(host("api.other.test", 80)), "ports 80"},
		{"wider range", outer, rules(host("a.example.test"), v4("10.0.0.0/8", 443)), "allow[1] (ipv4 10.0.0.0/8 ports 443)"},
		{"range all ports", outer, rules(v4("10.1.0.1")), "allow[0] (ipv4 10.1.0.1)"},
		{"range port outside", outer, rules(v4("10.1.0.1", 22)), "ports 22"},
		{"kind mismatch", rules(v4("0.0.0.0/0")), rules(v6("::/0")), "allow[0] (ipv6 ::/0)"},
		{"name not by address", rules(v4("0.0.0.0/0")), rules(host("a.test")), "hostname a.test"},
		{"invalid inner", outer, rules(host("10.0.0.1")), "IP address"},
		{"invalid outer", rules(host("10.0.0.1")), rules(), "outer network policy"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := Within(tc.outer, tc.inner)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("Within: %v", err)
			case tc.want != "" && err == nil:
				t.Fatal("Within accepted it")
			case tc.want != "" && !strings.Contains(err.Error(), tc.want):
				t.Fatalf("Within: %v, want it to say %q", err, tc.want)
			}
		})
	}
}

func TestEffective(t *testing.T) {
	t.Parallel()
	o, s, off := rules(host("a.test")), rules(host("b.test")), &api.NetworkPolicy{}
	for _, tc := range []struct {
		outpost, session, want *api.NetworkPolicy
	}{
		{nil, nil, nil},
		{&o, nil, &o},
		{&o, &s, &s},
		{nil, &s, &s},
		{&o, off, nil},
		{off, nil, nil},
		{off, &s, &s},
	} {
		if got := Effective(tc.outpost, tc.session); got != tc.want {
			t.Errorf("Effective(%v, %v) = %v, want %v", tc.outpost, tc.session, got, tc.want)
		}
	}
}

// FuzzPolicy feeds arbitrary JSON policies through Validate, Compile and
// the Matcher: none may panic, Compile must accept exactly what Validate
// accepts, a normalized policy must stay as it is when normalized again,
// and a valid policy is always within itself.
func FuzzPolicy(f *testing.F) {
	for _, s := range []string{
		`{"enabled":true,"allow":[{"hostname":"*.example.test"},{"ipv4":"10.1.0.0/16","ports":[443]},{"ipv6":"fd00::/8"}]}`,
		`{"enabled":true,"allow":[{"hostname":"10.0.0.1"}]}`,
		`{"enabled":false,"allow":[{"ipv6":"::ffff:1.2.3.4/120"}]}`,
		`{"enabled":true,"allow":[{"hostname":"A.B.","ports":[0,1,65535]}]}`,
		`{"enabled":true,"allow":[{"hostname":"*.*"},{"ipv4":"1.2.3.4/0"}]}`,
	} {
		f.Add([]byte(s), "a.example.test", "10.1.2.3", uint16(443))
	}
	f.Fuzz(func(t *testing.T, data []byte, name, addr string, port uint16) {
		var p api.NetworkPolicy
		if json.Unmarshal(data, &p) != nil {
			return
		}
		verr := Validate(p)
		m, cerr := Compile(p)
		if (verr == nil) != (cerr == nil) {
			t.Fatalf("Validate: %v; Compile: %v", verr, cerr)
		}
		if cerr != nil {
			return
		}
		n, err := Normalize(p)
		if err != nil {
			t.Fatalf("Normalize: %v", err)
		}
		n2, err := Normalize(n)
		if err != nil {
			t.Fatalf("Normalize of its result: %v", err)
		}
		a, _ := json.Marshal(n)
		b, _ := json.Marshal(n2)
		if string(a) != string(b) {
			t.Fatalf("Normalize is not stable: %s then %s", a, b)
		}
		if err := Within(p, p); err != nil {
			t.Fatalf("a policy is not within itself: %v", err)
		}
		if rule, ok := m.AllowName(name, port); ok && m.Restricted() {
			h := strings.ToLower(strings.TrimSuffix(name, "."))
			if rule == "" || normalizeHostnameOK(h) != nil {
				t.Fatalf("AllowName(%q) allowed a name that is no DNS name (rule %q)", name, rule)
			}
		}
		if a, err := netip.ParseAddr(addr); err == nil {
			rule, ok := m.AllowAddr(a, port)
			if ok && m.Restricted() && rule == "" {
				t.Fatal("an allowed address names no rule")
			}
		}
	})
}

func TestEventText(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		ev   api.Event
		want string
	}{
		{api.Event{Decision: "deny", Protocol: "tcp", Host: "api.example.test", Address: "10.1.2.3", Port: 443, Rule: "no rule allows it", Count: 3},
			"deny tcp api.example.test (10.1.2.3:443): no rule allows it ×3"},
		{api.Event{Decision: "allow", Protocol: "tcp", Address: "fd00::1", Port: 22, Rule: "ipv6 fd00::/8", BytesOut: 517, BytesIn: 4096},
			"allow tcp [fd00::1]:22 by ipv6 fd00::/8, 517 B out, 4.0 KiB in"},
		{api.Event{Decision: "deny", Protocol: "dns", Host: "evil.test"}, "deny dns evil.test"},
		{api.Event{Decision: "deny", Protocol: "tcp", Rule: "too many distinct destinations to list each", Count: 5000},
			"deny tcp other destinations: too many distinct destinations to list each ×5000"},
	} {
		if got := EventText(tc.ev); got != tc.want {
			t.Errorf("EventText = %q, want %q", got, tc.want)
		}
	}
}

// normalizeHostnameOK checks an allowed host as a hostname rule would be
// checked (without a glob).
func normalizeHostnameOK(h string) error {
	_, err := normalizeHostname(h)
	return err
}

// TestAllowNamePortZeroIsAnyPort: a name allowed only on some ports is
// still resolvable (a DNS question carries no port), and port 0 never
// widens an address rule.
func TestAllowNamePortZeroIsAnyPort(t *testing.T) {
	m, err := Compile(api.NetworkPolicy{Enabled: true, Allow: []api.NetworkPolicyRule{
		{Hostname: "a.test", Ports: []int{443}},
		{IPv4: "10.0.0.0/8", Ports: []int{443}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := m.AllowName("a.test", 0); !ok {
		t.Error("AllowName(a.test, 0) refused a name some rule allows")
	}
	if _, ok := m.AllowName("a.test", 80); ok {
		t.Error("AllowName(a.test, 80) allowed a port no rule lists")
	}
	if _, ok := m.AllowName("b.test", 0); ok {
		t.Error("AllowName(b.test, 0) allowed a name no rule lists")
	}
	if _, ok := m.AllowAddr(netip.MustParseAddr("10.1.2.3"), 0); ok {
		t.Error("AllowAddr(.., 0) allowed a port no rule lists")
	}
}

func TestCheckRequest(t *testing.T) {
	got, err := CheckRequest(api.NetworkAccessRequestArgs{Domains: []string{"API.Example.test.", "*.b.test", "api.example.test"}, Reason: "fixtures"})
	if err != nil || !slices.Equal(got, []string{"api.example.test", "*.b.test"}) {
		t.Fatalf("CheckRequest = %v, %v", got, err)
	}
	many := make([]string, api.MaxNetworkRequestDomains+1)
	for i := range many {
		many[i] = fmt.Sprintf("h%d.test", i)
	}
	for _, bad := range []api.NetworkAccessRequestArgs{
		{Reason: "r"},
		{Domains: []string{"a.test"}, Reason: " "},
		{Domains: []string{"10.0.0.1"}, Reason: "r"},
		{Domains: []string{"*"}, Reason: "r"},
		{Domains: []string{"a..test"}, Reason: "r"},
		{Domains: many, Reason: "r"},
		{Domains: []string{"a.test"}, Reason: strings.Repeat("x", api.MaxNetworkRequestReason+1)},
	} {
		if _, err := CheckRequest(bad); err == nil {
			t.Errorf("CheckRequest(%+v) accepted it", bad)
		}
	}
}

func TestAllowHostnames(t *testing.T) {
	p := api.NetworkPolicy{Enabled: false, Allow: []api.NetworkPolicyRule{{Hostname: "a.test", Ports: []int{443}}, {Hostname: "b.test"}}}
	got, err := AllowHostnames(p, []string{"a.test", "b.test", "*.c.test"})
	if err != nil {
		t.Fatal(err)
	}
	want := []api.NetworkPolicyRule{{Hostname: "a.test", Ports: []int{443}}, {Hostname: "b.test"}, {Hostname: "a.test"}, {Hostname: "*.c.test"}}
	if !got.Enabled || !reflect.DeepEqual(got.Allow, want) {
		t.Fatalf("AllowHostnames = %+v", got)
	}
	if len(p.Allow) != 2 {
		t.Fatal("AllowHostnames changed its argument")
	}
	full := api.NetworkPolicy{Enabled: true}
	for i := range api.MaxNetworkPolicyRules {
		full.Allow = append(full.Allow, api.NetworkPolicyRule{Hostname: fmt.Sprintf("h%d.test", i)})
	}
	if _, err := AllowHostnames(full, []string{"x.test"}); err == nil {
		t.Fatal("AllowHostnames went past the rule limit")
	}
}

func TestRequestText(t *testing.T) {
	for _, c := range []struct {
		r    api.NetworkRequest
		want string
	}{
		{api.NetworkRequest{ID: "3", State: api.NetworkRequestPending, Domains: []string{"a.test", "*.b.test"}, Reason: "fixtures"},
			`network request 3 pending: a.test, *.b.test — "fixtures"`},
		{api.NetworkRequest{ID: "3", State: api.NetworkRequestGranted, Scope: api.NetworkGrantOutpost, AnsweredBy: "tok_1"},
			"network request 3 granted for the outpost by tok_1"},
		{api.NetworkRequest{ID: "3", State: api.NetworkRequestDenied, AnsweredBy: "tok_1", Answer: "use the mirror"},
			"network request 3 denied by tok_1: use the mirror"},
	} {
		if got := RequestText(c.r); got != c.want {
			t.Errorf("RequestText = %q, want %q", got, c.want)
		}
	}
}
