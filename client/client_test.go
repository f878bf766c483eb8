package client

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/backoff"
)

// testTimeout bounds every test's context.
const testTimeout = 10 * time.Second

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	t.Cleanup(cancel)
	return ctx
}

// newTestClient serves mux over loopback and returns a client of it that
// retries without waiting.
func newTestClient(t *testing.T, mux http.Handler) *Client {
	t.Helper()
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	c, err := New(srv.URL, "tok-123", WithUserAgent("client-test"))
	if err != nil {
		t.Fatal(err)
	}
	c.retry.wait = backoff.Policy{}
	return c
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

func writeErr(w http.ResponseWriter, status int, code, msg string) {
	writeJSON(w, status, api.ErrorResponse{Error: api.ErrorBody{Code: code, Message: msg}})
}

func startSSE(w http.ResponseWriter) http.Flusher {
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	f := w.(http.Flusher)
	f.Flush()
	return f
}

func TestNewRejectsBadURL(t *testing.T) {
	t.Parallel()
	for _, u := range []string{"", "127.0.0.1:7420", "ftp://x", "http://"} {
		if _, err := New(u, ""); err == nil {
			t.Errorf("New(%q) succeeded", u)
		}
	}
}

func TestErrorEnvelope(t *testing.T) {
	t.Parallel()
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/outposts/{name}", func(w http.ResponseWriter, r *http.Request) {
		writeErr(w, http.StatusNotFound, api.CodeNotFound, fmt.Sprintf("Outpost %q does not exist.", r.PathValue("name")))
	})
	mux.HandleFunc("POST /v1/queue/{id}/claim", func(w http.ResponseWriter, r *http.Request) {
		var req api.ClaimRequest
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.AcceptorID != "w1" {
			writeErr(w, http.StatusBadRequest, api.CodeBadRequest, "bad body")
			return
		}
		writeErr(w, http.StatusConflict, api.CodeConflict, "Session is claimed by another worker.")
	})
	mux.HandleFunc("DELETE /v1/tokens/{id}", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusBadGateway)
		fmt.Fprint(w, "<html>bad gateway</html>")
	})
	c := newTestClient(t, mux)
	ctx := testContext(t)

	_, err := c.Outposts.Get(ctx, "gpu box")
	var e *Error
	if !errors.As(err, &e) || e.StatusCode != 404 || e.Code != api.CodeNotFound || e.Message != `Outpost "gpu box" does not exist.` {
		t.Fatalf("Get error = %#v", err)
	}
	if !IsNotFound(err) || IsConflict(err) {
		t.Errorf("IsNotFound/IsConflict wrong for %v", err)
	}

	_, err = c.Queue.Claim(ctx, "sess-1", "w1")
	if !IsConflict(err) || err.Error() != "Session is claimed by another worker." {
		t.Errorf("Claim error = %v, want a conflict", err)
	}

	err = c.Tokens.Revoke(ctx, "t1")
	if !errors.As(err, &e) || e.StatusCode != 502 || e.Code != "http_502" || strings.Contains(e.Message, "<html>") {
		t.Errorf("non-JSON error = %#v", err)
	}
}

