package storetest

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/store"
)

// workerTTL is the suite's presence lifetime.
const workerTTL = 90 * time.Second

// heartbeat is a Worker of a heartbeat of acceptor on outpost at base+d.
func heartbeat(outpost, acceptor, instance string, d time.Duration) store.Worker {
	return store.Worker{
		OutpostID: outpost, AcceptorID: acceptor,
		Info:       api.WorkerInfo{Kind: api.WorkerKindWorker, Hostname: "box-" + acceptor, Instance: instance, MaxSessions: 1},
		LastSeenAt: at(d), ExpiresAt: at(d + workerTTL),
	}
}

// acceptors lists the acceptor ids of ws.
func acceptors(ws []store.Worker) []string {
	ids := []string{}
	for _, w := range ws {
		ids = append(ids, w.AcceptorID)
	}
	return ids
}

// testPresence covers PutWorker, DeleteWorker, ListWorkers, RecentWorkers,
// GetWorker and CountWorkers: a renewal keeps ConnectedAt and replaces the info, another
// live instance is refused naming the holder, entries without an instance
// take part in no check, expiry forgets an entry (and frees its place),
// the per-outpost cap, a goodbye of another instance, and an outpost's
// deletion taking its entries.
func testPresence(t *testing.T, s store.Store) {
	for _, o := range []store.Outpost{newOutpost("op_a", "a"), newOutpost("op_b", "b")} {
		must(t, "CreateOutpost", s.CreateOutpost(ctx(t), o))
	}
	if _, err := s.PutWorker(ctx(t), heartbeat("op_none", "w1", "", 0), 0); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("PutWorker on a missing outpost: %v, want ErrNotFound", err)
	}

	first, err := s.PutWorker(ctx(t), heartbeat("op_a", "w1", "inst-1", 0), 3)
	must(t, "first heartbeat", err)
	if !first.ConnectedAt.Equal(at(0)) || !first.LastSeenAt.Equal(at(0)) {
		t.Errorf("first heartbeat stored %+v, want connected and seen at base", first)
	}
	hb := heartbeat("op_a", "w1", "inst-1", 30*time.Second)
	hb.Info.SessionID, hb.Info.ActiveSessions = "ses_1", 1
	renewed, err := s.PutWorker(ctx(t), hb, 3)
	must(t, "renewal", err)
	want := hb
	want.ConnectedAt = at(0)
	equal(t, "renewed entry", renewed, want)
	list, err := s.ListWorkers(ctx(t), "op_a", at(31*time.Second))
	must(t, "ListWorkers", err)
	equal(t, "listed", list, []store.Worker{want})

	// Another live process under the same id is refused, naming the holder.
	_, err = s.PutWorker(ctx(t), heartbeat("op_a", "w1", "inst-2", 40*time.Second), 3)
	var inUse *store.AcceptorInUseError
	if !errors.As(err, &inUse) || !errors.Is(err, store.ErrConflict) {
		t.Fatalf("second instance: %v, want an AcceptorInUseError matching ErrConflict", err)
	}
	equal(t, "holder", inUse.Holder, want)
	// A heartbeat without an instance takes part in no check, either way.
	_, err = s.PutWorker(ctx(t), heartbeat("op_a", "w1", "", 41*time.Second), 3)
	must(t, "heartbeat without an instance", err)
	_, err = s.PutWorker(ctx(t), heartbeat("op_a", "w1", "inst-2", 42*time.Second), 3)
	must(t, "an instance after one without", err)

	// The cap counts live entries of one outpost; a known one renews.
	for _, id := range []string{"w2", "w3"} {
		_, err := s.PutWorker(ctx(t), heartbeat("op_a", id, "", 50*time.Second), 3)
		must(t, "PutWorker "+id, err)
	}
	if _, err := s.PutWorker(ctx(t), heartbeat("op_a", "w4", "", 50*time.Second), 3); !errors.Is(err, store.ErrTooManyWorkers) {
		t.Errorf("fourth acceptor: %v, want ErrTooManyWorkers", err)
	}
	_, err = s.PutWorker(ctx(t), heartbeat("op_a", "w3", "", 51*time.Second), 3)
	must(t, "renewal at the cap", err)
	_, err = s.PutWorker(ctx(t), func() store.Worker {
		w := heartbeat("op_b", "w4", "", 50*time.Second)
		w.Info.Kind = api.WorkerKindOrchestrator
		return w
	}(), 3)
	must(t, "another outpost", err)

	counts, err := s.CountWorkers(ctx(t), at(60*time.Second))
	must(t, "CountWorkers", err)
	equal(t, "counts", counts, []store.WorkerCount{
		{OutpostID: "op_a", Kind: api.WorkerKindWorker, N: 3},
		{OutpostID: "op_b", Kind: api.WorkerKindOrchestrator, N: 1},
	})

	// w1 was seen at 42 s: at 132 s it is gone, and its place is free.
	list, err = s.ListWorkers(ctx(t), "op_a", at(132*time.Second))
	must(t, "ListWorkers after w1 expired", err)
	equal(t, "live after w1 expired", acceptors(list), []string{"w2", "w3"})
	back, err := s.PutWorker(ctx(t), heartbeat("op_a", "w4", "inst-4", 132*time.Second), 3)
	must(t, "w4 in w1's place", err)
	if !back.ConnectedAt.Equal(at(132 * time.Second)) {
		t.Errorf("w4 connected at %v", back.ConnectedAt)
	}
	// An expired holder refuses nobody, and its successor connects anew.
	w1, err := s.PutWorker(ctx(t), heartbeat("op_a", "w1", "inst-9", 200*time.Second), 0)
	must(t, "w1 after its expiry, another instance", err)
	if !w1.ConnectedAt.Equal(at(200 * time.Second)) {
		t.Errorf("w1 reconnected at %v, want at 200 s", w1.ConnectedAt)
	}

	// A goodbye of another instance leaves the holder; the holder's and
	// one without an instance take the entry offline, where it stays.
	bye := at(210 * time.Second)
	gone, err := s.DeleteWorker(ctx(t), "op_a", "w4", "inst-x", bye)
	must(t, "DeleteWorker of another instance", err)
	if gone {
		t.Error("another instance's goodbye took the entry offline")
	}
	for _, c := range []struct{ acceptor, instance string }{{"w4", "inst-4"}, {"w1", ""}} {
		gone, err := s.DeleteWorker(ctx(t), "op_a", c.acceptor, c.instance, bye)
		must(t, "DeleteWorker", err)
		if !gone {
			t.Errorf("goodbye of %s (%q) took nothing offline", c.acceptor, c.instance)
		}
	}
	if gone, err := s.DeleteWorker(ctx(t), "op_a", "w1", "", bye.Add(time.Second)); err != nil || gone {
		t.Errorf("second goodbye: %v, %v; want nothing changed", gone, err)
	}
	list, err = s.ListWorkers(ctx(t), "op_a", bye.Add(time.Second))
	must(t, "ListWorkers after the goodbyes", err)
	equal(t, "live after the goodbyes", acceptors(list), []string{})

	// Offline entries are kept: listed by RecentWorkers with their last
	// heartbeat, one outpost's or every outpost's, and read by GetWorker.
	recent, err := s.RecentWorkers(ctx(t), "op_a", at(0))
	must(t, "RecentWorkers", err)
	equal(t, "kept entries", acceptors(recent), []string{"w1", "w2", "w3", "w4"})
	all, err := s.RecentWorkers(ctx(t), "", at(0))
	must(t, "RecentWorkers of every outpost", err)
	equal(t, "kept entries of every outpost", acceptors(all), []string{"w1", "w2", "w3", "w4", "w4"})
	if all[4].OutpostID != "op_b" {
		t.Errorf("the last entry is %s's, want op_b's", all[4].OutpostID)
	}
	since, err := s.RecentWorkers(ctx(t), "op_a", at(200*time.Second))
	must(t, "RecentWorkers since 200 s", err)
	equal(t, "entries live after 200 s", acceptors(since), []string{"w1", "w4"})
	w1got, err := s.GetWorker(ctx(t), "op_a", "w1")
	must(t, "GetWorker", err)
	if !w1got.ExpiresAt.Equal(bye) || !w1got.LastSeenAt.Equal(at(200*time.Second)) || w1got.Info.Instance != "inst-9" {
		t.Errorf("offline w1 = %+v, want last seen at 200 s and gone at 210 s", w1got)
	}
	if _, err := s.GetWorker(ctx(t), "op_a", "w9"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("GetWorker of an unknown acceptor: %v, want ErrNotFound", err)
	}

	// The cap counts live entries only: with w1..w4 offline, three new
	// acceptors fit under a cap of 3 and a fourth does not.
	for _, id := range []string{"w5", "w6", "w7"} {
		_, err := s.PutWorker(ctx(t), heartbeat("op_a", id, "", 300*time.Second), 3)
		must(t, "PutWorker "+id+" beside offline entries", err)
	}
	if _, err := s.PutWorker(ctx(t), heartbeat("op_a", "w8", "", 300*time.Second), 3); !errors.Is(err, store.ErrTooManyWorkers) {
		t.Errorf("w8 over the cap: %v, want ErrTooManyWorkers", err)
	}
	// A heartbeat after WorkerOfflineKeep forgets the outpost's entries
	// that went offline before it.
	late := 300*time.Second + store.WorkerOfflineKeep
	_, err = s.PutWorker(ctx(t), heartbeat("op_a", "w5", "", late), 3)
	must(t, "heartbeat a day later", err)
	recent, err = s.RecentWorkers(ctx(t), "op_a", at(0))
	must(t, "RecentWorkers a day later", err)
	equal(t, "kept a day later", acceptors(recent), []string{"w5", "w6", "w7"})

	must(t, "DeleteOutpost", s.DeleteOutpost(ctx(t), "op_b"))
	counts, err = s.CountWorkers(ctx(t), at(60*time.Second))
	must(t, "CountWorkers after the delete", err)
	for _, c := range counts {
		if c.OutpostID == "op_b" {
			t.Errorf("a deleted outpost's workers are counted: %+v", counts)
		}
	}
}

