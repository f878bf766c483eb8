//go:build linux

package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"maps"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/outpost-sh/outpost/api"
)

// contractOutpost is an outpost as the public contract spells it (§4.2):
// a null platform is the default one.
type contractOutpost struct {
	Metadata struct {
		OutpostID string `json:"outpost_id"`
		AccountID string `json:"account_id"`
		CreatedAt int64  `json:"created_at"`
	} `json:"metadata"`
	Spec struct {
		Name        string  `json:"name"`
		Platform    *string `json:"platform"`
		Description string  `json:"description"`
	} `json:"spec"`
	Status struct {
		QueueDepth   int `json:"queue_depth"`
		ActiveClaims int `json:"active_claims"`
	} `json:"status"`
}

// contractWatchEvent is one data line of the queue's watch stream.
type contractWatchEvent struct {
	Type   string        `json:"type"`
	Object contractEntry `json:"object"`
	Cursor string        `json:"cursor"`
}

// The id shapes the public docs show, as clients check them.
var (
	contractSessionID = regexp.MustCompile(`^devin-[A-Za-z0-9-]+$`)
	contractOutpostID = regexp.MustCompile(`^outpost_env-`)
)

// objectFields are the fields of one fleet object: the contract's, the
// ones Outpost adds, and the contract's that Outpost leaves out. The field
// table of docs/api.md says the same.
type objectFields struct{ contract, added, absent []string }

var (
	entryFields = map[string]objectFields{
		"":         {contract: []string{"metadata", "spec", "status"}},
		"metadata": {contract: []string{"session_id", "outpost_id", "created_at", "updated_at"}, added: []string{"created_at_ms"}},
		// The network policy is sent only for a restricted session, and
		// desktop only in a claim's answer for an outpost that gives one; the
		// sessions here are unrestricted and without a desktop.
		"spec": {contract: []string{"kind", "platform", "remote_binary_sha", "network_policy"}, added: []string{"priority", "desktop", "requirements"},
			absent: []string{"network_policy", "desktop", "requirements"}},
		// connect_token and gateway_url are only in a claim's answer.
		"status": {contract: []string{"phase", "acceptor_id", "claim_deadline", "session_status", "connect_token", "gateway_url"},
			added: []string{"attempts", "max_attempts"}, absent: []string{"connect_token", "gateway_url"}},
	}
	claimFields = map[string]objectFields{
		"":         entryFields[""],
		"metadata": entryFields["metadata"],
		"spec":     entryFields["spec"],
		"status":   {contract: entryFields["status"].contract, added: entryFields["status"].added},
	}
	outpostFields = map[string]objectFields{
		"":         {contract: []string{"metadata", "spec", "status"}},
		"metadata": {contract: []string{"outpost_id", "account_id", "created_at"}},
		"spec": {contract: []string{"name", "platform", "description", "allowed_org_ids"},
			added: []string{"remote_binary_sha", "max_running", "max_attempts", "max_snapshot_bytes", "network_policy", "desktop", "requirements"}},
		"status": {contract: []string{"queue_depth", "active_claims"}},
	}
	queueListFields   = objectFields{contract: []string{"items", "cursor", "has_next_page", "total"}}
	outpostListFields = objectFields{contract: []string{"items", "end_cursor", "has_next_page"}, added: []string{"cursor", "total"}}
	watchEventFields  = objectFields{contract: []string{"type", "object", "cursor"}}
)

// checkFields checks that the JSON object raw has every field of f but the
// absent ones, and no field f does not name; it returns the fields.
func checkFields(t *testing.T, what string, raw json.RawMessage, f objectFields) map[string]json.RawMessage {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatalf("%s is no JSON object: %v: %s", what, err, raw)
	}
	for k := range m {
		if !slices.Contains(f.contract, k) && !slices.Contains(f.added, k) {
			t.Errorf("%s has field %q, which neither the contract nor docs/api.md's table names", what, k)
		}
		if slices.Contains(f.absent, k) {
			t.Errorf("%s has field %q, documented as absent", what, k)
		}
	}
	for _, k := range f.contract {
		if _, ok := m[k]; !ok && !slices.Contains(f.absent, k) {
			t.Errorf("%s lacks the contract's field %q", what, k)
		}
	}
	return m
}