// A URL that leads to another web server is told apart from the API's own
// errors, for 4xx pages and for 200 pages alike, and is not retried.
func TestNotOutpostAnswers(t *testing.T) {
	t.Parallel()
	var gets atomic.Int32
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/outposts", func(w http.ResponseWriter, r *http.Request) {
		gets.Add(1)
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprint(w, "<html><body>Welcome to nginx</body></html>")
	})
	mux.HandleFunc("GET /v1/outposts/{name}", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		w.WriteHeader(http.StatusNotFound)
		fmt.Fprint(w, "<html><body>404 Not Found</body></html>")
	})
	mux.HandleFunc("GET /v1/sessions/{id}", func(w http.ResponseWriter, r *http.Request) {
		writeErr(w, http.StatusNotFound, api.CodeNotFound, "Session x does not exist.")
	})
	c := newTestClient(t, mux)
	ctx := testContext(t)

	_, err := c.Outposts.List(ctx)
	if !IsNotOutpost(err) || !strings.Contains(err.Error(), "200 OK with an HTML page") || gets.Load() != 1 {
		t.Errorf("HTML 200: %v (IsNotOutpost %v, %d GETs)", err, IsNotOutpost(err), gets.Load())
	}
	_, err = c.Outposts.Get(ctx, "dev")
	if !IsNotOutpost(err) || !IsNotFound(err) || !strings.Contains(err.Error(), "404 Not Found with an HTML page") {
		t.Errorf("HTML 404: %v", err)
	}
	if _, err = c.Sessions.Get(ctx, "x"); IsNotOutpost(err) || !IsNotFound(err) {
		t.Errorf("the API's own 404: %v, IsNotOutpost %v", err, IsNotOutpost(err))
	}
}

// A server that answers the public fleet API's {"detail": …} bodies only
// is understood too; the envelope wins when both are there.
func TestErrorDetailFallback(t *testing.T) {
	t.Parallel()
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/queue/{id}/claim", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusConflict, map[string]string{"detail": "Session is already claimed"})
	})
	mux.HandleFunc("POST /v1/outposts", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusUnprocessableEntity, map[string]any{"detail": []any{map[string]any{"loc": []string{"body", "name"}, "msg": "too short"}}})
	})
	mux.HandleFunc("GET /v1/outposts/{name}", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusNotFound, map[string]any{"error": map[string]string{"code": api.CodeNotFound, "message": "From the envelope."}, "detail": "From detail."})
	})
	c := newTestClient(t, mux)
	ctx := testContext(t)

	_, err := c.Queue.Claim(ctx, "devin-1", "w1")
	var e *Error
	if !IsConflict(err) || !errors.As(err, &e) || e.Message != "Session is already claimed" || e.Code != "http_409" {
		t.Errorf("claim error = %#v, want the detail as a 409", err)
	}
	_, err = c.Outposts.Create(ctx, api.CreateOutpostRequest{Name: "x"})
	if !errors.As(err, &e) || e.StatusCode != 422 || e.Message != `[{"loc":["body","name"],"msg":"too short"}]` {
		t.Errorf("create error = %#v, want the detail's JSON as the message", err)
	}
	_, err = c.Outposts.Get(ctx, "gpu")
	if !errors.As(err, &e) || e.Code != api.CodeNotFound || e.Message != "From the envelope." {
		t.Errorf("get error = %#v, want the envelope's message", err)
	}
}

func TestRetriesIdempotentReads(t *testing.T) {
	t.Parallel()
	var gets, posts atomic.Int32
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/sessions/{id}", func(w http.ResponseWriter, r *http.Request) {
		if gets.Add(1) < 3 {
			writeErr(w, http.StatusServiceUnavailable, api.CodeUnavailable, "busy")
			return
		}
		if r.Header.Get("Authorization") != "Bearer tok-123" || r.Header.Get("User-Agent") != "client-test" {
			writeErr(w, http.StatusUnauthorized, api.CodeUnauthorized, "no token")
			return
		}
		writeJSON(w, 200, api.Session{Metadata: api.SessionMetadata{SessionID: r.PathValue("id")}})
	})
	mux.HandleFunc("POST /v1/sessions", func(w http.ResponseWriter, r *http.Request) {
		posts.Add(1)
		writeErr(w, http.StatusServiceUnavailable, api.CodeUnavailable, "busy")
	})
	c := newTestClient(t, mux)
	ctx := testContext(t)

	s, err := c.Sessions.Get(ctx, "sess-9")
	if err != nil || s.Metadata.SessionID != "sess-9" || gets.Load() != 3 {
		t.Fatalf("Get = %+v, %v after %d tries", s, err, gets.Load())
	}
	if _, err := c.Sessions.Create(ctx, api.CreateSessionRequest{Outpost: "x"}); err == nil {
		t.Fatal("Create succeeded")
	}
	if posts.Load() != 1 {
		t.Errorf("POST sent %d times, want 1 (never retried)", posts.Load())
	}
}

