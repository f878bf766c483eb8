package server

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/queuefeed"
)

// liveWatch is an open queue watch stream whose events arrive on events
// until the stream ends, which closes it.
type liveWatch struct {
	resp   *http.Response
	events chan api.WatchEvent
}

// openWatch opens GET path (a watch) and reads its events in the
// background until the test ends.
func openWatch(t *testing.T, ts *testServer, token, path string) *liveWatch {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "GET", ts.url+path, nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		cancel()
		t.Fatalf("watch %s: %v", path, err)
	}
	lw := &liveWatch{resp: resp, events: make(chan api.WatchEvent, 100)}
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer close(lw.events)
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			line, ok := strings.CutPrefix(sc.Text(), "data: ")
			if !ok {
				continue
			}
			var ev api.WatchEvent
			if err := json.Unmarshal([]byte(line), &ev); err != nil {
				t.Errorf("watch event %q: %v", line, err)
				return
			}
			select {
			case lw.events <- ev:
			case <-ctx.Done():
				return
			}
		}
	}()
	t.Cleanup(func() {
		cancel()
		resp.Body.Close()
		<-done
	})
	return lw
}

// next returns the stream's next event, failing the test when none comes.
func (lw *liveWatch) next(t *testing.T) api.WatchEvent {
	t.Helper()
	select {
	case ev, ok := <-lw.events:
		if !ok {
			t.Fatal("the watch stream ended")
		}
		return ev
	case <-time.After(15 * time.Second):
		t.Fatal("no watch event within 15s")
	}
	return api.WatchEvent{}
}

// TestWatchForeignCursorRelists watches with cursors this server did not
// issue: the public fleet API's base64 cursor, one from the future (as
// after a database reset) and garbage. Each stream is a 200 that starts
// with the current live entries of the outpost, oldest change first, then
// goes on live; a list with such a cursor keeps its 400, and a cursor the
// server issued still replays.
func TestWatchForeignCursorRelists(t *testing.T) {
	t.Parallel()
	// Ended sessions' entries go at once: the test is about deletions.
	ts := startServer(t, Options{EndedEntryRetention: -1})
	ts.outpost("w")
	ts.outpost("other")
	machine := ts.token([]string{api.ScopeMachine}, "")
	first := ts.session("w").Metadata.SessionID
	gone := ts.session("w").Metadata.SessionID
	ts.session("other")
	second := ts.session("w").Metadata.SessionID
	ts.mustDo(200, "POST", "/v1/sessions/"+gone+"/terminate", ts.admin, nil, nil)
	ts.mustDo(200, "POST", "/opbeta/outposts/devins/"+second+"/claim", machine, api.ClaimRequest{AcceptorID: "a"}, nil)

	var l api.QueueList
	ts.mustDo(200, "GET", "/opbeta/outposts/devins?outpost=w", machine, nil, &l)
	if len(l.Items) != 2 || l.Items[0].Metadata.SessionID != first || l.Items[1].Metadata.SessionID != second {
		t.Fatalf("list %+v", l.Items)
	}
	maxRev, _ := strconv.ParseInt(l.Cursor, 10, 64)
	future := strconv.FormatInt(maxRev+1000, 10)

	for _, cursor := range []string{"djE6MTc4MTA1MDAwMC4w", future, "not a cursor!", "-3"} {
		ts.mustDo(400, "GET", "/opbeta/outposts/devins?outpost=w&cursor="+url.QueryEscape(cursor), machine, nil, nil)

		lw := openWatch(t, ts, machine, "/opbeta/outposts/devins?watch=true&outpost=w&cursor="+url.QueryEscape(cursor))
		if lw.resp.StatusCode != 200 || lw.resp.Header.Get("Content-Type") != "text/event-stream" || lw.resp.Header.Get(api.HeaderWatchRelist) != "true" {
			t.Fatalf("cursor %q: %d %v", cursor, lw.resp.StatusCode, lw.resp.Header)
		}
		// The re-list: exactly the live entries, as a list shows them.
		for i, want := range l.Items {
			ev := lw.next(t)
			if ev.Type != api.WatchModified || ev.Object.Metadata.SessionID != want.Metadata.SessionID ||
				ev.Object.Status.Phase != want.Status.Phase || ev.Cursor == "" {
				t.Fatalf("cursor %q: event %d = %+v, want %s as MODIFIED", cursor, i, ev, want.Metadata.SessionID)
			}
		}
		// Then live: a new session arrives (and no tombstone or entry of
		// another outpost came before it).
		fresh := ts.session("w").Metadata.SessionID
		ev := lw.next(t)
		if ev.Type != api.WatchModified || ev.Object.Metadata.SessionID != fresh || ev.Object.Status.Phase != api.PhasePending {
			t.Fatalf("cursor %q: live event %+v, want the new session %s", cursor, ev, fresh)
		}
		// Its cursor is one this server issued: a watch from it replays.
		again := openWatch(t, ts, machine, "/opbeta/outposts/devins?watch=true&outpost=w&cursor="+ev.Cursor)
		if again.resp.Header.Get(api.HeaderWatchRelist) != "" {
			t.Fatalf("a cursor of this server re-listed")
		}
		ts.mustDo(200, "POST", "/v1/sessions/"+fresh+"/terminate", ts.admin, nil, nil)
		for {
			ev := again.next(t)
			if ev.Object.Metadata.SessionID != fresh {
				t.Fatalf("after a replayed cursor: %+v, want only changes of %s", ev, fresh)
			}
			if ev.Type == api.WatchDeleted {
				break
			}
		}
	}

	// A cursor of this server older than every change replays them all,
	// tombstones included, as before.
	lw := openWatch(t, ts, machine, "/opbeta/outposts/devins?watch=true&outpost=w&cursor=0")
	if lw.resp.Header.Get(api.HeaderWatchRelist) != "" {
		t.Fatal("cursor 0 re-listed")
	}
	sawGone := false
	for range 3 {
		if ev := lw.next(t); ev.Object.Metadata.SessionID == gone && ev.Type == api.WatchDeleted {
			sawGone = true
		}
	}
	if !sawGone {
		t.Fatal("the replay from cursor 0 did not show the terminated session's tombstone")
	}
}