// checkObject checks a metadata/spec/status object against fields.
func checkObject(t *testing.T, what string, raw json.RawMessage, fields map[string]objectFields) {
	t.Helper()
	top := checkFields(t, what, raw, fields[""])
	for _, part := range []string{"metadata", "spec", "status"} {
		checkFields(t, what+"."+part, top[part], fields[part])
	}
}

// checkTimestamps walks a JSON answer: every field named *_at or
// claim_deadline is null or an integer of Unix seconds, within a minute of
// now (expires_at, a presence's, up to the worker TTL later); every field
// named *_ms an integer of Unix milliseconds within a minute of now; and no
// string anywhere is a timestamp.
func checkTimestamps(t *testing.T, what string, raw []byte, now time.Time) {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	var walk func(path string, v any)
	walk = func(path string, v any) {
		switch x := v.(type) {
		case map[string]any:
			for k, e := range x {
				p := path + "." + k
				switch {
				case strings.HasSuffix(k, "_at") || k == "claim_deadline":
					checkInstant(t, what+p, e, now, time.Second, k == "expires_at")
				case strings.HasSuffix(k, "_ms"):
					checkInstant(t, what+p, e, now, time.Millisecond, false)
				default:
					walk(p, e)
				}
			}
		case []any:
			for i, e := range x {
				walk(path+"["+strconv.Itoa(i)+"]", e)
			}
		case string:
			if _, err := time.Parse(time.RFC3339, x); err == nil {
				t.Errorf("%s%s is a timestamp string %q; fleet timestamps are Unix seconds", what, path, x)
			}
		}
	}
	walk("", v)
}

func checkInstant(t *testing.T, what string, v any, now time.Time, unit time.Duration, future bool) {
	t.Helper()
	if v == nil {
		return
	}
	n, ok := v.(json.Number)
	i, err := n.Int64()
	if !ok || err != nil {
		t.Errorf("%s = %v, want an integer", what, v)
		return
	}
	at := time.Unix(0, 0).Add(time.Duration(i) * unit)
	lo, hi := now.Add(-time.Minute), now.Add(time.Minute)
	if future {
		hi = hi.Add(api.WorkerTTL)
	}
	if at.Before(lo) || at.After(hi) {
		t.Errorf("%s = %d is %s, not within a minute of now (%s): not Unix %s", what, i, at.UTC().Format(time.RFC3339), now.UTC().Format(time.RFC3339),
			map[time.Duration]string{time.Second: "seconds", time.Millisecond: "milliseconds"}[unit])
	}
}

// rawGet fetches path with the admin token and returns the body of a 200.
func (c *cluster) rawGet(path string) []byte {
	c.t.Helper()
	var raw json.RawMessage
	if code := c.api("GET", path, c.admin, nil, &raw); code != 200 {
		c.t.Fatalf("GET %s: %d", path, code)
	}
	return raw
}