func TestWatchParsesStream(t *testing.T) {
	t.Parallel()
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/queue", func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		if q.Get("watch") != "true" || q.Get("outpost") != "dev" || q.Get("cursor") != "c0" ||
			r.Header.Get("Accept") != "text/event-stream" {
			writeErr(w, 400, api.CodeBadRequest, "bad watch request: "+r.URL.RawQuery)
			return
		}
		f := startSSE(w)
		fmt.Fprint(w, ": keepalive\n\n")
		f.Flush()
		for i, typ := range []string{api.WatchModified, api.WatchDeleted} {
			b, _ := json.Marshal(api.WatchEvent{Type: typ, Cursor: fmt.Sprintf("c%d", i+1),
				Object: api.QueueEntry{Metadata: api.QueueMetadata{SessionID: fmt.Sprintf("s%d", i+1)}}})
			fmt.Fprintf(w, "data: %s\r\n\r\n: keepalive\n", b)
			f.Flush()
		}
		fmt.Fprint(w, "\ndata: {\"type\":\"MODIF") // cut off: must be dropped
	})
	c := newTestClient(t, mux)

	var got []string
	err := c.Queue.Watch(testContext(t), "dev", "c0", func(ev api.WatchEvent) error {
		got = append(got, ev.Type+" "+ev.Object.Metadata.SessionID+" "+ev.Cursor)
		return nil
	})
	if err != nil {
		t.Fatalf("Watch = %v, want nil when the server ends the stream", err)
	}
	want := []string{"MODIFIED s1 c1", "DELETED s2 c2"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("events = %q, want %q", got, want)
	}

	stop := errors.New("stop")
	err = c.Queue.Watch(testContext(t), "dev", "c0", func(api.WatchEvent) error { return stop })
	if err != stop {
		t.Errorf("Watch = %v, want the callback's error", err)
	}
}

func TestFollowResumesAfterDisconnect(t *testing.T) {
	t.Parallel()
	var (
		mu      sync.Mutex
		resumes []string
	)
	send := func(w http.ResponseWriter, f http.Flusher, ev api.Event) {
		b, _ := json.Marshal(ev)
		fmt.Fprintf(w, "id: %d\ndata: %s\n\n", ev.Seq, b)
		f.Flush()
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/sessions/{id}/events", func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		n := len(resumes)
		resumes = append(resumes, r.URL.Query().Get("after")+"/"+r.Header.Get("Last-Event-ID"))
		mu.Unlock()
		f := startSSE(w)
		id := r.PathValue("id")
		switch n {
		case 0:
			send(w, f, api.Event{Seq: 1, SessionID: id, Type: api.EventStatus, Status: api.StatusRunning})
			send(w, f, api.Event{Seq: 2, SessionID: id, Type: api.EventCall, Tool: api.ToolExec})
			panic(http.ErrAbortHandler) // the connection breaks mid-stream
		case 1:
			// A clean end without the end event: the client must reconnect.
			send(w, f, api.Event{Seq: 2, SessionID: id, Type: api.EventCall, Tool: api.ToolExec}) // replay
			send(w, f, api.Event{Seq: 0, SessionID: id, Type: api.EventOutput, Text: "spilled", Spilled: true})
			send(w, f, api.Event{Seq: 3, SessionID: id, Type: api.EventOutput, Text: "hi\n"})
		default:
			fmt.Fprint(w, ": keepalive\n\n")
			send(w, f, api.Event{Seq: 4, SessionID: id, Type: api.EventEnd, Status: api.StatusExit})
			send(w, f, api.Event{Seq: 5, SessionID: id, Type: api.EventStatus})
		}
	})
	c := newTestClient(t, mux)

	var seqs []int64
	err := c.Sessions.Follow(testContext(t), "sess-1", 0, func(ev api.Event) error {
		seqs = append(seqs, ev.Seq)
		return nil
	})
	if err != nil {
		t.Fatalf("Follow = %v", err)
	}
	if fmt.Sprint(seqs) != "[1 2 0 3 4]" {
		t.Errorf("seqs = %v, want [1 2 0 3 4]", seqs)
	}
	mu.Lock()
	defer mu.Unlock()
	if fmt.Sprint(resumes) != "[/ 2/2 3/3]" {
		t.Errorf("resume points (after/Last-Event-ID) = %q", resumes)
	}
}

