package server

import (
	"testing"

	"github.com/outpost-sh/outpost/api"
)

// TestOutpostDesktop: an outpost's desktop setting is set at creation and
// by PATCH, shown on the outpost, refused when out of bounds (nothing
// changed); its size is the default of its new sessions; while it is
// enabled, a server-assigned claim hands its sessions only to a claimer
// that gives a desktop, and claim answers say spec.desktop.
func TestOutpostDesktop(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Options{})
	var o api.Outpost
	ts.mustDo(201, "POST", "/v1/outposts", ts.admin, api.CreateOutpostRequest{Name: "desk",
		Desktop: &api.OutpostDesktop{Width: 1024, Height: 768}}, &o)
	if d := o.Spec.Desktop; d == nil || d.Enabled || d.Width != 1024 || d.Height != 768 {
		t.Fatalf("created outpost's desktop: %+v", d)
	}
	machine := ts.token([]string{api.ScopeMachine}, "desk")
	create := func(size *api.DesktopSize) api.Session {
		t.Helper()
		body := map[string]any{"outpost": "desk", "title": "t",
			"agent": map[string]any{"kind": "script", "steps": []any{map[string]any{"tool": "exec", "args": map[string]any{"command": "true"}}}}}
		if size != nil {
			body["desktop"] = size
		}
		var s api.Session
		ts.mustDo(201, "POST", "/v1/sessions", ts.admin, body, &s)
		return s
	}
	if s := create(nil); s.Spec.Desktop == nil || *s.Spec.Desktop != (api.DesktopSize{Width: 1024, Height: 768}) {
		t.Errorf("a session giving no size got %+v, want the outpost's 1024×768", s.Spec.Desktop)
	}
	if s := create(&api.DesktopSize{Width: 640, Height: 480}); *s.Spec.Desktop != (api.DesktopSize{Width: 640, Height: 480}) {
		t.Errorf("a session's own size became %+v", s.Spec.Desktop)
	}
	next := func(req api.ClaimNextRequest) (int, api.QueueEntry) {
		t.Helper()
		var e api.QueueEntry
		code := ts.do("POST", "/v1/outposts/desk/queue:claim", machine, req, &e)
		return code, e
	}
	// Not enabled: any claimer, and the answer asks for no desktop.
	if code, e := next(api.ClaimNextRequest{AcceptorID: "plain"}); code != 200 || e.Spec.Desktop {
		t.Fatalf("claim while the desktop is not enabled: %d, spec.desktop %v", code, e.Spec.Desktop)
	}

	for name, body := range map[string]any{
		"too small": map[string]any{"desktop": map[string]any{"enabled": true, "width": 100, "height": 600}},
		"too large": map[string]any{"desktop": map[string]any{"enabled": true, "width": 800, "height": 9000}},
		"one side":  map[string]any{"desktop": map[string]any{"enabled": true, "width": 800}},
	} {
		if code := ts.do("PATCH", "/v1/outposts/desk", ts.admin, body, nil); code != 400 {
			t.Errorf("%s: status %d, want 400", name, code)
		}
	}
	o = api.Outpost{}
	ts.mustDo(200, "GET", "/v1/outposts/desk", ts.admin, nil, &o)
	if d := o.Spec.Desktop; d == nil || d.Enabled || d.Width != 1024 {
		t.Fatalf("a refused change changed the desktop: %+v", d)
	}

	o = api.Outpost{} // a fresh one: decoding into the old would keep its size
	ts.mustDo(200, "PATCH", "/v1/outposts/desk", ts.admin, map[string]any{"desktop": map[string]any{"enabled": true}}, &o)
	if d := o.Spec.Desktop; d == nil || !d.Enabled || d.Width != 0 {
		t.Fatalf("patched desktop: %+v", d)
	}
	if s := create(nil); s.Spec.Desktop != nil {
		t.Errorf("a session of an outpost without a size got %+v, want the default (none)", s.Spec.Desktop)
	}
	if code, _ := next(api.ClaimNextRequest{AcceptorID: "plain"}); code != 204 {
		t.Fatalf("claim by a claimer without a desktop: %d, want 204", code)
	}
	code, e := next(api.ClaimNextRequest{AcceptorID: "desk", Desktop: true})
	if code != 200 || !e.Spec.Desktop {
		t.Fatalf("claim by a claimer with a desktop: %d, spec.desktop %v; want 200 true", code, e.Spec.Desktop)
	}
	// A claim by id is the contract's: it takes the entry, and its answer
	// says the desktop too.
	id := create(nil).Metadata.SessionID
	e = api.QueueEntry{}
	ts.mustDo(200, "POST", "/v1/queue/"+id+"/claim", machine, api.ClaimRequest{AcceptorID: "by-id"}, &e)
	if !e.Spec.Desktop {
		t.Errorf("claim by id: spec.desktop false")
	}
	// {"enabled": false} with no size removes the setting.
	o = api.Outpost{}
	ts.mustDo(200, "PATCH", "/v1/outposts/desk", ts.admin, map[string]any{"desktop": map[string]any{"enabled": false}}, &o)
	if o.Spec.Desktop != nil {
		t.Fatalf("desktop after removal: %+v", o.Spec.Desktop)
	}
}