// TestWatchRelistAcrossPages re-lists more entries than one read of the
// store holds, while entries keep changing, and checks every live entry
// arrives and changes made during the re-list are not lost.
func TestWatchRelistAcrossPages(t *testing.T) {
	t.Parallel()
	// Ended sessions' entries go at once: the test is about deletions.
	ts := startServer(t, Options{EndedEntryRetention: -1})
	ts.outpost("big")
	machine := ts.token([]string{api.ScopeMachine}, "")
	live := map[string]bool{}
	for range queuefeed.Batch + 20 {
		live[ts.session("big").Metadata.SessionID] = true
	}
	lw := openWatch(t, ts, machine, "/v1/queue?watch=true&outpost=big&cursor=djE6MTc4MTA1MDAwMC4w")
	// A session ended now shows as DELETED, whether the re-list already
	// sent it or not.
	var ended string
	for id := range live {
		ended = id
		break
	}
	ts.mustDo(200, "POST", "/v1/sessions/"+ended+"/terminate", ts.admin, nil, nil)
	seen := map[string]string{}
	for len(seen) < len(live) || seen[ended] != api.WatchDeleted {
		ev := lw.next(t)
		seen[ev.Object.Metadata.SessionID] = ev.Type
	}
	for id := range live {
		if id != ended && seen[id] != api.WatchModified {
			t.Errorf("session %s: %q", id, seen[id])
		}
	}
}

// TestWatchAllOutpostsSeesNewSession: a queue watch with no outpost
// filter (the contract's `outpost` is optional) follows the feed of
// outpost "", which every outpost's change wakes too (on SQLite there is
// no change feed or backstop to make up for a missed wake-up).
func TestWatchAllOutpostsSeesNewSession(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Options{})
	ts.outpost("w")
	machine := ts.token([]string{api.ScopeMachine}, "")
	var l api.QueueList
	ts.mustDo(200, "GET", "/v1/queue", machine, nil, &l)
	lw := openWatch(t, ts, machine, "/v1/queue?watch=true&cursor="+l.Cursor)
	id := ts.session("w").Metadata.SessionID
	if ev := lw.next(t); ev.Object.Metadata.SessionID != id {
		t.Fatalf("event %+v, want session %s", ev, id)
	}
}