func TestFollowStopsOnClientError(t *testing.T) {
	t.Parallel()
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/sessions/{id}/events", func(w http.ResponseWriter, r *http.Request) {
		writeErr(w, http.StatusNotFound, api.CodeNotFound, "Session does not exist.")
	})
	c := newTestClient(t, mux)
	err := c.Sessions.Follow(testContext(t), "nope", 0, func(api.Event) error { return nil })
	if !IsNotFound(err) {
		t.Errorf("Follow = %v, want not found", err)
	}
}

// The outposts list is paged the public fleet API's way: first and after
// in, end_cursor and has_next_page out (a server that sends only
// end_cursor, as the public one does, is followed too).
func TestListOutpostsFollowsPages(t *testing.T) {
	t.Parallel()
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/outposts", func(w http.ResponseWriter, r *http.Request) {
		p2 := "p2"
		switch r.URL.Query().Get("after") {
		case "":
			writeJSON(w, 200, api.OutpostList{Items: []api.Outpost{{Spec: api.OutpostSpec{Name: "a"}}}, EndCursor: &p2, HasNextPage: true, Total: 2})
		case "p2":
			writeJSON(w, 200, api.OutpostList{Items: []api.Outpost{{Spec: api.OutpostSpec{Name: "b"}}}, Total: 2})
		default:
			writeErr(w, http.StatusBadRequest, api.CodeBadRequest, "unexpected cursor")
		}
	})
	c := newTestClient(t, mux)
	l, err := c.Outposts.List(testContext(t))
	if err != nil || len(l.Items) != 2 || l.Items[1].Spec.Name != "b" || l.HasNextPage {
		t.Fatalf("List = %+v, %v", l, err)
	}
}

func TestBasePathPrefix(t *testing.T) {
	t.Parallel()
	mux := http.NewServeMux()
	mux.HandleFunc("GET /prefix/v1/queue/{id}", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 200, api.QueueEntry{Metadata: api.QueueMetadata{SessionID: r.PathValue("id")}})
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	c, err := New(srv.URL+"/prefix/", "")
	if err != nil {
		t.Fatal(err)
	}
	e, err := c.Queue.Get(testContext(t), "a/b")
	if err != nil || e.Metadata.SessionID != "a/b" {
		t.Fatalf("Get = %+v, %v", e, err)
	}
}

// TestCertificateErrorsAreNotRetried: a server certificate the client does
// not trust is the same on every try, so a read fails at once.
func TestCertificateErrorsAreNotRetried(t *testing.T) {
	t.Parallel()
	var handshakes atomic.Int32
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(204) }))
	srv.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			handshakes.Add(1)
		}
	}
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.StartTLS()
	t.Cleanup(srv.Close)
	c, err := New(srv.URL, "tok") // the system's roots: not httptest's certificate
	if err != nil {
		t.Fatal(err)
	}
	c.retry.wait = backoff.Policy{}
	err = c.Health(testContext(t))
	var ua x509.UnknownAuthorityError
	if !errors.As(err, &ua) {
		t.Fatalf("Health = %v, want an unknown authority", err)
	}
	if n := handshakes.Load(); n != 1 {
		t.Errorf("%d connections, want 1: a certificate error was retried", n)
	}
	// With a client trusting the server: served.
	c2, _ := New(srv.URL, "tok", WithHTTPClient(srv.Client()))
	if err := c2.Health(testContext(t)); err != nil {
		t.Fatalf("Health with the server's CA: %v", err)
	}
}
