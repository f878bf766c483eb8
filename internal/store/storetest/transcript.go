package storetest

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/store"
)

func testEvents(t *testing.T, s store.Store) {
	create(t, s, newSession("s1", "op", "t", 0))
	create(t, s, newSession("s2", "op", "t", 0))
	first := []api.Event{
		{Time: 1, Type: api.EventRemoteConnected, Capabilities: &api.Capabilities{OS: "linux", Tools: []string{"shell"}}},
		{Time: 2, Type: api.EventCall, CallSeq: 1, Tool: "shell", Args: json.RawMessage(`{"cmd":"ls"}`)},
		{Time: 3, Type: api.EventOutput, CallSeq: 1, Stream: api.StreamStdout, Text: "a\nb\n"},
	}
	second := []api.Event{
		{Time: 4, Type: api.EventResult, CallSeq: 1, OK: ptr(false), ExitCode: ptr(2), Value: json.RawMessage(`[1,2]`), Error: "exit 2"},
		{Time: 5, Type: api.EventEnd, Status: api.StatusExit, StatusDetail: api.DetailFinished},
	}
	must(t, "append", s.AppendEvents(ctx(t), "s1", first))
	must(t, "append", s.AppendEvents(ctx(t), "s1", second))
	all := append(append([]api.Event(nil), first...), second...)
	for i, ev := range all {
		if ev.Seq != int64(i+1) || ev.SessionID != "s1" {
			t.Errorf("event %d: seq %d, session %q; want seq %d, session s1", i, ev.Seq, ev.SessionID, i+1)
		}
	}
	other := []api.Event{{Time: 6, Type: api.EventStatus, Status: api.StatusNew}}
	must(t, "append other", s.AppendEvents(ctx(t), "s2", other))
	if other[0].Seq != 1 {
		t.Errorf("first event of s2 has seq %d, want 1", other[0].Seq)
	}
	must(t, "append nothing", s.AppendEvents(ctx(t), "s1", nil))

	for _, tc := range []struct {
		after int64
		limit int
		want  []api.Event
	}{
		{0, 0, all},
		{0, 100, all},
		{2, 2, all[2:4]},
		{4, 0, all[4:]},
		{0, 1, all[:1]},
		{5, 0, nil},
	} {
		got, err := s.ListEvents(ctx(t), "s1", tc.after, tc.limit)
		must(t, "list events", err)
		equal(t, "list events", got, tc.want)
	}
	for _, tc := range []struct {
		limit int
		want  []api.Event
	}{
		{2, all[3:]},
		{5, all},
		{100, all},
		{0, nil},
	} {
		got, err := s.TailEvents(ctx(t), "s1", tc.limit)
		must(t, "tail events", err)
		equal(t, fmt.Sprintf("last %d events", tc.limit), got, tc.want)
	}
	got, err := s.ListEvents(ctx(t), "nope", 0, 0)
	must(t, "list events of missing session", err)
	if len(got) != 0 {
		t.Errorf("events of missing session: %v", got)
	}
	wantErr(t, "append to missing session", s.AppendEvents(ctx(t), "nope", []api.Event{{Type: api.EventStatus}}), store.ErrNotFound)
}

func testCalls(t *testing.T, s store.Store) {
	create(t, s, newSession("s1", "op", "t", 0))
	calls := func(cs ...store.Call) {
		t.Helper()
		_, err := s.UpdateSession(ctx(t), "s1", func(store.Session, store.QueueEntry) (store.Mutation, error) {
			return store.Mutation{Calls: cs}, nil
		})
		must(t, "update calls", err)
	}
	c1 := store.Call{SessionID: "s1", Seq: 1, Tool: "shell", Args: json.RawMessage(`{"cmd":"true"}`), CreatedAt: base}
	c2 := store.Call{SessionID: "s1", Seq: 2, Tool: "read", CreatedAt: at(time.Second)} // nil args
	c3 := store.Call{SessionID: "s1", Seq: 3, Tool: "shell", Args: json.RawMessage(`{}`), CreatedAt: at(2 * time.Second)}
	calls(c3, c1)
	calls(c2)
	got, err := s.ListCalls(ctx(t), "s1")
	must(t, "list calls", err)
	equal(t, "calls", got, []store.Call{c1, c2, c3})

	c2.Done, c2.OK, c2.Value, c2.DoneAt = true, true, json.RawMessage(`{"text":"hi"}`), ptr(at(3*time.Second))
	c3.Done, c3.Error, c3.DoneAt = true, "killed", ptr(at(4*time.Second))
	calls(c2, c3)
	got, err = s.ListCalls(ctx(t), "s1")
	must(t, "list calls", err)
	equal(t, "calls after replace", got, []store.Call{c1, c2, c3})

	got, err = s.ListCalls(ctx(t), "nope")
	must(t, "list calls of missing session", err)
	if len(got) != 0 {
		t.Errorf("calls of missing session: %v", got)
	}
}

func testConnectTokens(t *testing.T, s store.Store) {
	create(t, s, newSession("s1", "op", "t", 0))
	tokens := []store.ConnectToken{
		{Hash: "h1", SessionID: "s1", Epoch: 1, CreatedAt: base},
		{Hash: "h2", SessionID: "s1", Epoch: 2, CreatedAt: at(time.Minute)},
	}
	_, err := s.UpdateSession(ctx(t), "s1", func(store.Session, store.QueueEntry) (store.Mutation, error) {
		return store.Mutation{ConnectTokens: tokens}, nil
	})
	must(t, "insert connect tokens", err)
	for _, want := range tokens {
		got, err := s.LookupConnectToken(ctx(t), want.Hash)
		must(t, "lookup "+want.Hash, err)
		equal(t, "connect token", got, want)
	}
	_, err = s.LookupConnectToken(ctx(t), "nope")
	wantErr(t, "lookup missing", err, store.ErrNotFound)

	// A queue entry of epoch 2 prunes the tokens of earlier epochs only.
	_, err = s.UpdateSession(ctx(t), "s1", func(_ store.Session, e store.QueueEntry) (store.Mutation, error) {
		e.Epoch = 2
		return store.Mutation{Entry: &e}, nil
	})
	must(t, "write entry of epoch 2", err)
	_, err = s.LookupConnectToken(ctx(t), "h1")
	wantErr(t, "lookup token of a dead epoch", err, store.ErrNotFound)
	got, err := s.LookupConnectToken(ctx(t), "h2")
	must(t, "lookup token of the current epoch", err)
	equal(t, "connect token", got, tokens[1])

	// A claim prunes as any write of the entry does: moving to epoch 3
	// takes epoch 2's token; a renewal at epoch 3 keeps the tokens it has.
	claimAt := func(what string, epoch int64, hash string) {
		t.Helper()
		_, err := s.ClaimSession(ctx(t), "s1", base, "", func(_ store.Session, e store.QueueEntry, _ store.OutpostLoad) (store.Mutation, error) {
			e.Epoch = epoch
			return store.Mutation{Entry: &e, ConnectTokens: []store.ConnectToken{{Hash: hash, Epoch: epoch, CreatedAt: base}}}, nil
		})
		must(t, what, err)
	}
	claimAt("claim at epoch 3", 3, "h3")
	_, err = s.LookupConnectToken(ctx(t), "h2")
	wantErr(t, "lookup token of the epoch a claim moved past", err, store.ErrNotFound)
	claimAt("renew at epoch 3", 3, "h4")
	for _, h := range []string{"h3", "h4"} {
		_, err := s.LookupConnectToken(ctx(t), h)
		must(t, "lookup "+h+" after a renewal", err)
	}
}
