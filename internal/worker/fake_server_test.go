package worker

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/client"
)

// fakeServer is the part of the Outpost API a worker uses, over real HTTP.
type fakeServer struct {
	t        *testing.T
	platform string
	ttl      time.Duration

	mu              sync.Mutex // guards the fields below
	entries         map[string]*api.QueueEntry
	watchEvents     []api.WatchEvent // sent on the next watch only
	watches         int
	claims          []string // "session acceptor" per successful claim
	releases        []string // "session acceptor"
	refuseRenewals  bool
	statusAfterExit string          // session_status reported by GET once claimed
	asStored        map[string]bool // entries GET reports as stored, statusAfterExit aside
	claimed         chan string
	heartbeats      []api.WorkerInfo      // in arrival order
	goodbyes        []string              // "outpost acceptor"
	failHeartbeats  bool                  // answer heartbeats with 500
	noGatewayURL    bool                  // claim answers without a gateway_url
	network         []api.NetworkDecision // decisions posted as machine events
	url             string
}

func newFakeServer(t *testing.T, platform string) (*fakeServer, *client.Client) {
	fs := &fakeServer{t: t, platform: platform, ttl: 5 * time.Minute, entries: map[string]*api.QueueEntry{},
		statusAfterExit: api.QueueSessionTerminated, claimed: make(chan string, 16)}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/outposts/{name}", fs.getOutpost)
	mux.HandleFunc("GET /v1/queue", fs.listOrWatch)
	mux.HandleFunc("GET /v1/queue/{id}", fs.getEntry)
	mux.HandleFunc("POST /v1/queue/{id}/claim", fs.claim)
	mux.HandleFunc("POST /v1/queue/{id}/release", fs.release)
	mux.HandleFunc("PUT /v1/outposts/{name}/workers/{acceptor}", fs.heartbeat)
	mux.HandleFunc("DELETE /v1/outposts/{name}/workers/{acceptor}", fs.goodbye)
	mux.HandleFunc("POST /v1/queue/{id}/events", fs.machineEvent)
	srv := httptest.NewServer(mux)
	fs.url = srv.URL
	t.Cleanup(srv.Close)
	c, err := client.New(srv.URL, "worker-secret-token")
	if err != nil {
		t.Fatal(err)
	}
	return fs, c
}

func pendingEntry(id string) *api.QueueEntry {
	return &api.QueueEntry{
		Metadata: api.QueueMetadata{SessionID: id, OutpostID: "op-1"},
		Spec:     api.QueueSpec{Kind: api.KindNew, Platform: HostPlatform()},
		Status:   api.QueueStatus{Phase: api.PhasePending, SessionStatus: api.QueueSessionPending},
	}
}

func (fs *fakeServer) add(e *api.QueueEntry) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	fs.entries[e.Metadata.SessionID] = e
}

func reply(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

func replyErr(w http.ResponseWriter, code int, msg string) {
	reply(w, code, api.ErrorResponse{Error: api.ErrorBody{Code: fmt.Sprint(code), Message: msg}})
}

func (fs *fakeServer) getOutpost(w http.ResponseWriter, r *http.Request) {
	if n := r.PathValue("name"); n != "dev" && n != "op-1" {
		replyErr(w, 404, "no such outpost")
		return
	}
	reply(w, 200, api.Outpost{Metadata: api.OutpostMetadata{OutpostID: "op-1"}, Spec: api.OutpostSpec{Name: "dev", Platform: fs.platform}})
}

func (fs *fakeServer) listOrWatch(w http.ResponseWriter, r *http.Request) {
	if r.URL.Query().Get("outpost") != "op-1" {
		replyErr(w, 400, "the worker must filter by outpost id")
		return
	}
	if r.URL.Query().Get("watch") != "true" {
		fs.mu.Lock()
		l := api.QueueList{Items: []api.QueueEntry{}, Cursor: "c1"}
		for _, id := range slices.Sorted(maps.Keys(fs.entries)) {
			if e := fs.entries[id]; e.Status.Phase == r.URL.Query().Get("phase") {
				l.Items = append(l.Items, *e)
			}
		}
		fs.mu.Unlock()
		reply(w, 200, l)
		return
	}
	fs.mu.Lock()
	fs.watches++
	events := fs.watchEvents
	fs.watchEvents = nil
	for _, ev := range events {
		e := ev.Object
		fs.entries[e.Metadata.SessionID] = &e
	}
	fs.mu.Unlock()
	w.Header().Set("Content-Type", "text/event-stream")
	f := w.(http.Flusher)
	fmt.Fprint(w, ": keepalive\n\n")
	for _, ev := range events {
		b, _ := json.Marshal(ev)
		fmt.Fprintf(w, "data: %s\n\n", b)
	}
	f.Flush()
	<-r.Context().Done()
}

func (fs *fakeServer) getEntry(w http.ResponseWriter, r *http.Request) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	e, ok := fs.entries[r.PathValue("id")]
	if !ok {
		replyErr(w, 404, "gone")
		return
	}
	out := *e
	if out.Status.Phase == api.PhaseClaimed && !fs.asStored[out.Metadata.SessionID] {
		out.Status.SessionStatus = fs.statusAfterExit
	}
	reply(w, 200, out)
}

