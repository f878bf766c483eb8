package sqlite

import (
	"context"
	"reflect"
	"testing"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/store"
	"github.com/outpost-sh/outpost/internal/store/sqlstore"
	"github.com/outpost-sh/outpost/internal/store/storetest"
)

func TestPluginBatches(t *testing.T) {
	s, _ := openTemp(t)
	defer s.Close()
	storetest.Batches(t, plugin{s})
}

// recorder is the plugin with every statement the core sends it written
// down, to see which statements a method costs.
type recorder struct {
	plugin
	sent *[]string
}

func (r recorder) Write(ctx context.Context, first func(*sqlstore.Batch), fn func(sqlstore.Tx) error) error {
	return r.plugin.Write(ctx, func(b *sqlstore.Batch) {
		if first != nil {
			first(b)
		}
		r.batch(b)
	}, func(tx sqlstore.Tx) error { return fn(recordingTx{tx, r}) })
}

func (r recorder) batch(b *sqlstore.Batch) {
	for _, it := range b.Items {
		*r.sent = append(*r.sent, it.SQL)
	}
}

type recordingTx struct {
	sqlstore.Tx
	r recorder
}

func (t recordingTx) QueryRow(ctx context.Context, q string, args ...any) sqlstore.Scanner {
	*t.r.sent = append(*t.r.sent, q)
	return t.Tx.QueryRow(ctx, q, args...)
}

func (t recordingTx) Query(ctx context.Context, q string, args ...any) (sqlstore.ClosingRows, error) {
	*t.r.sent = append(*t.r.sent, q)
	return t.Tx.Query(ctx, q, args...)
}

func (t recordingTx) Exec(ctx context.Context, q string, args ...any) (int64, error) {
	*t.r.sent = append(*t.r.sent, q)
	return t.Tx.Exec(ctx, q, args...)
}

func (t recordingTx) Send(ctx context.Context, b *sqlstore.Batch) error {
	t.r.batch(b)
	return t.Tx.Send(ctx, b)
}

func (t recordingTx) SendLast(ctx context.Context, b *sqlstore.Batch) error {
	t.r.batch(b)
	return t.Tx.SendLast(ctx, b)
}

// An update reads the transcript's highest seq only when it appends
// events (Dialect.SeqOnDemand); a claim, which nearly always does, reads it
// once with its entry (sqlstore.ClaimEntrySQL), never again. The
// events either appends still follow the ones appended before, by any
// path.
func TestUpdateReadsSeqOnDemand(t *testing.T) {
	t.Parallel()
	s, _ := openTemp(t)
	defer s.Close()
	var sent []string
	core := sqlstore.NewStore("sqlite", recorder{plugin{s}, &sent}, &dialect, s.keys)
	ctx := t.Context()
	now := time.UnixMilli(1700000000000)
	for _, id := range []string{"s1", "s2"} {
		sess := store.Session{ID: id, OutpostID: "op", Status: api.StatusNew, CreatedAt: now, UpdatedAt: now}
		e := &store.QueueEntry{OutpostID: "op", Kind: api.KindNew, Platform: api.PlatformLinux, Phase: api.PhasePending}
		if err := core.CreateSession(ctx, sess, e, []api.Event{{Time: 1, Type: api.EventStatus, Status: api.StatusNew}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := core.AppendEvents(ctx, "s1", []api.Event{{Time: 2, Type: api.EventOutput, Text: "a"}, {Time: 3, Type: api.EventOutput, Text: "b"}}); err != nil {
		t.Fatal(err)
	}
	seqReads := func() int {
		n := 0
		for _, q := range sent {
			if q == sqlstore.MaxEventSeqSQL || q == sqlstore.ClaimEntrySQL {
				n++
			}
		}
		return n
	}
	for _, tc := range []struct {
		name   string
		claim  bool
		events []api.Event
		reads  int
		seqs   []int64
	}{
		{name: "entry only", reads: 0},
		{name: "claim, entry only", claim: true, reads: 1},
		{name: "one event", events: []api.Event{{Time: 4, Type: api.EventOutput, Text: "c"}}, reads: 1, seqs: []int64{4}},
		{name: "claim, two events", claim: true, events: []api.Event{{Time: 5, Type: api.EventOutput}, {Time: 6, Type: api.EventOutput}}, reads: 1, seqs: []int64{5, 6}},
	} {
		sent = sent[:0]
		fn := func(_ store.Session, e store.QueueEntry, _ store.OutpostLoad) (store.Mutation, error) {
			e.Epoch++
			return store.Mutation{Entry: &e, Events: append([]api.Event(nil), tc.events...)}, nil
		}
		var m store.Mutation
		var err error
		if tc.claim {
			m, err = core.ClaimNext(ctx, "op", now, "", store.NextFilter{}, fn)
		} else {
			m, err = core.UpdateSession(ctx, "s1", func(sess store.Session, e store.QueueEntry) (store.Mutation, error) {
				return fn(sess, e, store.OutpostLoad{})
			})
		}
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if n := seqReads(); n != tc.reads {
			t.Errorf("%s: read the highest seq %d times, want %d; sent %q", tc.name, n, tc.reads, sent)
		}
		if m.Entry.SessionID != "s1" {
			// ClaimNext picks the oldest pending entry; both are, so the
			// tie goes to the first id.
			t.Fatalf("%s: updated session %s, want s1", tc.name, m.Entry.SessionID)
		}
		var got []int64
		for _, ev := range m.Events {
			got = append(got, ev.Seq)
		}
		if !reflect.DeepEqual(got, tc.seqs) {
			t.Errorf("%s: appended seqs %v, want %v", tc.name, got, tc.seqs)
		}
	}
	evs, err := s.ListEvents(ctx, "s1", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	for i, ev := range evs {
		if ev.Seq != int64(i+1) {
			t.Fatalf("stored event %d has seq %d: %+v", i, ev.Seq, evs)
		}
	}
	if len(evs) != 6 {
		t.Errorf("%d events stored, want 6", len(evs))
	}
}