// TestContractShapes decodes a real server's fleet answers — an outpost and
// the outposts list, a queue list page, a claim's answer, a watch event,
// and the presence list — into types written from the public contract
// alone (int64 seconds, *string where it is nullable), checks that they
// carry exactly the fields docs/api.md's table lists, that every
// timestamp is Unix seconds close to now, and that ids have the public
// shapes.
func TestContractShapes(t *testing.T) {
	t.Parallel()
	c := startCluster(t, "--claim-ttl", "30s")
	cc := &contractClient{t: t, api: c.url, token: c.admin}

	var created json.RawMessage
	if code := cc.do("POST", "/opbeta/outposts/outposts", map[string]any{"name": "shapes", "platform": "linux", "description": "d"}, &created); code != 201 {
		t.Fatalf("create outpost: %d", code)
	}
	var o contractOutpost
	if err := json.Unmarshal(created, &o); err != nil {
		t.Fatalf("outpost: %v: %s", err, created)
	}
	if !contractOutpostID.MatchString(o.Metadata.OutpostID) || o.Spec.Platform == nil || *o.Spec.Platform != "linux" {
		t.Errorf("created outpost %s", created)
	}
	checkObject(t, "outpost", created, outpostFields)
	checkTimestamps(t, "outpost", created, time.Now())

	raw := c.rawGet("/opbeta/outposts?first=100")
	var outposts struct {
		Items       []json.RawMessage `json:"items"`
		EndCursor   *string           `json:"end_cursor"`
		HasNextPage bool              `json:"has_next_page"`
	}
	if err := json.Unmarshal(raw, &outposts); err != nil || len(outposts.Items) != 1 || outposts.EndCursor == nil {
		t.Fatalf("outposts list %s: %v", raw, err)
	}
	checkFields(t, "outposts list", raw, outpostListFields)
	checkObject(t, "outposts list item", outposts.Items[0], outpostFields)
	checkTimestamps(t, "outposts list", raw, time.Now())

	var sess api.Session
	if code := c.api("POST", "/v1/sessions", c.admin, map[string]any{"outpost": "shapes", "title": "shapes",
		"agent": map[string]any{"kind": "script", "steps": []any{map[string]any{"tool": "exec", "args": map[string]any{"command": "true"}}}}}, &sess); code != 201 {
		t.Fatalf("create session: %d", code)
	}
	id := sess.Metadata.SessionID

	raw = c.rawGet("/opbeta/outposts/devins?outpost=" + url.QueryEscape(o.Metadata.OutpostID))
	var page struct {
		Items       []json.RawMessage `json:"items"`
		Cursor      string            `json:"cursor"`
		HasNextPage bool              `json:"has_next_page"`
		Total       int               `json:"total"`
	}
	if err := json.Unmarshal(raw, &page); err != nil || len(page.Items) != 1 || page.Total != 1 {
		t.Fatalf("queue list %s: %v", raw, err)
	}
	var pending contractEntry
	if err := json.Unmarshal(page.Items[0], &pending); err != nil {
		t.Fatalf("queue entry: %v", err)
	}
	if pending.Metadata.SessionID != id || !contractSessionID.MatchString(id) || pending.Metadata.OutpostID != o.Metadata.OutpostID ||
		pending.Status.AcceptorID != nil || pending.Status.ClaimDeadline != nil || pending.Spec.RemoteBinarySHA != nil {
		t.Errorf("pending entry %+v", pending)
	}
	checkFields(t, "queue list", raw, queueListFields)
	checkObject(t, "queue entry", page.Items[0], entryFields)
	checkTimestamps(t, "queue list", raw, time.Now())

	// A watch from the list's cursor sees the claim.
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", c.url+"/opbeta/outposts/devins?watch=true&outpost="+url.QueryEscape(o.Metadata.OutpostID)+
		"&cursor="+url.QueryEscape(page.Cursor), nil)
	req.Header.Set("Authorization", "Bearer "+c.admin)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()

	var claimRaw json.RawMessage
	if code := cc.do("POST", "/opbeta/outposts/devins/"+id+"/claim", map[string]string{"acceptor_id": "shape-checker"}, &claimRaw); code != 200 {
		t.Fatalf("claim: %d", code)
	}
	var claim contractEntry
	if err := json.Unmarshal(claimRaw, &claim); err != nil {
		t.Fatalf("claim answer: %v: %s", err, claimRaw)
	}
	if claim.Status.ConnectToken == "" || !strings.HasPrefix(claim.Status.GatewayURL, "ws") || claim.Status.AcceptorID == nil ||
		*claim.Status.AcceptorID != "shape-checker" || claim.Status.ClaimDeadline == nil || *claim.Status.ClaimDeadline <= time.Now().Unix() {
		t.Errorf("claim answer %s", claimRaw)
	}
	checkObject(t, "claim answer", claimRaw, claimFields)
	checkTimestamps(t, "claim answer", claimRaw, time.Now())

	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	var seen bool
	for !seen && sc.Scan() {
		line, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		var ev contractWatchEvent
		if err := json.Unmarshal([]byte(line), &ev); err != nil {
			t.Fatalf("watch event %s: %v", line, err)
		}
		var evRaw struct {
			Object json.RawMessage `json:"object"`
		}
		_ = json.Unmarshal([]byte(line), &evRaw)
		checkFields(t, "watch event", json.RawMessage(line), watchEventFields)
		checkObject(t, "watch event object", evRaw.Object, entryFields)
		checkTimestamps(t, "watch event", []byte(line), time.Now())
		seen = ev.Type == "MODIFIED" && ev.Object.Metadata.SessionID == id && ev.Object.Status.Phase == "claimed" && ev.Cursor != "" &&
			ev.Object.Status.ClaimDeadline != nil && *ev.Object.Status.ClaimDeadline == *claim.Status.ClaimDeadline
	}
	if !seen {
		t.Fatalf("the watch stream ended without the claim's event: %v", sc.Err())
	}

	// Presence, an Outpost extension, keeps to the same type.
	if code := c.api("PUT", "/v1/outposts/shapes/workers/shape-checker", c.admin, api.WorkerInfo{Kind: api.WorkerKindWorker, Hostname: "box", Version: "v", MaxSessions: 1}, nil); code != 200 {
		t.Fatalf("heartbeat: %d", code)
	}
	checkTimestamps(t, "workers list", c.rawGet("/v1/outposts/shapes/workers"), time.Now())
}

