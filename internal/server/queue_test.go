package server

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/waitfor"
)

func TestClaimIsExclusive(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Options{})
	ts.outpost("gpu")
	s := ts.session("gpu")
	machine := ts.token([]string{api.ScopeMachine}, "gpu")

	var wins, conflicts atomic.Int32
	var wg sync.WaitGroup
	for i := range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var e api.QueueEntry
			switch code := ts.do("POST", "/v1/queue/"+s.Metadata.SessionID+"/claim", machine, api.ClaimRequest{AcceptorID: fmt.Sprintf("w%d", i)}, &e); code {
			case 200:
				wins.Add(1)
				if e.Status.ConnectToken == "" || !strings.HasPrefix(e.Status.GatewayURL, "ws://") || e.Status.ClaimDeadline == nil {
					t.Errorf("claim answer lacks token, gateway or deadline: %+v", e.Status)
				}
			case 409:
				conflicts.Add(1)
			default:
				t.Errorf("claim: status %d", code)
			}
		}()
	}
	wg.Wait()
	if wins.Load() != 1 || conflicts.Load() != 49 {
		t.Fatalf("wins %d conflicts %d, want 1 and 49", wins.Load(), conflicts.Load())
	}
}

func TestClaimRenewReleaseAndLapse(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Options{ClaimTTL: 2 * time.Second})
	ts.outpost("dev")
	s := ts.session("dev")
	id := s.Metadata.SessionID
	machine := ts.token([]string{api.ScopeMachine}, "")

	var first, renewed api.QueueEntry
	ts.mustDo(200, "POST", "/v1/queue/"+id+"/claim", machine, api.ClaimRequest{AcceptorID: "a"}, &first)
	ts.mustDo(409, "POST", "/v1/queue/"+id+"/claim", machine, api.ClaimRequest{AcceptorID: "b"}, nil)
	ts.mustDo(200, "POST", "/v1/queue/"+id+"/claim", machine, api.ClaimRequest{AcceptorID: "a"}, &renewed)
	if renewed.Status.ConnectToken == first.Status.ConnectToken {
		t.Fatal("renewal did not issue a fresh connect token")
	}
	ts.mustDo(409, "POST", "/v1/queue/"+id+"/release", machine, api.ClaimRequest{AcceptorID: "b"}, nil)
	var rel api.QueueEntry
	ts.mustDo(200, "POST", "/v1/queue/"+id+"/release", machine, api.ClaimRequest{AcceptorID: "a"}, &rel)
	if rel.Status.Phase != api.PhasePending || rel.Status.AcceptorID != nil {
		t.Fatalf("after release: %+v", rel.Status)
	}

	// A claim that is not renewed lapses and the entry returns to pending.
	ts.mustDo(200, "POST", "/v1/queue/"+id+"/claim", machine, api.ClaimRequest{AcceptorID: "b"}, nil)
	waitfor.True(t, "claim to lapse", func() bool {
		var e api.QueueEntry
		ts.mustDo(200, "GET", "/v1/queue/"+id, machine, nil, &e)
		return e.Status.Phase == api.PhasePending
	})
	var o api.Outpost
	ts.mustDo(200, "GET", "/v1/outposts/dev", machine, nil, &o)
	if o.Status.QueueDepth != 1 || o.Status.ActiveClaims != 0 {
		t.Fatalf("outpost status %+v, want depth 1 and no claims", o.Status)
	}
	ts.mustDo(200, "POST", "/v1/queue/"+id+"/claim", machine, api.ClaimRequest{AcceptorID: "c"}, nil)
	ts.mustDo(404, "POST", "/v1/queue/ses_nosuchsession/claim", machine, api.ClaimRequest{AcceptorID: "c"}, nil)
}

func TestTerminatedSessionIsNeverHandedOut(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Options{})
	ts.outpost("dev")
	s := ts.session("dev")
	id := s.Metadata.SessionID
	machine := ts.token([]string{api.ScopeMachine}, "")
	var after api.Session
	ts.mustDo(200, "POST", "/v1/sessions/"+id+"/terminate", ts.admin, nil, &after)
	if after.Status.Status != api.StatusExit || after.Status.StatusDetail != api.DetailUserRequest || after.Status.Reason == "" {
		t.Fatalf("terminated session status %+v", after.Status)
	}
	// Listed as ended for the retention (TestEndedEntryStaysListed), but
	// never handed out.
	ts.mustDo(409, "POST", "/v1/queue/"+id+"/claim", machine, api.ClaimRequest{AcceptorID: "a"}, nil)
	ts.mustDo(204, "POST", "/v1/outposts/dev/queue:claim", machine, api.ClaimNextRequest{AcceptorID: "a"}, nil)
	var list api.QueueList
	ts.mustDo(200, "GET", "/v1/queue?outpost=dev", machine, nil, &list)
	if len(list.Items) != 1 || list.Items[0].Status.SessionStatus != api.QueueSessionTerminated || list.Items[0].Status.AcceptorID != nil {
		t.Fatalf("terminated session listed as %+v, want it unclaimed and terminated", list.Items)
	}
}

