package server

import (
	"encoding/json"
	"fmt"
	"net/url"
	"reflect"
	"strings"
	"testing"

	"github.com/outpost-sh/outpost/api"
)

// TestCreateOutpostAllowedOrgIDs sends allowed_org_ids the way the public
// fleet API's clients do, through every outpost path, and checks it is
// stored and returned, null when absent, and refused with a 422 that names
// organizations (leaving nothing behind) when bad.
func TestCreateOutpostAllowedOrgIDs(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Options{})
	orch := ts.token([]string{api.ScopeOrchestrator}, "")

	// specOf reads spec.allowed_org_ids as raw JSON, so null and [] differ.
	specOf := func(body []byte) string {
		t.Helper()
		var o struct {
			Spec struct {
				AllowedOrgIDs json.RawMessage `json:"allowed_org_ids"`
			} `json:"spec"`
		}
		if err := json.Unmarshal(body, &o); err != nil {
			t.Fatalf("decode %s: %v", body, err)
		}
		return string(o.Spec.AllowedOrgIDs)
	}
	for i, tc := range []struct {
		prefix, orgs, want string
	}{
		{"/opbeta/outposts", `,"allowed_org_ids":["org-2f9990d15a5d4f139af863bdff50b3ae","org-1"]`, `["org-2f9990d15a5d4f139af863bdff50b3ae","org-1"]`},
		{"/v1/outposts", `,"allowed_org_ids":["org_a.b:c"]`, `["org_a.b:c"]`},
		{"/opbeta/outposts/outposts", `,"allowed_org_ids":[]`, `[]`},
		{"/opbeta/outposts", `,"allowed_org_ids":null`, `null`},
		{"/v1/outposts", ``, `null`},
	} {
		name := fmt.Sprintf("eks-%d", i)
		resp, body := ts.raw("POST", tc.prefix, orch, "application/json", `{"name":"`+name+`","description":"d"`+tc.orgs+`}`)
		if resp.StatusCode != 201 || specOf(body) != tc.want {
			t.Fatalf("create through %s: %d %s, want allowed_org_ids %s", tc.prefix, resp.StatusCode, body, tc.want)
		}
		for _, p := range []string{"/v1/outposts/", "/opbeta/outposts/", "/opbeta/outposts/outposts/"} {
			if resp, body := ts.raw("GET", p+name, orch, "", ""); resp.StatusCode != 200 || specOf(body) != tc.want {
				t.Errorf("GET %s%s: %d %s, want allowed_org_ids %s", p, name, resp.StatusCode, body, tc.want)
			}
		}
	}
	var list api.OutpostList
	ts.mustDo(200, "GET", "/opbeta/outposts", orch, nil, &list)
	if len(list.Items) != 5 || !reflect.DeepEqual(list.Items[1].Spec.AllowedOrgIDs, []string{"org_a.b:c"}) || list.Items[4].Spec.AllowedOrgIDs != nil {
		t.Fatalf("list: %+v", list.Items)
	}

	many := make([]string, api.MaxAllowedOrgIDs+1)
	for i := range many {
		many[i] = fmt.Sprintf("org-%d", i)
	}
	manyJSON, _ := json.Marshal(many)
	for name, orgs := range map[string]string{
		"empty id":      `[""]`,
		"space":         `["org 1"]`,
		"leading dash":  `["-org"]`,
		"slash":         `["org/1"]`,
		"too long":      `["` + strings.Repeat("o", 129) + `"]`,
		"too many":      string(manyJSON),
		"twice":         `["org-1","org-1"]`,
		"not a list":    `"org-1"`,
		"not strings":   `[1]`,
		"an object":     `{"org-1":true}`,
		"nested arrays": `[["org-1"]]`,
	} {
		resp, body := ts.raw("POST", "/opbeta/outposts", orch, "application/json", `{"name":"bad","allowed_org_ids":`+orgs+`}`)
		var env api.ErrorResponse
		if resp.StatusCode != 422 || json.Unmarshal(body, &env) != nil || !strings.Contains(env.Detail, "organization") || env.Detail != env.Error.Message {
			t.Errorf("%s: %d %s, want 422 with a detail about organizations", name, resp.StatusCode, body)
		}
	}
	ts.mustDo(404, "GET", "/v1/outposts/bad", orch, nil, nil)
	ts.mustDo(200, "GET", "/opbeta/outposts", orch, nil, &list)
	if list.Total != 5 {
		t.Fatalf("a refused create left an outpost behind: total %d", list.Total)
	}
	// The 100 that fit are fine.
	ts.mustDo(201, "POST", "/opbeta/outposts", orch, api.CreateOutpostRequest{Name: "full", AllowedOrgIDs: many[:api.MaxAllowedOrgIDs]}, nil)
}

// publicPage is the outposts list as the public fleet API's clients read
// it: no cursor, no total.
type publicPage struct {
	Items []struct {
		Metadata struct {
			OutpostID string `json:"outpost_id"`
		} `json:"metadata"`
		Spec struct {
			Name string `json:"name"`
		} `json:"spec"`
	} `json:"items"`
	EndCursor   *string `json:"end_cursor"`
	HasNextPage bool    `json:"has_next_page"`
}