// testConcurrentPresence races heartbeats: 20 processes under one acceptor
// id (one wins, the rest are refused naming it) and 20 acceptors on an
// outpost capped at 5 (exactly 5 get in).
func testConcurrentPresence(t *testing.T, s store.Store) {
	must(t, "CreateOutpost", s.CreateOutpost(ctx(t), newOutpost("op_r", "race")))
	const n = 20
	race := func(hb func(i int) store.Worker, max int) (ok int, refused []error) {
		var mu sync.Mutex
		var wg sync.WaitGroup
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, err := s.PutWorker(ctx(t), hb(i), max)
				mu.Lock()
				defer mu.Unlock()
				if err == nil {
					ok++
				} else {
					refused = append(refused, err)
				}
			}()
		}
		wg.Wait()
		return ok, refused
	}
	ok, refused := race(func(i int) store.Worker {
		return heartbeat("op_r", "shared", fmt.Sprintf("inst-%d", i), 0)
	}, 0)
	if ok != 1 {
		t.Errorf("%d instances of one acceptor got in, want 1", ok)
	}
	list, err := s.ListWorkers(ctx(t), "op_r", at(time.Second))
	must(t, "ListWorkers", err)
	for _, err := range refused {
		var inUse *store.AcceptorInUseError
		if !errors.As(err, &inUse) || len(list) != 1 || inUse.Holder.Info.Instance != list[0].Info.Instance {
			t.Fatalf("refused with %v, want the holder %+v named", err, list)
		}
	}
	ok, refused = race(func(i int) store.Worker {
		return heartbeat("op_r", fmt.Sprintf("w%02d", i), "", 0)
	}, 5)
	if ok != 4 { // "shared" holds one of the five places
		t.Errorf("%d acceptors got in under a cap of 5 with one present, want 4", ok)
	}
	for _, err := range refused {
		if !errors.Is(err, store.ErrTooManyWorkers) {
			t.Errorf("refused with %v, want ErrTooManyWorkers", err)
		}
	}
}
