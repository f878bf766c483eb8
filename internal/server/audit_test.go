package server

import (
	"crypto/rand"
	"encoding/json"
	"fmt"
	"net/url"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/audit"
	"github.com/outpost-sh/outpost/internal/store/postgres/pgtest"
)

// auditLog reads the whole audit log, oldest first, through the API.
func (ts *testServer) auditLog() []api.AuditLog {
	ts.t.Helper()
	var all []api.AuditLog
	after := ""
	for range 100 {
		var page api.AuditLogList
		q := url.Values{"first": {"200"}}
		if after != "" {
			q.Set("after", after)
		}
		ts.mustDo(200, "GET", "/v1/audit-logs?"+q.Encode(), ts.admin, nil, &page)
		all = append(all, page.Items...)
		if !page.HasNextPage {
			break
		}
		after = *page.EndCursor
	}
	for i, j := 0, len(all)-1; i < j; i, j = i+1, j-1 {
		all[i], all[j] = all[j], all[i]
	}
	return all
}

// auditSince returns the entries after the first n of the log and fails
// unless their actions are want, in order.
func (ts *testServer) auditSince(n int, want ...string) []api.AuditLog {
	ts.t.Helper()
	all := ts.auditLog()
	got := all[min(n, len(all)):]
	var actions []string
	for _, e := range got {
		actions = append(actions, e.Action)
	}
	if strings.Join(actions, " ") != strings.Join(want, " ") {
		ts.t.Fatalf("audit entries %q, want %q", actions, want)
	}
	return got
}

// TestAuditActions: each change a token makes leaves exactly one entry,
// naming the token, the address, the action and the object by id; a
// refused change leaves none; reading the log leaves none; no secret is
// in any entry.
func TestAuditActions(t *testing.T) {
	t.Parallel()
	t.Run("sqlite", func(t *testing.T) {
		t.Parallel()
		testAuditActions(t, startServer(t, Options{}))
	})
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		key := make([]byte, 32)
		_, _ = rand.Read(key)
		testAuditActions(t, startServer(t, Options{DatabaseURL: pgtest.Shared(t).Database(t), SecretKey: key}))
	})
}

