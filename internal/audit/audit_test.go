package audit

import (
	"context"
	"encoding/json"
	"testing"
	"time"
)

func chain(n int) []*Entry {
	var out []*Entry
	prev := ""
	for i := 1; i <= n; i++ {
		e := &Entry{Seq: int64(i), ID: IDFor(int64(i)), CreatedAt: time.UnixMilli(int64(1700000000000 + i)), Action: TokenCreate,
			Actor: Actor{Kind: ActorToken, ID: "tok_a", Name: "admin"}, Object: Object{Kind: ObjectToken, ID: "tok_b"},
			Data: json.RawMessage(`{"name":"ci"}`)}
		e.Hash = Chain(prev, e)
		prev = e.Hash
		out = append(out, e)
	}
	return out
}

func verify(es []*Entry, anchorSeq int64, anchorHash string, headSeq int64, headHash string) Verification {
	v := NewVerifier(anchorSeq, anchorHash)
	for _, e := range es {
		if !v.Next(e) {
			break
		}
	}
	return v.Finish(headSeq, headHash)
}

func TestVerify(t *testing.T) {
	es := chain(5)
	head := es[4]
	if got := verify(es, 0, "", head.Seq, head.Hash); !got.OK || got.Checked != 5 {
		t.Errorf("intact chain: %+v", got)
	}
	edited := chain(5)
	edited[2].Action = TokenRevoke
	if got := verify(edited, 0, "", head.Seq, head.Hash); got.OK || got.FirstBad != "audit-3" {
		t.Errorf("edited entry 3: %+v", got)
	}
	// Rehashing the edited entry moves the break to the next one.
	edited[2].Hash = Chain(edited[1].Hash, edited[2])
	if got := verify(edited, 0, "", head.Seq, head.Hash); got.OK || got.FirstBad != "audit-4" {
		t.Errorf("edited and rehashed entry 3: %+v", got)
	}
	deleted := append(append([]*Entry{}, es[:2]...), es[3:]...)
	if got := verify(deleted, 0, "", head.Seq, head.Hash); got.OK || got.FirstBad != "audit-4" {
		t.Errorf("deleted entry 3: %+v", got)
	}
	if got := verify(es[:4], 0, "", head.Seq, head.Hash); got.OK || got.FirstBad != "audit-5" {
		t.Errorf("deleted last entry: %+v", got)
	}
	// Pruned up to 2: the anchor carries the chain on.
	if got := verify(es[2:], 2, es[1].Hash, head.Seq, head.Hash); !got.OK {
		t.Errorf("pruned chain: %+v", got)
	}
	if got := verify(es[2:], 2, "forged", head.Seq, head.Hash); got.OK || got.FirstBad != "audit-3" {
		t.Errorf("pruned chain, wrong anchor: %+v", got)
	}
	if got := verify(nil, 0, "", 0, ""); !got.OK {
		t.Errorf("empty chain: %+v", got)
	}
}

func TestPendingOnce(t *testing.T) {
	ctx := context.Background()
	if e, _ := Pending(ctx); e != nil {
		t.Fatal("bare context carries an entry")
	}
	want := &Entry{Action: Login}
	ctx = With(ctx, want)
	e, done := Pending(ctx)
	if e != want {
		t.Fatalf("Pending = %v", e)
	}
	// Not committed (a rolled-back transaction): still pending.
	if e, _ := Pending(ctx); e != want || Committed(ctx) {
		t.Fatal("entry lost before its commit")
	}
	done()
	if e, _ := Pending(ctx); e != nil || !Committed(ctx) {
		t.Fatal("committed entry still pending")
	}
}

func TestSeqOf(t *testing.T) {
	for id, want := range map[string]int64{"audit-1": 1, "audit-42": 42, "audit-0": 0, "audit-01": 0, "x-1": 0, "audit-": 0} {
		got, ok := SeqOf(id)
		if got != want || ok != (want > 0) {
			t.Errorf("SeqOf(%q) = %d, %v", id, got, ok)
		}
	}
}
