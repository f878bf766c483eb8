package web

import (
	"encoding/json"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/outpost-sh/outpost/api"
)

// TestPolicyForm: the editor's form becomes the policy it shows: blank
// rows and removed rows left out, ports split on commas and spaces, and a
// wrong row named as the page counts it while the rows sent come back.
func TestPolicyForm(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		form string
		want string // the policy's JSON, or "error: " and a part of the error
		rows int
	}{
		{"three kinds", "enabled=1&kind=hostname&value=+a.example.test+&ports=443,+80&kind=ipv4&value=10.0.0.0/8&ports=&kind=ipv6&value=fd00::/8&ports=53+853&kind=hostname&value=&ports=",
			`{"enabled":true,"allow":[{"hostname":"a.example.test","ports":[443,80]},{"ipv4":"10.0.0.0/8"},{"ipv6":"fd00::/8","ports":[53,853]}]}`, 3},
		{"disabled keeps its rules", "kind=hostname&value=a.example.test&ports=", `{"enabled":false,"allow":[{"hostname":"a.example.test"}]}`, 1},
		{"nothing", "enabled=1", `{"enabled":true,"allow":[]}`, 0},
		{"removed", "enabled=1&kind=hostname&value=a.test&ports=&kind=hostname&value=b.test&ports=&remove=0&remove=x&remove=9", `{"enabled":true,"allow":[{"hostname":"b.test"}]}`, 1},
		{"bad port", "enabled=1&kind=hostname&value=a.test&ports=&kind=ipv4&value=10.0.0.1&ports=8o", `error: rule 2 (10.0.0.1): port "8o" is not a number`, 2},
		{"port out of range", "enabled=1&kind=ipv4&value=10.0.0.1&ports=0", `error: rule 1 (10.0.0.1): port 0 is not between 1 and 65535`, 1},
		{"ports without address", "enabled=1&kind=ipv4&value=&ports=443", `error: rule 1 (): ports need a host name or an address range`, 1},
		{"unknown kind", "enabled=1&kind=mac&value=aa:bb&ports=", `error: rule 1 (aa:bb): choose a kind`, 1},
		{"address as host name", "enabled=1&kind=hostname&value=10.0.0.1&ports=", `error: rule 1 (10.0.0.1): hostname "10.0.0.1" is an IP address`, 1},
		{"rows cut short", "enabled=1&kind=ipv4&kind=ipv4&value=10.0.0.1&ports=", `error: the form's rules are incomplete`, 0},
	} {
		r := httptest.NewRequest("POST", "/", strings.NewReader(tc.form))
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		p, rows, err := policyForm(r)
		got := ""
		if err != nil {
			got = "error: " + err.Error()
			if p != nil {
				t.Errorf("%s: a policy with the error %v", tc.name, err)
			}
		} else {
			b, _ := json.Marshal(p)
			got = string(b)
		}
		if !strings.Contains(got, tc.want) || (err == nil) != !strings.HasPrefix(tc.want, "error: ") {
			t.Errorf("%s: %s, want %s", tc.name, got, tc.want)
		}
		if len(rows) != tc.rows {
			t.Errorf("%s: %d rows back, want %d", tc.name, len(rows), tc.rows)
		}
	}
	// More rows than a policy may hold (and its blank row) are refused
	// before any is read.
	f := url.Values{"enabled": {"1"}}
	for range api.MaxNetworkPolicyRules + 2 {
		f.Add("kind", "ipv4")
		f.Add("value", "10.0.0.1")
		f.Add("ports", "")
	}
	r := httptest.NewRequest("POST", "/", strings.NewReader(f.Encode()))
	r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if _, _, err := policyForm(r); err == nil || !strings.Contains(err.Error(), "at most 1000 rules") {
		t.Fatalf("too many rows: %v", err)
	}
}

// TestRowsOf: a stored policy's rules become the form's rows, ports
// joined, and back again.
func TestRowsOf(t *testing.T) {
	t.Parallel()
	p := &api.NetworkPolicy{Enabled: true, Allow: []api.NetworkPolicyRule{
		{Hostname: "*.example.test", Ports: []int{80, 443}}, {IPv4: "10.1.0.0/16"}, {IPv6: "fd00::1"}}}
	rows := rowsOf(p)
	want := []ruleRow{{"hostname", "*.example.test", "80, 443"}, {"ipv4", "10.1.0.0/16", ""}, {"ipv6", "fd00::1", ""}}
	if len(rows) != len(want) {
		t.Fatalf("rows %+v", rows)
	}
	f := url.Values{"enabled": {"1"}}
	for i := range want {
		if rows[i] != want[i] {
			t.Errorf("row %d: %+v, want %+v", i, rows[i], want[i])
		}
		f.Add("kind", rows[i].Kind)
		f.Add("value", rows[i].Value)
		f.Add("ports", rows[i].Ports)
	}
	r := httptest.NewRequest("POST", "/", strings.NewReader(f.Encode()))
	r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	back, _, err := policyForm(r)
	if err != nil {
		t.Fatal(err)
	}
	a, _ := json.Marshal(back)
	b, _ := json.Marshal(p)
	if string(a) != string(b) {
		t.Fatalf("round trip %s, want %s", a, b)
	}
	if rowsOf(nil) != nil {
		t.Fatal("rows of no policy")
	}
}