func testAuditActions(t *testing.T, ts *testServer) {
	var me api.WhoAmI
	ts.mustDo(200, "GET", "/v1/whoami", ts.admin, nil, &me)
	n := len(ts.auditLog())
	check := func(e api.AuditLog, action, kind, id string) {
		t.Helper()
		if e.Action != action || e.Object.Kind != kind || e.Object.ID != id || e.Actor != (api.AuditActor{Kind: "token", ID: me.ID, Name: me.Name}) ||
			e.SourceIP != "127.0.0.1" || !strings.HasPrefix(e.AuditLogID, "audit-") || time.Since(time.Unix(e.CreatedAt, 0)) > time.Minute {
			t.Errorf("entry %+v, want %s of %s %s by %s", e, action, kind, id, me.ID)
		}
	}

	var tok api.CreateTokenResponse
	ts.mustDo(201, "POST", "/v1/tokens", ts.admin, api.CreateTokenRequest{Name: "ci", Scopes: []string{api.ScopeSessionsRead}}, &tok)
	e := ts.auditSince(n, audit.TokenCreate)[0]
	check(e, audit.TokenCreate, "token", tok.ID)
	if !strings.Contains(string(e.Data), `"name":"ci"`) {
		t.Errorf("token.create data %s", e.Data)
	}
	ts.mustDo(204, "DELETE", "/v1/tokens/"+tok.ID, ts.admin, nil, nil)
	check(ts.auditSince(n, audit.TokenCreate, audit.TokenRevoke)[1], audit.TokenRevoke, "token", tok.ID)
	ts.mustDo(404, "DELETE", "/v1/tokens/tok_missing", ts.admin, nil, nil)
	n += 2
	ts.auditSince(n)

	o := ts.outpost("audited")
	check(ts.auditSince(n, audit.OutpostCreate)[0], audit.OutpostCreate, "outpost", o.Metadata.OutpostID)
	ts.mustDo(409, "POST", "/v1/outposts", ts.admin, api.CreateOutpostRequest{Name: "audited", Platform: "linux"}, nil)
	max := 3
	ts.mustDo(200, "PATCH", "/v1/outposts/audited", ts.admin, api.UpdateOutpostRequest{MaxRunning: &max}, nil)
	check(ts.auditSince(n, audit.OutpostCreate, audit.OutpostUpdate)[1], audit.OutpostUpdate, "outpost", o.Metadata.OutpostID)
	n += 2

	const secret = "hunter2-very-secret"
	var sess api.Session
	ts.mustDo(201, "POST", "/v1/sessions", ts.admin, map[string]any{
		"outpost": "audited", "title": "deploy with " + secret, "secrets": map[string]string{"DEPLOY_KEY": secret},
		"agent": map[string]any{"kind": "script", "steps": []any{map[string]any{"tool": "exec", "args": map[string]any{"command": "true"}}}},
	}, &sess)
	id := sess.Metadata.SessionID
	e = ts.auditSince(n, audit.SessionCreate)[0]
	check(e, audit.SessionCreate, "session", id)
	if !strings.Contains(string(e.Data), "DEPLOY_KEY") {
		t.Errorf("session.create data %s lacks the secret's name", e.Data)
	}
	// A message to a script session is refused: no entry.
	ts.mustDo(409, "POST", "/v1/sessions/"+id+"/messages", ts.admin, api.MessageRequest{Text: "hi"}, nil)
	ts.mustDo(200, "PATCH", "/v1/sessions/"+id, ts.admin, map[string]any{"network_policy": nil}, nil)
	ts.mustDo(200, "POST", "/v1/sessions/"+id+"/terminate", ts.admin, api.TerminateRequest{Reason: "leaked " + secret}, nil)
	got := ts.auditSince(n, audit.SessionCreate, audit.SessionUpdate, audit.SessionTerminate)
	check(got[1], audit.SessionUpdate, "session", id)
	check(got[2], audit.SessionTerminate, "session", id)
	n += 3

	// A worker's heartbeats: the first registers it, the next do not.
	machine := ts.token([]string{api.ScopeMachine}, "audited")
	n++ // its token.create
	info := api.WorkerInfo{Kind: api.WorkerKindWorker, Hostname: "box-1", Version: "dev", MaxSessions: 1, Instance: "i-1"}
	for range 3 {
		ts.mustDo(200, "PUT", "/v1/outposts/audited/workers/w1", machine, info, nil)
	}
	e = ts.auditSince(n, audit.WorkerRegister)[0]
	if e.Object.ID != o.Metadata.OutpostID+"/w1" || e.Actor.Kind != "token" || e.Actor.ID == me.ID {
		t.Errorf("worker.register %+v", e)
	}
	n++

	ts.mustDo(204, "DELETE", "/v1/outposts/audited?force=true", ts.admin, nil, nil)
	check(ts.auditSince(n, audit.OutpostDelete)[0], audit.OutpostDelete, "outpost", o.Metadata.OutpostID)
	n++

	// Sign-ins to the web UI: one accepted, one refused.
	f := ts.loadSignin()
	if code, _ := ts.postSignin(ts.admin, f.cookie, f.csrf); code != 303 {
		t.Fatalf("sign-in: %d", code)
	}
	f = ts.loadSignin()
	if code, _ := ts.postSignin("opt_wrong-"+secret, f.cookie, f.csrf); code != 401 {
		t.Fatalf("bad sign-in: %d", code)
	}
	got = ts.auditSince(n, audit.Login, audit.LoginFailed)
	check(got[0], audit.Login, "token", me.ID)
	if got[1].Actor.Kind != "anonymous" || got[1].SourceIP != "127.0.0.1" || !strings.Contains(string(got[1].Data), "reason") {
		t.Errorf("login.failed %+v", got[1])
	}
	n += 2

	// Reading the log, twice, adds nothing; no secret anywhere in it.
	all := ts.auditLog()
	if len(all) != n {
		t.Errorf("the log has %d entries after reading it, want %d", len(all), n)
	}
	raw, _ := json.Marshal(all)
	if strings.Contains(string(raw), secret) || strings.Contains(string(raw), tok.Secret) {
		t.Errorf("a secret is in the audit log: %s", raw)
	}
	var v api.AuditVerification
	ts.mustDo(200, "GET", "/v1/audit-logs/verify", ts.admin, nil, &v)
	if !v.OK || v.Checked != n {
		t.Errorf("verify: %+v, want ok over %d entries", v, n)
	}
}

