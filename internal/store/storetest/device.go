package storetest

import (
	"errors"
	"testing"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/store"
)

func testDeviceGrants(t *testing.T, s store.Store) {
	g := store.DeviceGrant{
		DeviceHash: "dh1", UserCode: "BCDF-GHJK", ClientID: "outpost-cli", ClientName: "laptop",
		Scopes: []string{api.ScopeMachine}, Outpost: "gpu", SourceIP: "127.0.0.1",
		CreatedAt: base, ExpiresAt: at(10 * time.Minute), Interval: 5 * time.Second, State: store.DevicePending,
	}
	must(t, "create", s.CreateDeviceGrant(ctx(t), g, base, 2))
	wantErr(t, "duplicate user code", s.CreateDeviceGrant(ctx(t), store.DeviceGrant{DeviceHash: "dh9", UserCode: g.UserCode,
		CreatedAt: base, ExpiresAt: at(time.Minute), State: store.DevicePending}, base, 0), store.ErrConflict)
	g2 := g
	g2.DeviceHash, g2.UserCode = "dh2", "LMNP-QRST"
	must(t, "create second", s.CreateDeviceGrant(ctx(t), g2, base, 2))
	g3 := g
	g3.DeviceHash, g3.UserCode = "dh3", "VWXZ-BCDF"
	wantErr(t, "over the pending cap", s.CreateDeviceGrant(ctx(t), g3, base, 2), store.ErrTooManyDeviceGrants)

	got, err := s.DeviceGrantByUserCode(ctx(t), g.UserCode)
	must(t, "by user code", err)
	equal(t, "by user code", got, g)
	_, err = s.DeviceGrantByUserCode(ctx(t), "ZZZZ-ZZZZ")
	wantErr(t, "by missing user code", err, store.ErrNotFound)

	// An error of fn writes nothing and comes back as it was.
	boom := errors.New("boom")
	err = s.UpdateDeviceGrant(ctx(t), "dh1", func(g store.DeviceGrant) (store.DeviceUpdate, error) {
		g.State = store.DeviceDenied
		return store.DeviceUpdate{Grant: g}, boom
	})
	if !errors.Is(err, boom) {
		t.Errorf("update with a failing fn = %v, want boom", err)
	}
	wantErr(t, "update missing", s.UpdateDeviceGrant(ctx(t), "nope", func(g store.DeviceGrant) (store.DeviceUpdate, error) {
		return store.DeviceUpdate{Grant: g}, nil
	}), store.ErrNotFound)

	// Approve, then use: the grant and its token are written together.
	exp := at(time.Hour)
	must(t, "approve", s.UpdateDeviceGrant(ctx(t), "dh1", func(g store.DeviceGrant) (store.DeviceUpdate, error) {
		g.State, g.ApprovedBy, g.DecidedAt = store.DeviceApproved, "t-admin", ptr(at(time.Minute))
		g.LastPollAt, g.Interval = ptr(at(30*time.Second)), 10*time.Second
		g.Token = store.Token{Name: "login", Scopes: []string{api.ScopeMachine}, OutpostID: "op", ExpiresAt: &exp}
		return store.DeviceUpdate{Grant: g}, nil
	}))
	tok := store.Token{ID: "t-dev", Name: "login", Hash: "hdev", Scopes: []string{api.ScopeMachine}, OutpostID: "op", CreatedAt: at(2 * time.Minute), ExpiresAt: &exp}
	must(t, "use", s.UpdateDeviceGrant(ctx(t), "dh1", func(g store.DeviceGrant) (store.DeviceUpdate, error) {
		g.State, g.TokenID = store.DeviceUsed, tok.ID
		return store.DeviceUpdate{Grant: g, Token: &tok}, nil
	}))
	got, err = s.DeviceGrantByUserCode(ctx(t), g.UserCode)
	must(t, "by user code after use", err)
	want := g
	want.State, want.ApprovedBy, want.DecidedAt, want.TokenID = store.DeviceUsed, "t-admin", ptr(at(time.Minute)), "t-dev"
	want.LastPollAt, want.Interval = ptr(at(30*time.Second)), 10*time.Second
	want.Token = store.Token{Name: "login", Scopes: []string{api.ScopeMachine}, OutpostID: "op", ExpiresAt: &exp}
	equal(t, "after use", got, want)
	minted, err := s.TokenByHash(ctx(t), "hdev")
	must(t, "minted token", err)
	equal(t, "minted token", minted, tok)

	// A token that cannot be inserted leaves the grant as it was.
	dup := store.Token{ID: "t-dev2", Hash: "hdev", CreatedAt: base}
	wantErr(t, "use with a taken hash", s.UpdateDeviceGrant(ctx(t), "dh2", func(g store.DeviceGrant) (store.DeviceUpdate, error) {
		g.State = store.DeviceUsed
		return store.DeviceUpdate{Grant: g, Token: &dup}, nil
	}), store.ErrConflict)
	got, err = s.DeviceGrantByUserCode(ctx(t), g2.UserCode)
	must(t, "second after a failed use", err)
	equal(t, "second after a failed use", got, g2)

	// Expired grants go when a later one is created.
	g4 := g
	g4.DeviceHash, g4.UserCode, g4.CreatedAt, g4.ExpiresAt = "dh4", "HJKL-MNPQ", at(2*time.Hour), at(3*time.Hour)
	must(t, "create after expiry", s.CreateDeviceGrant(ctx(t), g4, at(2*time.Hour), 2))
	_, err = s.DeviceGrantByUserCode(ctx(t), g.UserCode)
	wantErr(t, "expired grant pruned", err, store.ErrNotFound)

	// Misses count within a window and start again after it.
	w := 15 * time.Minute
	n, err := s.DeviceMisses(ctx(t), "t-x", base, w)
	must(t, "misses of nobody", err)
	if n != 0 {
		t.Errorf("misses of nobody = %d", n)
	}
	for i := 1; i <= 3; i++ {
		n, err := s.AddDeviceMiss(ctx(t), "t-x", at(time.Duration(i)*time.Minute), w)
		must(t, "add miss", err)
		if n != i {
			t.Errorf("miss %d counted %d", i, n)
		}
	}
	if n, _ := s.DeviceMisses(ctx(t), "t-x", at(10*time.Minute), w); n != 3 {
		t.Errorf("misses in the window = %d, want 3", n)
	}
	if n, _ := s.DeviceMisses(ctx(t), "t-x", at(17*time.Minute), w); n != 0 {
		t.Errorf("misses after the window = %d, want 0", n)
	}
	if n, _ := s.AddDeviceMiss(ctx(t), "t-x", at(17*time.Minute), w); n != 1 {
		t.Errorf("first miss of a new window counted %d, want 1", n)
	}
	if n, _ := s.DeviceMisses(ctx(t), "t-y", at(17*time.Minute), w); n != 0 {
		t.Errorf("another approver's misses = %d, want 0", n)
	}
}