func (fs *fakeServer) claim(w http.ResponseWriter, r *http.Request) {
	var req api.ClaimRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.AcceptorID == "" {
		replyErr(w, 400, "bad claim")
		return
	}
	fs.mu.Lock()
	defer fs.mu.Unlock()
	id := r.PathValue("id")
	e, ok := fs.entries[id]
	switch {
	case !ok:
		replyErr(w, 404, "gone")
		return
	case e.Status.Phase == api.PhaseClaimed && (*e.Status.AcceptorID != req.AcceptorID || fs.refuseRenewals):
		replyErr(w, 409, "held by another acceptor")
		return
	}
	deadline := time.Now().Add(fs.ttl).Unix()
	e.Status.Phase, e.Status.AcceptorID, e.Status.ClaimDeadline = api.PhaseClaimed, &req.AcceptorID, &deadline
	fs.claims = append(fs.claims, id+" "+req.AcceptorID)
	out := *e
	out.Status.ConnectToken = fmt.Sprintf("ct-%d", len(fs.claims))
	if !fs.noGatewayURL {
		out.Status.GatewayURL = "ws://gateway.test/v1/gateway"
	}
	select {
	case fs.claimed <- id:
	default:
	}
	reply(w, 200, out)
}

func (fs *fakeServer) release(w http.ResponseWriter, r *http.Request) {
	var req api.ClaimRequest
	_ = json.NewDecoder(r.Body).Decode(&req)
	fs.mu.Lock()
	defer fs.mu.Unlock()
	e, ok := fs.entries[r.PathValue("id")]
	if !ok || e.Status.AcceptorID == nil || *e.Status.AcceptorID != req.AcceptorID {
		replyErr(w, 409, "not held")
		return
	}
	fs.releases = append(fs.releases, r.PathValue("id")+" "+req.AcceptorID)
	e.Status.Phase, e.Status.AcceptorID, e.Status.ClaimDeadline = api.PhasePending, nil, nil
	reply(w, 200, e)
}

func (fs *fakeServer) snapshot() (claims, releases []string) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	return slices.Clone(fs.claims), slices.Clone(fs.releases)
}

func (fs *fakeServer) heartbeat(w http.ResponseWriter, r *http.Request) {
	var info api.WorkerInfo
	if err := json.NewDecoder(r.Body).Decode(&info); err != nil || r.PathValue("name") != "op-1" {
		replyErr(w, 400, "bad heartbeat")
		return
	}
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if fs.failHeartbeats {
		replyErr(w, 500, "heartbeats are down")
		return
	}
	fs.heartbeats = append(fs.heartbeats, info)
	reply(w, 200, api.Worker{AcceptorID: r.PathValue("acceptor"), OutpostID: "op-1", WorkerInfo: info, HeartbeatIntervalS: 30})
}

func (fs *fakeServer) goodbye(w http.ResponseWriter, r *http.Request) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	fs.goodbyes = append(fs.goodbyes, r.PathValue("name")+" "+r.PathValue("acceptor"))
	w.WriteHeader(http.StatusNoContent)
}

func (fs *fakeServer) presence() (heartbeats []api.WorkerInfo, goodbyes []string) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	return slices.Clone(fs.heartbeats), slices.Clone(fs.goodbyes)
}

func (fs *fakeServer) machineEvent(w http.ResponseWriter, r *http.Request) {
	var req api.MachineEventRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.AcceptorID == "" {
		replyErr(w, 400, "bad machine event")
		return
	}
	fs.mu.Lock()
	fs.network = append(fs.network, req.Network...)
	fs.mu.Unlock()
	reply(w, 201, api.Event{Type: api.EventMachine})
}

func (fs *fakeServer) decisions() []api.NetworkDecision {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	return slices.Clone(fs.network)
}