// TestAuditSuspendResumeGrant: a suspend, a resume and a network grant
// each leave one entry.
func TestAuditSuspendResumeGrant(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Options{})
	ts.outpost("s")
	id := suspendLive(t, ts, "s", []byte("workspace"))
	ts.mustDo(200, "POST", "/v1/sessions/"+id+"/resume", ts.admin, nil, nil)
	if got := auditOf(ts, id); strings.Join(got, " ") != "session.create session.suspend session.resume" {
		t.Errorf("entries of session %s: %q", id, got)
	}

	ts.mustDo(201, "POST", "/v1/outposts", ts.admin, api.CreateOutpostRequest{Name: "net", NetworkPolicy: &outpostPolicy}, nil)
	rid := requestSession(ts, ts.admin, "net", nil, "files.example.test")
	connect(ts, rid)
	waitPending(ts, rid)
	n := len(ts.auditLog())
	ts.mustDo(200, "POST", "/v1/sessions/"+rid+"/network-requests/1/grant", ts.admin, nil, nil)
	e := ts.auditSince(n, audit.NetworkGrant)[0]
	if e.Object != (api.AuditObject{Kind: "network_request", ID: rid + "/1"}) || !strings.Contains(string(e.Data), "files.example.test") {
		t.Errorf("network.grant %+v", e)
	}

	did := requestSession(ts, ts.admin, "net", nil, "other.example.test")
	connect(ts, did)
	waitPending(ts, did)
	n = len(ts.auditLog())
	ts.mustDo(200, "POST", "/v1/sessions/"+did+"/network-requests/1/deny", ts.admin, api.NetworkDenyRequest{Reason: "not that one"}, nil)
	ts.mustDo(409, "POST", "/v1/sessions/"+did+"/network-requests/1/deny", ts.admin, nil, nil)
	e = ts.auditSince(n, audit.NetworkDeny)[0]
	if e.Object.ID != did+"/1" || !strings.Contains(string(e.Data), "not that one") {
		t.Errorf("network.deny %+v", e)
	}
}

// auditOf is the actions of the audit entries of session id, oldest
// first.
func auditOf(ts *testServer, id string) []string {
	ts.t.Helper()
	var out []string
	for _, e := range ts.auditLog() {
		if e.Object.ID == id {
			out = append(out, e.Action)
		}
	}
	return out
}

