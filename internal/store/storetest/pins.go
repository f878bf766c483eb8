package storetest

import (
	"testing"
	"time"

	"github.com/outpost-sh/outpost/internal/store"
)

// testRemoteBinarySHA checks the remote pins: an outpost's round-trips, and
// a queue entry's is written by CreateSession and kept by every later
// write, even one that tries to change it.
func testRemoteBinarySHA(t *testing.T, s store.Store) {
	o := newOutpost("op-pin", "pinned")
	o.RemoteBinarySHA = "1a2b3c4d5e6f"
	must(t, "create outpost", s.CreateOutpost(ctx(t), o))
	got, err := s.GetOutpost(ctx(t), "pinned")
	must(t, "get outpost", err)
	equal(t, "outpost", got, o)

	sess := newSession("s-pin", o.ID, "pinned", 0)
	e := newEntry(sess)
	e.RemoteBinarySHA = "abcdef"
	must(t, "create session", s.CreateSession(ctx(t), sess, e, nil))
	create(t, s, newSession("s-nopin", o.ID, "default", time.Second))

	claimed := setEntry(t, s, "s-pin", func(e *store.QueueEntry) {
		claim("acc", at(time.Minute))(e)
		e.RemoteBinarySHA = "ffffff" // ignored: the pin is fixed at creation
	})
	stored, err := s.GetQueueEntry(ctx(t), "s-pin")
	must(t, "get entry", err)
	if stored.RemoteBinarySHA != "abcdef" || stored.Rev != claimed.Rev || stored.AcceptorID != "acc" {
		t.Errorf("entry after claim: pin %q rev %d acceptor %q; want abcdef, %d, acc", stored.RemoteBinarySHA, stored.Rev, stored.AcceptorID, claimed.Rev)
	}
	list, _, err := s.ListQueue(ctx(t), store.QueueFilter{OutpostID: o.ID})
	must(t, "list queue", err)
	pins := map[string]string{}
	for _, e := range list {
		pins[e.SessionID] = e.RemoteBinarySHA
	}
	equal(t, "listed pins", pins, map[string]string{"s-pin": "abcdef", "s-nopin": ""})
}
