package client

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/outpost-sh/outpost/api"
)

func TestWorkersService(t *testing.T) {
	t.Parallel()
	var got []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = append(got, r.Method+" "+r.URL.EscapedPath()+query(r.URL.RawQuery))
		switch r.Method {
		case http.MethodPut:
			var info api.WorkerInfo
			if err := json.NewDecoder(r.Body).Decode(&info); err != nil || info.Kind != api.WorkerKindOrchestrator {
				w.WriteHeader(400)
				return
			}
			_ = json.NewEncoder(w).Encode(api.Worker{AcceptorID: "orch:1", WorkerInfo: info, HeartbeatIntervalS: 30})
		case http.MethodDelete:
			w.WriteHeader(http.StatusNoContent)
		default:
			_ = json.NewEncoder(w).Encode(api.WorkerList{Items: []api.Worker{{AcceptorID: "orch:1"}}, Total: 1})
		}
	}))
	defer srv.Close()
	c, err := New(srv.URL, "tok")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	w, err := c.Workers.Heartbeat(ctx, "dev box", "orch:1", api.WorkerInfo{Kind: api.WorkerKindOrchestrator, MaxSessions: 4})
	if err != nil || w.HeartbeatIntervalS != 30 || w.MaxSessions != 4 {
		t.Fatalf("Heartbeat = %+v, %v", w, err)
	}
	if err := c.Workers.Goodbye(ctx, "dev box", "orch:1"); err != nil {
		t.Fatalf("Goodbye = %v", err)
	}
	if err := c.Workers.GoodbyeInstance(ctx, "dev box", "orch:1", "inst-1"); err != nil {
		t.Fatalf("GoodbyeInstance = %v", err)
	}
	l, err := c.Workers.List(ctx, "dev box")
	if err != nil || l.Total != 1 {
		t.Fatalf("List = %+v, %v", l, err)
	}
	want := []string{"PUT /v1/outposts/dev%20box/workers/orch:1", "DELETE /v1/outposts/dev%20box/workers/orch:1",
		"DELETE /v1/outposts/dev%20box/workers/orch:1?instance=inst-1", "GET /v1/outposts/dev%20box/workers"}
	for i := range want {
		if i >= len(got) || got[i] != want[i] {
			t.Fatalf("requests %q, want %q", got, want)
		}
	}
}

func query(raw string) string {
	if raw == "" {
		return ""
	}
	return "?" + raw
}
