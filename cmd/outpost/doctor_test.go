package main

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/client"
	"github.com/outpost-sh/outpost/internal/doctor"
	"github.com/outpost-sh/outpost/internal/server"
	"github.com/outpost-sh/outpost/internal/servertest"
	"github.com/outpost-sh/outpost/internal/tlsconfig/tlstest"
)

const doctorAdmin = "opt_cli-doctor-admin-token"

// startDoctorServer runs a real server in process, serving TLS with cert
// and key when they are set.
func startDoctorServer(t *testing.T, cert, key string) *server.Server {
	t.Helper()
	return servertest.Start(t, server.Options{TLSCertFile: cert, TLSKeyFile: key, AdminToken: doctorAdmin}).Server
}

// runDoctorJSON runs `outpost doctor -o json` with env and args, and
// returns its exit status, report and stderr.
func runDoctorJSON(t *testing.T, env map[string]string, args ...string) (int, doctorReport, string) {
	t.Helper()
	tf := newTestFactory(t, env)
	code := tf.run(t, append([]string{"doctor", "-o", "json", "--dir", t.TempDir()}, args...)...)
	var r doctorReport
	if err := json.Unmarshal(tf.out.Bytes(), &r); err != nil {
		t.Fatalf("doctor -o json printed %q: %v (stderr %q)", tf.out, err, tf.errOut)
	}
	if r.OK != (code == 0) {
		t.Errorf("ok is %v but the exit status %d", r.OK, code)
	}
	return code, r, tf.errOut.String()
}

func check(t *testing.T, r doctorReport, name string) doctor.Check {
	t.Helper()
	for _, c := range r.Checks {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("no %s check in %+v", name, r.Checks)
	return doctor.Check{}
}

// TestDoctorToken checks tokens against a real server: who a token is,
// its scopes, the outpost it may serve; a bad, revoked or missing token
// fails with the reason.
func TestDoctorToken(t *testing.T) {
	t.Parallel()
	srv := startDoctorServer(t, "", "")
	ctx := t.Context()
	admin, err := client.New(srv.URL(), doctorAdmin)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"box", "other"} {
		if _, err := admin.Outposts.Create(ctx, api.CreateOutpostRequest{Name: name, Platform: api.PlatformLinux}); err != nil {
			t.Fatal(err)
		}
	}
	token := func(name string, scope, outpost string) string {
		tok, err := admin.Tokens.Create(ctx, api.CreateTokenRequest{Name: name, Scopes: []string{scope}, Outpost: outpost, ExpiresInS: 3600})
		if err != nil {
			t.Fatal(err)
		}
		return tok.Secret
	}
	machine := token("box-1", api.ScopeMachine, "box")
	reader := token("reader", api.ScopeSessionsRead, "")
	revoked := token("gone", api.ScopeMachine, "")
	list, err := admin.Tokens.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, tok := range list.Items {
		if tok.Name == "gone" {
			if err := admin.Tokens.Revoke(ctx, tok.ID); err != nil {
				t.Fatal(err)
			}
		}
	}

	for _, tc := range []struct {
		name, token string
		args        []string
		code        int
		check       string
		status      doctor.Status
		want        []string
	}{
		{name: "machine token", token: machine, args: []string{"--outpost", "box"}, code: 0, check: "token", status: doctor.Warn,
			want: []string{`"box-1"`, "outposts.machine", "limited to outpost box", "expires in 5"}}, // 59 minutes, less under load
		{name: "its outpost", token: machine, args: []string{"--outpost", "box"}, code: 0, check: "outpost", status: doctor.OK,
			want: []string{"box (outpost_", "linux sessions"}},
		{name: "another outpost", token: machine, args: []string{"--outpost", "other"}, code: 1, check: "outpost", status: doctor.Fail,
			want: []string{`may not serve outpost "other"`, "limited to box"}},
		{name: "missing outpost", token: doctorAdmin, args: []string{"--outpost", "nope"}, code: 1, check: "outpost", status: doctor.Fail,
			want: []string{`outpost "nope" does not exist`}},
		{name: "no machine scope", token: reader, code: 1, check: "token", status: doctor.Fail,
			want: []string{"sessions.read", "without the outposts.machine scope"}},
		{name: "bad token", token: "opt_not-a-token", code: 1, check: "token", status: doctor.Fail, want: []string{"The API token is not valid."}},
		{name: "revoked", token: revoked, code: 1, check: "token", status: doctor.Fail, want: []string{"revoked"}},
		{name: "no token", code: 1, check: "token", status: doctor.Fail, want: []string{"no API token"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			env := map[string]string{"OUTPOST_SERVER": srv.URL(), "OUTPOST_TOKEN": tc.token}
			code, r, stderr := runDoctorJSON(t, env, tc.args...)
			c := check(t, r, tc.check)
			if code != tc.code || c.Status != tc.status {
				t.Errorf("exit %d, %s %s (%s); want %d, %s", code, tc.check, c.Status, c.Detail, tc.code, tc.status)
			}
			for _, w := range tc.want {
				if !strings.Contains(c.Detail, w) {
					t.Errorf("%s check %q lacks %q", tc.check, c.Detail, w)
				}
			}
			if c.Status != doctor.OK && c.Fix == "" {
				t.Errorf("%s check %s says no fix", tc.check, c.Status)
			}
			if code != 0 && !strings.Contains(stderr, "required check") {
				t.Errorf("stderr %q does not say a required check failed", stderr)
			}
			if server := check(t, r, "server"); server.Status != doctor.OK {
				t.Errorf("server check %+v", server)
			}
		})
	}

	// What scripts read.
	_, r, _ := runDoctorJSON(t, map[string]string{"OUTPOST_SERVER": srv.URL(), "OUTPOST_TOKEN": machine})
	if r.Server.Token == nil || r.Server.Token.Name != "box-1" || r.Server.Token.Outpost != "box" || r.Server.Token.ExpiresAt == nil ||
		len(r.Server.Token.Scopes) != 1 || r.Server.Token.Scopes[0] != api.ScopeMachine {
		t.Errorf("server.token: %+v", r.Server.Token)
	}
	if r.Server.URL != srv.URL() || r.Server.ClockSkewMS == nil || r.Machine.OS == "" || r.Machine.Workspace == "" {
		t.Errorf("report: %+v", r)
	}
}