// TestFleetFieldTable checks that the field table of docs/api.md lists
// exactly the fields TestContractShapes holds the server to.
func TestFleetFieldTable(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("../../docs/api.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, _ := strings.Cut(string(doc), "### Fleet objects, field by field\n")
	section, _, _ = strings.Cut(section, "\n### ")
	all := func(f objectFields) []string { return append(slices.Clone(f.contract), f.added...) }
	parts := func(fields map[string]objectFields) []string {
		var out []string
		for _, p := range []string{"metadata", "spec", "status"} {
			for _, k := range all(fields[p]) {
				out = append(out, p+"."+k)
			}
		}
		return out
	}
	want := map[string][]string{
		"queue entry":      parts(entryFields),
		"queue list":       all(queueListFields),
		"watch event":      all(watchEventFields),
		"outpost":          parts(outpostFields),
		"outposts list":    all(outpostListFields),
		"connected worker": {"connected_at", "last_seen_at", "expires_at", "heartbeat_interval_s"},
	}
	got := map[string][]string{}
	object := ""
	field := regexp.MustCompile("`([^`]+)`")
	for line := range strings.Lines(section) {
		cells := strings.Split(line, "|")
		if len(cells) < 4 || strings.HasPrefix(strings.TrimSpace(cells[2]), "Field") || strings.HasPrefix(cells[2], "---") {
			continue
		}
		if o := strings.TrimSpace(cells[1]); o != "" {
			object = o
		}
		for _, m := range field.FindAllStringSubmatch(cells[2], -1) {
			got[object] = append(got[object], m[1])
		}
	}
	for object, fields := range want {
		slices.Sort(fields)
		g := slices.Clone(got[object])
		slices.Sort(g)
		if !slices.Equal(g, fields) {
			t.Errorf("docs/api.md lists %s fields %v, want %v", object, g, fields)
		}
	}
	if len(got) != len(want) {
		t.Errorf("docs/api.md's field table has objects %v", slices.Sorted(maps.Keys(got)))
	}
}
