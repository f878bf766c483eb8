package webhooks_test

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/client"
	"github.com/outpost-sh/outpost/internal/server"
	"github.com/outpost-sh/outpost/internal/servertest"
	"github.com/outpost-sh/outpost/internal/store/postgres/pgtest"
	"github.com/outpost-sh/outpost/internal/store/sealed"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// got is one request a receiver took.
type got struct {
	Delivery, Event string
	Body            api.WebhookPayload
	Raw             []byte
}

// receiver is a webhook endpoint on loopback that checks every request's
// signature with its own HMAC, answers 500 to the first fail requests,
// and records the others.
type receiver struct {
	t      *testing.T
	srv    *httptest.Server
	mu     sync.Mutex
	secret string
	fail   int
	failed int
	// failedIDs are the delivery ids of the requests answered 500.
	failedIDs []string
	ok        []got
	always    bool // answer 500 to everything
	// gate, when set, holds every request until it is closed; arrived
	// is closed when the first request is held.
	gate    chan struct{}
	arrived chan struct{}
	once    sync.Once
}

func newReceiver(t *testing.T, fail int) *receiver {
	return newReceiverOn(t, fail, nil)
}

// newReceiverOn is newReceiver on ln (nil: a new loopback port).
func newReceiverOn(t *testing.T, fail int, ln net.Listener) *receiver {
	r := &receiver{t: t, fail: fail}
	r.srv = httptest.NewUnstartedServer(http.HandlerFunc(r.serve))
	if ln != nil {
		r.srv.Listener.Close()
		r.srv.Listener = ln
	}
	r.srv.Start()
	t.Cleanup(r.srv.Close)
	return r
}

// verify is an implementation of the signature check independent of the
// package's: split the header, recompute HMAC-SHA256 over "t.body".
func verify(secret, header string, body []byte) bool {
	var ts, sig string
	for _, p := range strings.Split(header, ",") {
		switch {
		case strings.HasPrefix(p, "t="):
			ts = p[2:]
		case strings.HasPrefix(p, "v1="):
			sig = p[3:]
		}
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil || time.Since(time.Unix(sec, 0)).Abs() > 5*time.Minute {
		return false
	}
	m := hmac.New(sha256.New, []byte(secret))
	fmt.Fprintf(m, "%s.%s", ts, body)
	return hmac.Equal([]byte(sig), []byte(hex.EncodeToString(m.Sum(nil))))
}

func (r *receiver) serve(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(req.Body)
	r.mu.Lock()
	gate := r.gate
	r.mu.Unlock()
	if gate != nil {
		r.once.Do(func() { close(r.arrived) })
		<-gate
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if req.Method != http.MethodPost || req.Header.Get("Content-Type") != "application/json" {
		r.t.Errorf("request %s with content type %q", req.Method, req.Header.Get("Content-Type"))
	}
	if !verify(r.secret, req.Header.Get(api.HeaderWebhookSignature), body) {
		r.t.Errorf("bad signature %q on %s", req.Header.Get(api.HeaderWebhookSignature), body)
		http.Error(w, "bad signature", http.StatusBadRequest)
		return
	}
	if r.always || r.failed < r.fail {
		r.failed++
		r.failedIDs = append(r.failedIDs, req.Header.Get(api.HeaderWebhookDelivery))
		http.Error(w, "not now", http.StatusInternalServerError)
		return
	}
	var p api.WebhookPayload
	if err := json.Unmarshal(body, &p); err != nil {
		r.t.Errorf("body %s: %v", body, err)
	}
	g := got{Delivery: req.Header.Get(api.HeaderWebhookDelivery), Event: req.Header.Get(api.HeaderWebhookEvent), Body: p, Raw: body}
	if g.Delivery != p.ID || g.Event != p.Event {
		r.t.Errorf("headers %s %s, body id %s event %s", g.Delivery, g.Event, p.ID, p.Event)
	}
	r.ok = append(r.ok, g)
	w.WriteHeader(http.StatusNoContent)
}

func (r *receiver) received() []got {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]got(nil), r.ok...)
}