func TestQueueListPaging(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Options{})
	ts.outpost("a")
	ts.outpost("b")
	want := map[string]bool{}
	for range 7 {
		want[ts.session("a").Metadata.SessionID] = true
	}
	ts.session("b")
	machine := ts.token([]string{api.ScopeMachine}, "")
	got := map[string]bool{}
	cursor := ""
	pages := 0
	for {
		var list api.QueueList
		ts.mustDo(200, "GET", "/v1/queue?outpost=a&phase=pending&first=3&cursor="+cursor, machine, nil, &list)
		pages++
		if list.Total != 7 {
			t.Fatalf("total %d, want 7", list.Total)
		}
		for _, e := range list.Items {
			if e.Metadata.OutpostID == "" || e.Spec.Kind != api.KindNew || e.Status.SessionStatus != api.QueueSessionPending {
				t.Fatalf("bad entry %+v", e)
			}
			got[e.Metadata.SessionID] = true
		}
		cursor = list.Cursor
		if !list.HasNextPage {
			break
		}
	}
	if len(got) != 7 || pages != 3 {
		t.Fatalf("got %d entries in %d pages, want 7 in 3", len(got), pages)
	}
	for _, bad := range []string{"first=0", "first=201", "cursor=zz", "phase=running"} {
		ts.mustDo(400, "GET", "/v1/queue?"+bad, machine, nil, nil)
	}
}

// watch reads a queue watch stream until it ends, sending events on ch.
func watch(t *testing.T, ts *testServer, token, query string, ch chan<- api.WatchEvent) (keepalives int) {
	t.Helper()
	req, _ := http.NewRequest("GET", ts.url+"/v1/queue?watch=true&"+query, nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Errorf("watch: %v", err)
		return
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Errorf("watch content type %q", ct)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == ": keepalive":
			keepalives++
		case strings.HasPrefix(line, "data: "):
			var ev api.WatchEvent
			if err := json.Unmarshal([]byte(line[6:]), &ev); err != nil {
				t.Errorf("watch event %q: %v", line, err)
				continue
			}
			ch <- ev
		}
	}
	return keepalives
}

// TestListThenWatchMissesNothing creates sessions while a client lists and
// then watches across streams the server ends, and checks it sees every
// session and every deletion.
func TestListThenWatchMissesNothing(t *testing.T) {
	t.Parallel()
	// Ended sessions' entries go at once: the test counts deletions.
	ts := startServer(t, Options{WatchMaxDuration: 300 * time.Millisecond, KeepaliveInterval: 50 * time.Millisecond, EndedEntryRetention: -1})
	ts.outpost("w")
	machine := ts.token([]string{api.ScopeMachine}, "")
	created := map[string]bool{}
	for range 5 {
		created[ts.session("w").Metadata.SessionID] = true
	}
	var list api.QueueList
	ts.mustDo(200, "GET", "/v1/queue?outpost=w", machine, nil, &list)
	seen := map[string]string{}
	for _, e := range list.Items {
		seen[e.Metadata.SessionID] = api.WatchModified
	}
	cursor := list.Cursor

	stop := make(chan struct{})
	producerDone := make(chan struct{})
	go func() {
		defer close(producerDone)
		for i := range 20 {
			s := ts.session("w")
			created[s.Metadata.SessionID] = true
			if i%4 == 0 {
				ts.mustDo(200, "POST", "/v1/sessions/"+s.Metadata.SessionID+"/terminate", ts.admin, nil, nil)
			}
			time.Sleep(20 * time.Millisecond) // spread creations over several streams
		}
		close(stop)
	}()
	streams, keepalives := 0, 0
	for done := false; !done; {
		select {
		case <-stop:
			done = true // one more stream after the producer finished
		default:
		}
		ch := make(chan api.WatchEvent, 1000)
		keepalives += watch(t, ts, machine, "outpost=w&cursor="+cursor, ch)
		close(ch)
		streams++
		for ev := range ch {
			seen[ev.Object.Metadata.SessionID] = ev.Type
			cursor = ev.Cursor
		}
	}
	<-producerDone
	if streams < 2 {
		t.Fatalf("only %d watch streams; the server should end each quickly", streams)
	}
	if keepalives == 0 {
		t.Fatal("no keepalive comments seen")
	}
	deleted := 0
	for id := range created {
		typ, ok := seen[id]
		if !ok {
			t.Errorf("session %s never seen", id)
		}
		if typ == api.WatchDeleted {
			deleted++
		}
	}
	if deleted != 5 {
		t.Errorf("saw %d deletions, want 5", deleted)
	}
}