// TestDoctorClockSkew moves this machine's clock against a real server's.
func TestDoctorClockSkew(t *testing.T) {
	t.Parallel()
	srv := startDoctorServer(t, "", "")
	for _, tc := range []struct {
		name   string
		shift  time.Duration
		status doctor.Status
		want   string
		near   []string // the detail holds one of these, when set
	}{
		{name: "in step", shift: 0, status: doctor.OK, want: "in step"},
		// The Date header has whole seconds: a second either way.
		{name: "behind", shift: -20 * time.Second, status: doctor.Warn, want: "s behind the server's", near: []string{"19s behind", "20s behind", "21s behind"}},
		{name: "ahead", shift: 3 * time.Minute, status: doctor.Fail, want: "ahead of the server's", near: []string{"2m59s ahead", "3m0s ahead", "3m1s ahead"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tf := newTestFactory(t, map[string]string{"OUTPOST_SERVER": srv.URL(), "OUTPOST_TOKEN": doctorAdmin})
			tf.Output = outputJSON
			err := runDoctor(t.Context(), &DoctorOptions{f: tf.Factory, Dir: t.TempDir(), Now: func() time.Time { return time.Now().Add(tc.shift) }})
			var r doctorReport
			if jerr := json.Unmarshal(tf.out.Bytes(), &r); jerr != nil {
				t.Fatal(jerr)
			}
			c := check(t, r, "clock")
			nearOK := len(tc.near) == 0
			for _, n := range tc.near {
				nearOK = nearOK || strings.Contains(c.Detail, n)
			}
			if c.Status != tc.status || !strings.Contains(c.Detail, tc.want) || !nearOK || (err == nil) != (tc.status != doctor.Fail) {
				t.Errorf("clock %s %q (err %v); want %s with %q", c.Status, c.Detail, err, tc.status, tc.want)
			}
			if r.Server.ClockSkewMS == nil || (*r.Server.ClockSkewMS+tc.shift.Milliseconds()) > 2000 || (*r.Server.ClockSkewMS+tc.shift.Milliseconds()) < -2000 {
				t.Errorf("clock_skew_ms %v for a shift of %s", r.Server.ClockSkewMS, tc.shift)
			}
		})
	}
}