// TestAuditListQuery: paging, filters, the window and the refusals of
// GET /v1/audit-logs.
func TestAuditListQuery(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Options{})
	for i := range 5 {
		ts.outpost(fmt.Sprintf("o%d", i))
	}
	var page api.AuditLogList
	ts.mustDo(200, "GET", "/v1/audit-logs?first=2", ts.admin, nil, &page)
	if len(page.Items) != 2 || !page.HasNextPage || page.Total < 5 || page.EndCursor == nil || *page.EndCursor != page.Items[1].AuditLogID {
		t.Fatalf("first page %+v", page)
	}
	total := page.Total
	seen := map[string]bool{}
	for _, e := range page.Items {
		seen[e.AuditLogID] = true
	}
	for range total {
		if !page.HasNextPage {
			break
		}
		cursor := *page.EndCursor
		page = api.AuditLogList{}
		ts.mustDo(200, "GET", "/v1/audit-logs?first=2&after="+cursor, ts.admin, nil, &page)
		for _, e := range page.Items {
			if seen[e.AuditLogID] {
				t.Fatalf("entry %s on two pages", e.AuditLogID)
			}
			seen[e.AuditLogID] = true
		}
	}
	if len(seen) != total {
		t.Errorf("paging saw %d entries of %d", len(seen), total)
	}
	ts.mustDo(200, "GET", "/v1/audit-logs?action=outpost.create", ts.admin, nil, &page)
	if page.Total != 5 || len(page.Items) != 5 {
		t.Errorf("action filter: %d of %d", len(page.Items), page.Total)
	}
	var me api.WhoAmI
	ts.mustDo(200, "GET", "/v1/whoami", ts.admin, nil, &me)
	ts.mustDo(200, "GET", "/v1/audit-logs?actor="+me.ID, ts.admin, nil, &page)
	if page.Total != total {
		t.Errorf("actor filter: %d, want %d", page.Total, total)
	}
	ts.mustDo(200, "GET", "/v1/audit-logs?actor=tok_nobody", ts.admin, nil, &page)
	if page.Total != 0 || page.Items == nil || page.EndCursor != nil {
		t.Errorf("no match: %+v", page)
	}
	now := time.Now().Unix()
	ts.mustDo(200, "GET", fmt.Sprintf("/v1/audit-logs?time_after=%d&time_before=%d", now-60, now+60), ts.admin, nil, &page)
	if page.Total != total {
		t.Errorf("window around now: %d, want %d", page.Total, total)
	}
	ts.mustDo(200, "GET", fmt.Sprintf("/v1/audit-logs?time_before=%d", now-3600), ts.admin, nil, &page)
	if page.Total != 0 {
		t.Errorf("window an hour ago: %d", page.Total)
	}
	for _, q := range []string{
		"first=0", "first=201", "after=nope", "after=audit-0", "action=DROP%20TABLE",
		fmt.Sprintf("time_after=%d&time_before=%d", now-101*86400, now), fmt.Sprintf("time_after=%d", now-101*86400),
		fmt.Sprintf("time_after=%d&time_before=%d", now, now-10), "time_after=yesterday",
	} {
		ts.mustDo(400, "GET", "/v1/audit-logs?"+q, ts.admin, nil, nil)
	}
	before := len(ts.auditLog())
	// Admin limited to one outpost: the log tells of every outpost.
	limited := ts.token([]string{api.ScopeAdmin}, "o1")
	ts.mustDo(403, "GET", "/v1/audit-logs", limited, nil, nil)
	ts.mustDo(403, "GET", "/v1/audit-logs/verify", limited, nil, nil)
	ts.mustDo(403, "GET", "/v1/audit-logs", ts.token([]string{api.ScopeOrchestrator}, ""), nil, nil)
	ts.mustDo(401, "GET", "/v1/audit-logs", "", nil, nil)
	if after := len(ts.auditLog()); after != before+2 { // the two tokens
		t.Errorf("entries %d after refused reads, want %d", after, before+2)
	}
}

// TestAuditPage: the web UI's Audit log page lists the entries with
// their filters, pages on, and refuses whom the API refuses.
func TestAuditPage(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Options{})
	o := ts.outpost("shown")
	ts.token([]string{api.ScopeSessionsRead}, "")
	code, body := ts.uiRequest("GET", "/ui/audit", ts.admin, nil)
	if code != 200 || !strings.Contains(body, ">outpost.create<") || !strings.Contains(body, ">token.create<") || !strings.Contains(body, o.Metadata.OutpostID) {
		t.Fatalf("audit page: %d %s", code, body)
	}
	code, body = ts.uiRequest("GET", "/ui/audit?action=outpost.create&since_h=24", ts.admin, nil)
	if code != 200 || !strings.Contains(body, ">outpost.create<") || strings.Contains(body, ">token.create<") {
		t.Errorf("filtered audit page: %d %s", code, body)
	}
	for i := range 120 {
		ts.outpost(fmt.Sprintf("p%d", i))
	}
	code, body = ts.uiRequest("GET", "/ui/audit", ts.admin, nil)
	m := regexpNext.FindStringSubmatch(body)
	if code != 200 || m == nil {
		t.Fatalf("no link to older entries: %d", code)
	}
	code, body = ts.uiRequest("GET", strings.ReplaceAll(m[1], "&amp;", "&"), ts.admin, nil)
	if code != 200 || !strings.Contains(body, "audit-1<") {
		t.Errorf("older entries: %d", code)
	}
	if code, _ := ts.uiRequest("GET", "/ui/audit?since_h=99999", ts.admin, nil); code != 400 {
		t.Errorf("since_h past 100 days: %d", code)
	}
	reader := ts.token([]string{api.ScopeSessionsRead}, "")
	if code, body := ts.uiRequest("GET", "/ui/audit", reader, nil); code != 403 || !strings.Contains(body, "admin") {
		t.Errorf("audit page for a reader: %d %s", code, body)
	}
}