// TestWatchWithoutCursorStartsFromNow: a watch without a cursor opens with
// the live entries, not with the DELETED events of sessions that ended
// before it, and carries no re-list header; deletions after it opens come
// live.
func TestWatchWithoutCursorStartsFromNow(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Options{WatchMaxDuration: 2 * time.Second, EndedEntryRetention: -1})
	ts.outpost("fresh")
	machine := ts.token([]string{api.ScopeMachine}, "")
	gone := ts.session("fresh").Metadata.SessionID
	ts.mustDo(200, "POST", "/v1/sessions/"+gone+"/terminate", ts.admin, nil, nil)
	live := ts.session("fresh").Metadata.SessionID

	req, _ := http.NewRequest("GET", ts.url+"/v1/queue?watch=true&outpost=fresh", nil)
	req.Header.Set("Authorization", "Bearer "+machine)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if h := resp.Header.Get(api.HeaderWatchRelist); h != "" {
		t.Errorf("a watch without a cursor has the re-list header %q", h)
	}

	ch := make(chan api.WatchEvent, 16)
	done := make(chan struct{})
	go func() { defer close(done); defer close(ch); watch(t, ts, machine, "outpost=fresh", ch) }()
	first, ok := <-ch
	if !ok || first.Object.Metadata.SessionID != live || first.Type == api.WatchDeleted {
		t.Fatalf("the watch opened with %s %s, want the live session %s", first.Type, first.Object.Metadata.SessionID, live)
	}
	ts.mustDo(200, "POST", "/v1/sessions/"+live+"/terminate", ts.admin, nil, nil)
	deleted := false
	for ev := range ch {
		if ev.Object.Metadata.SessionID == gone {
			t.Errorf("the watch sent %s for %s, which ended before it opened", ev.Type, gone)
		}
		if ev.Type == api.WatchDeleted && ev.Object.Metadata.SessionID == live {
			deleted = true
		}
	}
	<-done
	if !deleted {
		t.Errorf("no DELETED event for %s, terminated while the watch was open", live)
	}
}

// TestHeldWatch: a watch with held_by carries the changes of the entries
// that acceptor holds and the release of one it showed, nothing of the
// others', and bookmarks that move its cursor past them; a bad held_by,
// or held_by on a list, is refused.
func TestHeldWatch(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Options{WatchMaxDuration: time.Second, KeepaliveInterval: 50 * time.Millisecond})
	ts.outpost("w")
	machine := ts.token([]string{api.ScopeMachine}, "")
	mine, theirs := ts.session("w").Metadata.SessionID, ts.session("w").Metadata.SessionID
	ts.session("w") // pending throughout: never shown
	ts.mustDo(200, "POST", "/v1/queue/"+mine+"/claim", machine, api.ClaimRequest{AcceptorID: "box-a"}, nil)
	ts.mustDo(200, "POST", "/v1/queue/"+theirs+"/claim", machine, api.ClaimRequest{AcceptorID: "box-b"}, nil)
	var list api.QueueList
	ts.mustDo(200, "GET", "/v1/queue?outpost=w", machine, nil, &list)

	ch := make(chan api.WatchEvent, 100)
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer close(ch)
		watch(t, ts, machine, "outpost=w&held_by=box-a&cursor=0", ch)
	}()
	// The stream has shown the claim before the release: a replay of
	// the released entry would pass it over (it is no longer box-a's).
	first := <-ch
	ts.mustDo(200, "POST", "/v1/queue/"+mine+"/release", machine, api.ClaimRequest{AcceptorID: "box-a"}, nil)
	ts.mustDo(200, "POST", "/v1/queue/"+theirs+"/release", machine, api.ClaimRequest{AcceptorID: "box-b"}, nil)
	var got []string
	bookmarked := false
	var cursor int64
	rest := make(chan api.WatchEvent, 100)
	rest <- first
	go func() {
		defer close(rest)
		for ev := range ch {
			rest <- ev
		}
	}()
	for ev := range rest {
		c, err := strconv.ParseInt(ev.Cursor, 10, 64)
		if err != nil || c <= cursor {
			t.Errorf("event %+v after cursor %d: cursors must rise", ev, cursor)
		}
		cursor = c
		if ev.Type == api.WatchBookmark {
			bookmarked = true
			continue
		}
		id := ev.Object.Metadata.SessionID
		if id != mine {
			t.Errorf("the held watch sent %s of %s, not box-a's", ev.Type, id)
		}
		a := ""
		if ev.Object.Status.AcceptorID != nil {
			a = *ev.Object.Status.AcceptorID
		}
		got = append(got, ev.Object.Status.Phase+":"+a)
	}
	<-done
	if want := []string{"claimed:box-a", "pending:"}; !slices.Equal(got, want) {
		t.Errorf("the held watch showed %s as %v, want %v", mine, got, want)
	}
	if !bookmarked {
		t.Error("no bookmark past the changes the held watch passed over")
	}
	var last api.QueueList
	ts.mustDo(200, "GET", "/v1/queue?outpost=w", machine, nil, &last)
	if want, _ := strconv.ParseInt(last.Cursor, 10, 64); cursor < want {
		t.Errorf("the held watch ended at cursor %d; the queue's last change is %d", cursor, want)
	}

	for _, q := range []string{
		"/v1/queue?outpost=w&watch=true&held_by=",
		"/v1/queue?outpost=w&watch=true&held_by=" + url.QueryEscape("not an id"),
		"/v1/queue?outpost=w&held_by=box-a",
	} {
		if msg := errorMessage(ts, "GET", q, ""); !strings.Contains(msg, "held_by") {
			t.Errorf("GET %s: %q, want an error naming held_by", q, msg)
		}
	}
}