// TestDoctorTLS checks a TLS server signed by a private CA: the
// certificate does not verify without the CA (and the check says to pass
// it), nor for a name it is not for; with the CA it verifies, and a
// certificate valid for a day warns.
func TestDoctorTLS(t *testing.T) {
	t.Parallel()
	ca := tlstest.NewCA(t, "doctor test CA")
	dir := t.TempDir()
	cert, key := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	ca.Issue(t).Write(t, cert, key)
	caFile := ca.WriteCA(t, dir, "ca.pem")
	srv := startDoctorServer(t, cert, key)
	env := map[string]string{"OUTPOST_SERVER": srv.URL(), "OUTPOST_TOKEN": doctorAdmin}

	code, r, _ := runDoctorJSON(t, env)
	tlsCheck := check(t, r, "tls")
	if code != 1 || tlsCheck.Status != doctor.Fail || !strings.Contains(tlsCheck.Detail, "does not trust") || !strings.Contains(tlsCheck.Fix, "--ca-file") {
		t.Errorf("without the CA: exit %d, %+v", code, tlsCheck)
	}
	if s := check(t, r, "server"); s.Status != doctor.OK {
		t.Errorf("without the CA the server still answers: %+v", s)
	}
	if tok := check(t, r, "token"); tok.Status != doctor.Skip {
		t.Errorf("without the CA the token cannot be checked: %+v", tok)
	}
	if r.Server.TLS == nil || r.Server.TLS.Verified || r.Server.TLS.Issuer != "doctor test CA" {
		t.Errorf("server.tls without the CA: %+v", r.Server.TLS)
	}

	code, r, _ = runDoctorJSON(t, env, "--ca-file", caFile)
	tlsCheck = check(t, r, "tls")
	if code != 0 || tlsCheck.Status != doctor.Warn || !strings.Contains(tlsCheck.Detail, "verifies with the system's roots and "+caFile) ||
		!strings.Contains(tlsCheck.Detail, "expires in 23 hours") || !strings.Contains(tlsCheck.Fix, "renew") {
		t.Errorf("with the CA: exit %d, %+v", code, tlsCheck)
	}
	if r.Server.TLS == nil || !r.Server.TLS.Verified || r.Server.TLS.DaysLeft != 0 || check(t, r, "token").Status != doctor.OK {
		t.Errorf("with the CA: %+v %+v", r.Server.TLS, r.Checks)
	}

	other := map[string]string{"OUTPOST_SERVER": strings.Replace(srv.URL(), "127.0.0.1", "localhost", 1), "OUTPOST_TOKEN": doctorAdmin}
	code, r, _ = runDoctorJSON(t, other, "--ca-file", caFile)
	if tlsCheck = check(t, r, "tls"); code != 1 || !strings.Contains(tlsCheck.Detail, "not for localhost") {
		t.Errorf("another name: exit %d, %+v", code, tlsCheck)
	}
}

// TestDoctorHuman prints words off a terminal, the fix under a failed
// check, and exits 1 with one sentence when the server cannot be reached.
func TestDoctorHuman(t *testing.T) {
	t.Parallel()
	tf := newTestFactory(t, map[string]string{"OUTPOST_SERVER": "http://127.0.0.1:1", "OUTPOST_TOKEN": doctorAdmin})
	code := tf.run(t, "doctor", "--dir", t.TempDir())
	out := tf.out.String()
	for _, want := range []string{"Checking this machine", "ok    git ", "FAIL  server      cannot reach http://127.0.0.1:1", "fix: start 'outpost server'", "skip  token       not checked"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if code != 1 || tf.errOut.String() != "error: 1 required check failed: fix it before starting a worker\n" {
		t.Errorf("exit %d, stderr %q", code, tf.errOut)
	}

	tf = newTestFactory(t, map[string]string{"OUTPOST_SERVER": "http://127.0.0.1:1"})
	missing := filepath.Join(t.TempDir(), "nope")
	tf.run(t, "doctor", "--dir", missing)
	if out := tf.out.String(); !strings.Contains(out, "FAIL  workspace   "+missing+" does not exist") || !strings.Contains(out, "mkdir -p "+missing) {
		t.Errorf("a missing workspace:\n%s", out)
	}
}