// waitFor polls cond until it holds or 20 s pass.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// fast are delivery options for tests: loopback allowed, quick polls and
// retries.
func fast() server.WebhookOptions {
	return server.WebhookOptions{AllowInternal: true, Poll: 20 * time.Millisecond, FirstRetry: 50 * time.Millisecond,
		MaxBackoff: 200 * time.Millisecond, Timeout: 2 * time.Second}
}

// get is v, failing the test passed to what it returns when err is not
// nil: get(call())(t).
func get[T any](v T, err error) func(*testing.T) T {
	return func(t *testing.T) T {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
}

func session(t *testing.T, c *client.Client, outpost string) string {
	t.Helper()
	s := get(c.Sessions.Create(t.Context(), api.CreateSessionRequest{Outpost: outpost, Title: "hooked",
		Agent: api.Agent{Kind: api.AgentScript}}))(t)
	return s.Metadata.SessionID
}

// TestDeliveries: signed deliveries reach a receiver that fails five
// times first, each event once after its retries, the same id on every
// try; a per-outpost subscription gets only its outpost's events; a
// redelivery, from the API and from the web UI, sends the same delivery
// again; the log shows what happened, in the API and in the web UI.
func TestDeliveries(t *testing.T) {
	t.Parallel()
	srv := servertest.Start(t, server.Options{Webhooks: fast()})
	c, ctx := srv.Client, t.Context()
	for _, n := range []string{"alpha", "beta"} {
		get(c.Outposts.Create(ctx, api.CreateOutpostRequest{Name: n}))(t)
	}
	rAlpha, rAll := newReceiver(t, 5), newReceiver(t, 0)
	hAlpha := get(c.Webhooks.Create(ctx, api.CreateWebhookRequest{URL: rAlpha.srv.URL + "/hook", Outpost: "alpha",
		Events: []string{api.EventSessionCreated, api.EventSessionEnded, api.EventWorkerConnected, api.EventWorkerGone}}))(t)
	hAll := get(c.Webhooks.Create(ctx, api.CreateWebhookRequest{URL: rAll.srv.URL, Events: []string{api.EventSessionCreated}}))(t)
	if !strings.HasPrefix(hAlpha.Secret, "whsec_") || hAlpha.Secret == hAll.Secret {
		t.Fatalf("secrets %q %q", hAlpha.Secret, hAll.Secret)
	}
	rAlpha.mu.Lock()
	rAlpha.secret = hAlpha.Secret
	rAlpha.mu.Unlock()
	rAll.mu.Lock()
	rAll.secret = hAll.Secret
	rAll.mu.Unlock()

	a := session(t, c, "alpha")
	b := session(t, c, "beta")
	get(c.Sessions.Terminate(ctx, a, "enough"))(t)
	get(c.Workers.Heartbeat(ctx, "alpha", "w-1", api.WorkerInfo{Kind: api.WorkerKindWorker}))(t)
	if err := c.Workers.Goodbye(ctx, "alpha", "w-1"); err != nil {
		t.Fatal(err)
	}
	get(c.Workers.Heartbeat(ctx, "beta", "w-2", api.WorkerInfo{Kind: api.WorkerKindWorker}))(t)

	waitFor(t, "alpha's four events", func() bool { return len(rAlpha.received()) >= 4 })
	waitFor(t, "both created events", func() bool { return len(rAll.received()) >= 2 })
	gotAlpha := rAlpha.received()
	// In order within each chain (the session's, the worker's), whatever
	// the retries did to the order between chains.
	var sessionEvents, workerEvents []string
	byID := map[string]got{}
	var endedRaw []byte
	for _, g := range gotAlpha {
		if _, dup := byID[g.Delivery]; dup {
			t.Errorf("delivery %s received twice", g.Delivery)
		}
		byID[g.Delivery] = g
		if g.Body.Data.Session != nil {
			sessionEvents = append(sessionEvents, g.Event)
			if g.Body.Data.Session.ID != a {
				t.Errorf("alpha's webhook got session %s", g.Body.Data.Session.ID)
			}
		} else {
			workerEvents = append(workerEvents, g.Event)
		}
		if g.Event == api.EventSessionEnded {
			endedRaw = g.Raw
		}
	}
	if strings.Join(sessionEvents, " ") != api.EventSessionCreated+" "+api.EventSessionEnded ||
		strings.Join(workerEvents, " ") != api.EventWorkerConnected+" "+api.EventWorkerGone {
		t.Errorf("alpha's events %v and %v, want each chain in order", sessionEvents, workerEvents)
	}
	// A retry carries the id of the try it repeats.
	for _, id := range rAlpha.failedIDs {
		if _, ok := byID[id]; !ok {
			t.Errorf("failed try %s was never delivered under its id", id)
		}
	}
	var ended struct {
		Data struct {
			Session api.WebhookSession `json:"session"`
		} `json:"data"`
	}
	if err := json.Unmarshal(endedRaw, &ended); err != nil || !api.IsFinal(ended.Data.Session.Status) ||
		!strings.Contains(ended.Data.Session.Reason, "enough") {
		t.Errorf("ended event %s (%v)", endedRaw, err)
	}
	var sessions []string
	for _, g := range rAll.received() {
		sessions = append(sessions, g.Body.Data.Session.ID)
	}
	if strings.Join(sessions, " ") != a+" "+b {
		t.Errorf("global webhook's sessions %v, want %s %s", sessions, a, b)
	}

	// The log: every delivery delivered, the five failures among the
	// attempts.
	// The receiver has a body before its sender records the answer, so
	// the log is read once every delivery in it is recorded.
	var log *api.WebhookDeliveryList
	waitFor(t, "four deliveries recorded", func() bool {
		log = get(c.Webhooks.Deliveries(ctx, hAlpha.ID, 0))(t)
		return len(log.Items) == 4 && !slices.ContainsFunc(log.Items, func(d api.WebhookDelivery) bool { return d.State == api.DeliveryPending })
	})
	attempts := 0
	for _, d := range log.Items {
		attempts += d.Attempts
		if d.State != api.DeliveryDelivered || d.ResponseCode != 204 || d.DeliveredAt == nil || d.NextAttemptAt != nil {
			t.Errorf("delivery in the log: %+v", d)
		}
	}
	if rAlpha.failed != 5 || attempts != 9 {
		t.Errorf("receiver failed %d requests, the log counts %d attempts; want 5 and 9", rAlpha.failed, attempts)
	}
	first := log.Items[len(log.Items)-1]

	// Redelivery by hand: the same id again.
	rd := get(c.Webhooks.Redeliver(ctx, hAlpha.ID, first.ID))(t)
	if rd.State != api.DeliveryPending {
		t.Errorf("redelivered state %s", rd.State)
	}
	waitFor(t, "the redelivery", func() bool { return len(rAlpha.received()) == 5 })
	if g := rAlpha.received()[4]; g.Delivery != first.ID || string(g.Raw) != string(byID[first.ID].Raw) {
		t.Errorf("redelivery %s %s, want %s %s", g.Delivery, g.Raw, first.ID, byID[first.ID].Raw)
	}
	if _, err := c.Webhooks.Redeliver(ctx, hAlpha.ID, "whd_nope"); !client.IsNotFound(err) {
		t.Errorf("redeliver a missing delivery: %v", err)
	}

	// The web UI: the list, the delivery log, a redelivery by hand.
	code, page := ui(t, srv, "GET", "/ui/webhooks", nil)
	if code != 200 || !strings.Contains(page, hAlpha.ID) || !strings.Contains(page, hAll.ID) || strings.Contains(page, "disabled-notice") {
		t.Errorf("webhooks page: %d\n%s", code, page)
	}
	code, page = ui(t, srv, "GET", "/ui/webhooks/"+hAlpha.ID, nil)
	if code != 200 || strings.Count(page, "<td>204</td>") != 4 || !strings.Contains(page, first.ID) || !strings.Contains(page, api.EventWorkerGone) {
		t.Errorf("delivery log page: %d\n%s", code, page)
	}
	m := csrfField.FindStringSubmatch(page)
	if m == nil {
		t.Fatal("the delivery log page has no form")
	}
	code, page = ui(t, srv, "POST", "/ui/webhooks/"+hAlpha.ID+"/deliveries/"+first.ID+"/redeliver", url.Values{"csrf": {m[1]}})
	if code != 202 || !strings.Contains(page, "queued again") {
		t.Errorf("redeliver from the web UI: %d\n%s", code, page)
	}
	waitFor(t, "the redelivery from the web UI", func() bool { return len(rAlpha.received()) == 6 })
	if g := rAlpha.received()[5]; g.Delivery != first.ID {
		t.Errorf("web UI redelivery sent %s, want %s", g.Delivery, first.ID)
	}
	if code, _ := ui(t, srv, "POST", "/ui/webhooks/"+hAlpha.ID+"/deliveries/"+first.ID+"/redeliver", url.Values{"csrf": {"forged"}}); code != 403 {
		t.Errorf("redeliver with a forged form value: %d, want 403", code)
	}
	if code, _ := ui(t, srv, "GET", "/ui/webhooks/wh_nope", nil); code != 404 {
		t.Errorf("page of a missing webhook: %d", code)
	}

	list := get(c.Webhooks.List(ctx))(t)
	if len(list.Items) != 2 || list.Items[0].Secret != "" {
		t.Errorf("list: %+v", list.Items)
	}
	if err := c.Webhooks.Delete(ctx, hAll.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Webhooks.Deliveries(ctx, hAll.ID, 0); !client.IsNotFound(err) {
		t.Errorf("deliveries of a deleted webhook: %v", err)
	}
}

// TestBadSubscriptions: bad URLs and events are refused with a 400 and
// nothing is created; internal addresses need the server's allowance.
func TestBadSubscriptions(t *testing.T) {
	t.Parallel()
	srv := servertest.Start(t, server.Options{})
	c, ctx := srv.Client, t.Context()
	for _, req := range []api.CreateWebhookRequest{
		{URL: "ftp://example.com/x", Events: []string{api.EventSessionCreated}},
		{URL: "http://169.254.169.254/latest", Events: []string{api.EventSessionCreated}},
		{URL: "http://127.0.0.1:9/x", Events: []string{api.EventSessionCreated}},
		{URL: "http://[::1]/x", Events: []string{api.EventSessionCreated}},
		{URL: "https://user:pw@example.com/", Events: []string{api.EventSessionCreated}},
		{URL: "https://example.com/", Events: []string{"session.exploded"}},
		{URL: "https://example.com/", Events: nil},
		{URL: "https://example.com/", Events: []string{api.EventSessionCreated}, Outpost: "nowhere"},
	} {
		_, err := c.Webhooks.Create(ctx, req)
		var ae *client.Error
		if !asAPIError(err, &ae) || (ae.StatusCode != 400 && ae.StatusCode != 404) {
			t.Errorf("create %+v: %v, want a 400", req, err)
		}
	}
	if l := get(c.Webhooks.List(ctx))(t); len(l.Items) != 0 {
		t.Errorf("bad requests created %d webhooks", len(l.Items))
	}
}

// TestDisabledAfterPersistentFailure: a receiver that never succeeds gets
// its webhook disabled, visible on the webhook and in the metric; its
// deliveries fail and a redelivery is refused.
func TestDisabledAfterPersistentFailure(t *testing.T) {
	t.Parallel()
	o := fast()
	o.DisableAfter = 300 * time.Millisecond
	srv := servertest.Start(t, server.Options{Webhooks: o})
	c, ctx := srv.Client, t.Context()
	get(c.Outposts.Create(ctx, api.CreateOutpostRequest{Name: "alpha"}))(t)
	r := newReceiver(t, 0)
	r.always = true
	h := get(c.Webhooks.Create(ctx, api.CreateWebhookRequest{URL: r.srv.URL, Events: []string{api.EventSessionCreated}}))(t)
	r.mu.Lock()
	r.secret = h.Secret
	r.mu.Unlock()
	session(t, c, "alpha")
	var hook api.Webhook
	waitFor(t, "the webhook disabled", func() bool {
		l := get(c.Webhooks.List(ctx))(t)
		hook = l.Items[0]
		return hook.DisabledAt != nil
	})
	if hook.FailingSince == nil || !strings.Contains(hook.DisabledReason, "500") {
		t.Errorf("disabled webhook: %+v", hook)
	}
	log := get(c.Webhooks.Deliveries(ctx, h.ID, 0))(t)
	if len(log.Items) != 1 || log.Items[0].State != api.DeliveryFailed || log.Items[0].Attempts < 2 || log.Items[0].ResponseCode != 500 ||
		log.Items[0].Response == "" {
		t.Errorf("deliveries of a disabled webhook: %+v", log.Items)
	}
	var ae *client.Error
	if _, err := c.Webhooks.Redeliver(ctx, h.ID, log.Items[0].ID); !asAPIError(err, &ae) || ae.StatusCode != 409 {
		t.Errorf("redeliver on a disabled webhook: %v", err)
	}
	// The notice, on the web UI's list and the webhook's page.
	for _, path := range []string{"/ui/webhooks", "/ui/webhooks/" + h.ID} {
		if code, page := ui(t, srv, "GET", path, nil); code != 200 || !strings.Contains(page, "disabled-notice") || !strings.Contains(page, "500") {
			t.Errorf("%s of a disabled webhook: %d\n%s", path, code, page)
		}
	}
	metrics := scrape(t, srv.URL())
	if !hasValue(metrics, `outpost_webhook_deliveries_total{outcome="disabled"`, "1") {
		t.Errorf("metrics lack the disabled webhook:\n%s", grepLines(metrics, "webhook"))
	}
}

// TestSurvivesRestart: a delivery queued while the receiver is down is
// sent by the next server on the same data directory.
func TestSurvivesRestart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	const admin = "opt_restartadmintoken0000"
	// A port with nothing listening: the delivery fails and stays queued.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	o := fast()
	o.FirstRetry, o.MaxBackoff = 30*time.Millisecond, 30*time.Millisecond
	srv1, stop1, err := servertest.Serve(server.Options{DataDir: dir, AdminToken: admin, Webhooks: o})
	if err != nil {
		t.Fatal(err)
	}
	c1 := get(client.New(srv1.URL(), admin))(t)
	ctx := t.Context()
	get(c1.Outposts.Create(ctx, api.CreateOutpostRequest{Name: "alpha"}))(t)
	h := get(c1.Webhooks.Create(ctx, api.CreateWebhookRequest{URL: "http://" + addr + "/hook", Events: []string{api.EventSessionCreated}}))(t)
	id := session(t, c1, "alpha")
	waitFor(t, "a failed attempt", func() bool {
		l := get(c1.Webhooks.Deliveries(ctx, h.ID, 0))(t)
		return len(l.Items) == 1 && l.Items[0].Attempts >= 1
	})
	if err := stop1(); err != nil {
		t.Fatal(err)
	}

	// The receiver comes up where the URL points, then the next server.
	rl, err := net.Listen("tcp", addr)
	if err != nil {
		t.Skipf("the freed port was taken meanwhile: %v", err)
	}
	r := newReceiverOn(t, 0, rl)
	r.mu.Lock()
	r.secret = h.Secret
	r.mu.Unlock()
	srv2 := servertest.Start(t, server.Options{DataDir: dir, AdminToken: admin, Webhooks: o})
	waitFor(t, "the delivery after the restart", func() bool { return len(r.received()) == 1 })
	if g := r.received()[0]; g.Body.Data.Session == nil || g.Body.Data.Session.ID != id {
		t.Errorf("delivered %s", g.Raw)
	}
	// The receiver has the body before the sender records the answer.
	var l *api.WebhookDeliveryList
	waitFor(t, "the delivery recorded as delivered", func() bool {
		l = get(srv2.Client.Webhooks.Deliveries(ctx, h.ID, 0))(t)
		return l.Items[0].State == api.DeliveryDelivered
	})
	if l.Items[0].Attempts < 2 {
		t.Errorf("after the restart: %+v", l.Items[0])
	}
}

// TestReplicasDeliverOnce: two servers on one PostgreSQL database send
// every delivery once between them.
func TestReplicasDeliverOnce(t *testing.T) {
	t.Parallel()
	db := pgtest.Shared(t).Database(t)
	const admin = "opt_replicaadmintoken0000"
	key, err := sealed.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	var srvs []*servertest.Server
	for i := range 2 {
		srvs = append(srvs, servertest.Start(t, server.Options{DatabaseURL: db, AdminToken: admin, SecretKey: key,
			ReplicaID: fmt.Sprintf("r%d", i), Webhooks: fast()}))
	}
	c, ctx := srvs[0].Client, t.Context()
	get(c.Outposts.Create(ctx, api.CreateOutpostRequest{Name: "alpha"}))(t)
	r := newReceiver(t, 0)
	h := get(c.Webhooks.Create(ctx, api.CreateWebhookRequest{URL: r.srv.URL, Events: []string{api.EventSessionCreated}}))(t)
	r.mu.Lock()
	r.secret = h.Secret
	r.mu.Unlock()
	const n = 30
	for i := range n {
		session(t, srvs[i%2].Client, "alpha")
	}
	waitFor(t, "every delivery", func() bool { return len(r.received()) >= n })
	// Both senders keep polling a while: a duplicate would show up now.
	time.Sleep(300 * time.Millisecond)
	seen := map[string]int{}
	for _, g := range r.received() {
		seen[g.Delivery]++
	}
	for id, k := range seen {
		if k != 1 {
			t.Errorf("delivery %s sent %d times", id, k)
		}
	}
	if len(seen) != n {
		t.Errorf("%d distinct deliveries, want %d", len(seen), n)
	}
}

// TestSlowReceiverDoesNotSlowSessions: while a receiver holds a delivery
// without answering, and another webhook's URL refuses connections,
// sessions are still created and ended; once the receiver answers, every
// event arrives, in order per session.
func TestSlowReceiverDoesNotSlowSessions(t *testing.T) {
	t.Parallel()
	o := fast()
	o.Timeout = 20 * time.Second
	srv := servertest.Start(t, server.Options{Webhooks: o})
	c, ctx := srv.Client, t.Context()
	get(c.Outposts.Create(ctx, api.CreateOutpostRequest{Name: "alpha"}))(t)
	release := make(chan struct{})
	slow := newReceiver(t, 0)
	events := []string{api.EventSessionCreated, api.EventSessionEnded}
	h := get(c.Webhooks.Create(ctx, api.CreateWebhookRequest{URL: slow.srv.URL, Events: events}))(t)
	slow.mu.Lock()
	slow.secret, slow.gate, slow.arrived = h.Secret, release, make(chan struct{})
	slow.mu.Unlock()
	// A port nothing listens on: every attempt of this one fails.
	get(c.Webhooks.Create(ctx, api.CreateWebhookRequest{URL: "http://127.0.0.1:9/hook", Events: events}))(t)

	first := session(t, c, "alpha")
	<-slow.arrived
	var ids []string
	for range 5 {
		id := session(t, c, "alpha")
		get(c.Sessions.Terminate(ctx, id, "done"))(t)
		ids = append(ids, id)
	}
	if n := len(slow.received()); n != 0 {
		t.Fatalf("the held receiver answered %d requests", n)
	}
	close(release)
	want := 1 + 2*len(ids)
	waitFor(t, "every event after the receiver answered", func() bool { return len(slow.received()) >= want })
	perSession := map[string][]string{}
	for _, g := range slow.received() {
		perSession[g.Body.Data.Session.ID] = append(perSession[g.Body.Data.Session.ID], g.Event)
	}
	if got := strings.Join(perSession[first], " "); got != api.EventSessionCreated {
		t.Errorf("events of %s: %s", first, got)
	}
	for _, id := range ids {
		if got := strings.Join(perSession[id], " "); got != api.EventSessionCreated+" "+api.EventSessionEnded {
			t.Errorf("events of %s: %s, want created then ended", id, got)
		}
	}
}

// csrfField is the CSRF value of a form on a web UI page.
var csrfField = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// ui sends one request to srv's web UI signed in with its admin token,
// a form when form is not nil, and returns the status and the page.
func ui(t *testing.T, srv *servertest.Server, method, path string, form url.Values) (int, string) {
	t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequestWithContext(t.Context(), method, srv.URL()+path, body)
	if err != nil {
		t.Fatal(err)
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	req.AddCookie(&http.Cookie{Name: "outpost_token", Value: srv.AdminToken()})
	hc := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	return resp.StatusCode, string(b)
}

func asAPIError(err error, target **client.Error) bool {
	return errors.As(err, target)
}

func scrape(t *testing.T, base string) string {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

func grepLines(text, word string) string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if strings.Contains(l, word) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

func hasValue(text, label, value string) bool {
	for _, l := range strings.Split(text, "\n") {
		if strings.Contains(l, label) && strings.HasSuffix(l, " "+value) {
			return true
		}
	}
	return false
}