// regexpNext finds the audit page's link to older entries.
var regexpNext = regexp.MustCompile(`href="(/ui/audit\?[^"]+)" id="next"`)

// TestAuditRetention: the sweep removes the entries older than
// AuditRetention from the oldest end, the chain still verifies, and new
// entries continue it.
func TestAuditRetention(t *testing.T) {
	t.Parallel()
	var offset atomic.Int64
	now := func() time.Time { return time.Now().Add(time.Duration(offset.Load())) }
	if _, err := New(t.Context(), Options{DataDir: t.TempDir(), AuditRetention: -time.Hour}); err == nil {
		t.Error("a negative audit retention was taken")
	}
	ts := startServer(t, Options{Now: now, AuditRetention: 24 * time.Hour})
	ts.outpost("old1")
	ts.outpost("old2")
	offset.Store(int64(36 * time.Hour))
	ts.outpost("new")
	if err := ts.srv.pruneAudit(t.Context()); err != nil {
		t.Fatal(err)
	}
	log := ts.auditLog()
	if len(log) != 1 || log[0].AuditLogID != "audit-3" {
		t.Fatalf("after the sweep: %+v", log)
	}
	var v api.AuditVerification
	ts.mustDo(200, "GET", "/v1/audit-logs/verify", ts.admin, nil, &v)
	if !v.OK || v.Checked != 1 {
		t.Errorf("verify after the sweep: %+v", v)
	}
	ts.outpost("newer")
	ts.mustDo(200, "GET", "/v1/audit-logs/verify", ts.admin, nil, &v)
	if !v.OK || v.Checked != 2 {
		t.Errorf("verify after an append: %+v", v)
	}
}