// TestOutpostListPagedPublicStyle pages the outposts list the way K8S and
// PRV do, following only after, end_cursor and has_next_page, and checks
// every outpost is seen exactly once.
func TestOutpostListPagedPublicStyle(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Options{})
	want := map[string]bool{}
	for _, n := range []string{"echo", "alpha", "delta", "bravo", "charlie"} {
		want[ts.outpost(n).Metadata.OutpostID] = true
	}
	machine := ts.token([]string{api.ScopeMachine}, "")
	for _, prefix := range []string{"/opbeta/outposts", "/opbeta/outposts/outposts", "/v1/outposts"} {
		seen := map[string]int{}
		var names []string
		pages := 0
		after := ""
		for {
			q := url.Values{"first": {"2"}}
			if after != "" {
				q.Set("after", after)
			}
			resp, body := ts.raw("GET", prefix+"?"+q.Encode(), machine, "", "")
			if resp.StatusCode != 200 {
				t.Fatalf("%s page %d: %d %s", prefix, pages, resp.StatusCode, body)
			}
			var p publicPage
			if err := json.Unmarshal(body, &p); err != nil {
				t.Fatal(err)
			}
			pages++
			for _, it := range p.Items {
				seen[it.Metadata.OutpostID]++
				names = append(names, it.Spec.Name)
			}
			if !p.HasNextPage || p.EndCursor == nil {
				break
			}
			after = *p.EndCursor
			if pages > 10 {
				t.Fatalf("%s: paging does not end", prefix)
			}
		}
		if pages != 3 || len(seen) != 5 || strings.Join(names, ",") != "alpha,bravo,charlie,delta,echo" {
			t.Errorf("%s: %d pages, names %v", prefix, pages, names)
		}
		for id := range want {
			if seen[id] != 1 {
				t.Errorf("%s: outpost %s seen %d times", prefix, id, seen[id])
			}
		}
	}

	// Outpost's own names: cursor in, cursor out, with the total.
	var l api.OutpostList
	ts.mustDo(200, "GET", "/v1/outposts?first=3", machine, nil, &l)
	if len(l.Items) != 3 || !l.HasNextPage || l.Total != 5 || l.EndCursor == nil || l.Cursor != *l.EndCursor {
		t.Fatalf("first page: %+v", l)
	}
	ts.mustDo(200, "GET", "/v1/outposts?first=3&cursor="+url.QueryEscape(l.Cursor), machine, nil, &l)
	if len(l.Items) != 2 || l.HasNextPage || l.Items[0].Spec.Name != "delta" {
		t.Fatalf("second page: %+v", l)
	}
	// Without first, a page holds up to 100.
	ts.mustDo(200, "GET", "/opbeta/outposts", machine, nil, &l)
	if len(l.Items) != 5 || l.HasNextPage {
		t.Fatalf("default page: %+v", l)
	}
	// An empty page has no end cursor.
	resp, body := ts.raw("GET", "/opbeta/outposts?after="+url.QueryEscape(l.Cursor), machine, "", "")
	if resp.StatusCode != 200 || !strings.Contains(string(body), `"end_cursor":null`) || !strings.Contains(string(body), `"has_next_page":false`) {
		t.Fatalf("past the end: %d %s", resp.StatusCode, body)
	}
	for _, bad := range []string{"first=0", "first=201", "first=x", "after=%21%21", "after=" + formatOutpostCursor("Not A Label"), "after=YQ&cursor=Yg"} {
		ts.mustDo(400, "GET", "/opbeta/outposts?"+bad, machine, nil, nil)
	}
	// A token limited to one outpost pages over that one alone.
	limited := ts.token([]string{api.ScopeMachine}, "charlie")
	ts.mustDo(200, "GET", "/opbeta/outposts?first=1", limited, nil, &l)
	if len(l.Items) != 1 || l.Items[0].Spec.Name != "charlie" || l.HasNextPage || l.Total != 1 {
		t.Fatalf("limited token: %+v", l)
	}
}

// TestFleetOutpostPaths calls the outpost paths real fleet API clients
// use: PRV creates with POST /opbeta/outposts (no platform) and deletes
// with DELETE /opbeta/outposts/{outpost_id}, reading a second delete's 404
// as success.
func TestFleetOutpostPaths(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Options{})
	orch := ts.token([]string{api.ScopeOrchestrator}, "")
	var o api.Outpost
	ts.mustDo(201, "POST", "/opbeta/outposts", orch, map[string]any{"name": "eks-one-abcdef01", "description": "d", "allowed_org_ids": []string{"org-1"}}, &o)
	if o.Spec.Platform != api.PlatformLinux || !outpostIDShape.MatchString(o.Metadata.OutpostID) {
		t.Fatalf("created %+v", o)
	}
	var l api.OutpostList
	ts.mustDo(200, "GET", "/opbeta/outposts?first=100", orch, nil, &l)
	if len(l.Items) != 1 || l.Items[0].Metadata.OutpostID != o.Metadata.OutpostID {
		t.Fatalf("list %+v", l)
	}
	ts.mustDo(204, "DELETE", "/opbeta/outposts/"+o.Metadata.OutpostID, orch, nil, nil)
	ts.mustDo(404, "DELETE", "/opbeta/outposts/"+o.Metadata.OutpostID, orch, nil, nil)

	// The queue answers the older clients' pool parameter like outpost.
	ts.outpost("a")
	ts.outpost("b")
	sa := ts.session("a")
	ts.session("b")
	var q api.QueueList
	ts.mustDo(200, "GET", "/opbeta/outposts/devins?pool=a", orch, nil, &q)
	if len(q.Items) != 1 || q.Items[0].Metadata.SessionID != sa.Metadata.SessionID {
		t.Fatalf("queue of pool a: %+v", q.Items)
	}
}