// TestAuditPeopleActions: role grants and revocations, decisions on held
// tool calls, stored secrets, webhooks and device logins each leave one
// entry, naming what changed and never a secret's value.
func TestAuditPeopleActions(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Options{})
	ts.outpost("home")

	n := len(ts.auditLog())
	var b api.RoleBinding
	ts.mustDo(201, "POST", "/v1/role-bindings", ts.admin, api.CreateRoleBindingRequest{Role: api.RoleMember, Group: "eng", Outpost: "home"}, &b)
	if e := ts.auditSince(n, audit.RoleGrant)[0]; e.Object != (api.AuditObject{Kind: "role_binding", ID: b.ID}) || !strings.Contains(string(e.Data), `"eng"`) {
		t.Errorf("role.grant %+v", e)
	}
	n = len(ts.auditLog())
	ts.mustDo(204, "DELETE", "/v1/role-bindings/"+b.ID, ts.admin, nil, nil)
	ts.mustDo(404, "DELETE", "/v1/role-bindings/"+b.ID, ts.admin, nil, nil)
	ts.auditSince(n, audit.RoleRevoke)

	n = len(ts.auditLog())
	ts.mustDo(201, "PUT", "/v1/outposts/home/secrets/DEPLOY_KEY", ts.admin, api.PutOutpostSecretRequest{Value: "s3cr3t-value-9"}, nil)
	ts.mustDo(204, "DELETE", "/v1/outposts/home/secrets/DEPLOY_KEY", ts.admin, nil, nil)
	es := ts.auditSince(n, audit.SecretSet, audit.SecretDelete)
	set, del := es[0], es[1]
	if !strings.HasSuffix(set.Object.ID, "/DEPLOY_KEY") || del.Object != set.Object {
		t.Errorf("secret entries %+v, %+v", set, del)
	}

	n = len(ts.auditLog())
	var hook api.Webhook
	ts.mustDo(201, "POST", "/v1/webhooks", ts.admin, api.CreateWebhookRequest{URL: "http://10.0.0.7/hooks", Events: []string{"session.created"}}, &hook)
	ts.mustDo(204, "DELETE", "/v1/webhooks/"+hook.ID, ts.admin, nil, nil)
	es = ts.auditSince(n, audit.WebhookCreate, audit.WebhookDelete)
	if e := es[0]; e.Object.ID != hook.ID || !strings.Contains(string(e.Data), "10.0.0.7") {
		t.Errorf("webhook.create %+v", e)
	}

	n = len(ts.auditLog())
	approved := ts.deviceCode(url.Values{"client_id": {"cli"}})
	denied := ts.deviceCode(url.Values{"client_id": {"cli"}})
	ts.mustDo(200, "POST", api.DeviceApprovePath, ts.admin, api.DeviceDecisionRequest{UserCode: approved.UserCode}, nil)
	ts.mustDo(200, "POST", api.DeviceDenyPath, ts.admin, api.DeviceDecisionRequest{UserCode: denied.UserCode}, nil)
	es = ts.auditSince(n, audit.DeviceApprove, audit.DeviceDeny)
	if e := es[0]; e.Object.ID != approved.UserCode || !strings.Contains(string(e.Data), "scopes") {
		t.Errorf("device.approve %+v", e)
	}
	if e := es[1]; e.Object.ID != denied.UserCode {
		t.Errorf("device.deny %+v", e)
	}

	ts.mustDo(201, "POST", "/v1/outposts", ts.admin, api.CreateOutpostRequest{Name: "guarded", ApprovalRules: []api.ApprovalRule{pushRule}}, nil)
	id := approvalSession(ts, ts.admin, "guarded", "git push origin main")
	connect(ts, id)
	waitHeld(ts, id, 1)
	n = len(ts.auditLog())
	ts.mustDo(200, "POST", "/v1/sessions/"+id+"/calls/1/deny", ts.admin, api.ApprovalDecisionRequest{Reason: "not on a Friday"}, nil)
	ts.mustDo(409, "POST", "/v1/sessions/"+id+"/calls/1/approve", ts.admin, nil, nil)
	if e := ts.auditSince(n, audit.ApprovalDeny)[0]; e.Object != (api.AuditObject{Kind: "tool_call", ID: id + "/1"}) || !strings.Contains(string(e.Data), "Friday") {
		t.Errorf("approval.deny %+v", e)
	}

	for _, e := range ts.auditLog() {
		if strings.Contains(string(e.Data), "s3cr3t-value-9") {
			t.Errorf("entry %s holds a secret's value: %s", e.AuditLogID, e.Data)
		}
	}
}

// TestOutpostAdminsSeeOnlyTheirOutpost: a person who is admin on one
// outpost only, by a role there, cannot read the audit log (which tells of
// every outpost) nor manage every outpost's webhooks; an admin everywhere
// can, and a token limited to the outpost manages that outpost's webhooks.
func TestOutpostAdminsSeeOnlyTheirOutpost(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Options{})
	ts.outpost("home")
	u, secret := ts.signedIn("sub-local-admin", "local@example.com")
	ts.mustDo(201, "POST", "/v1/role-bindings", ts.admin, api.CreateRoleBindingRequest{Role: api.RoleAdmin, User: u.ID, Outpost: "home"}, nil)
	hook := api.CreateWebhookRequest{URL: "http://10.0.0.7/hooks", Events: []string{"session.created"}, Outpost: "home"}
	for _, c := range []struct {
		method, path string
		body         any
	}{
		{"GET", "/v1/audit-logs", nil},
		{"GET", "/v1/audit-logs/verify", nil},
		{"GET", "/v1/webhooks", nil},
		{"POST", "/v1/webhooks", hook},
	} {
		if got := ts.do(c.method, c.path, secret, c.body, nil); got != 403 {
			t.Errorf("%s %s by an admin of one outpost: %d, want 403", c.method, c.path, got)
		}
		if c.method == "GET" {
			ts.mustDo(200, c.method, c.path, ts.admin, nil, nil)
		}
	}
	limited := ts.token([]string{api.ScopeAdmin}, "home")
	ts.mustDo(201, "POST", "/v1/webhooks", limited, hook, nil)
	ts.mustDo(200, "GET", "/v1/webhooks", limited, nil, nil)
}
