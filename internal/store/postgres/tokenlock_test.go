package postgres

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/store"
	"github.com/outpost-sh/outpost/internal/store/postgres/pgtest"
	"github.com/outpost-sh/outpost/internal/store/sqlstore"
)

// A claim reads its token under the token's advisory lock, which claims
// share and a revocation takes alone.

// tokenStore opens a store (grouped or not) with tokens ids and pending
// sessions s0… of outpost op; params are added to the database's URL.
func tokenStore(t *testing.T, group int, params string, sessions int, tokens ...string) *Store {
	t.Helper()
	s, err := Open(t.Context(), pgtest.Shared(t).Database(t)+params, WithClaimGroup(group))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	now := time.Now()
	for _, id := range tokens {
		if err := s.CreateToken(t.Context(), store.Token{ID: id, Name: id, Hash: "h" + id, Scopes: []string{api.ScopeMachine}, CreatedAt: now}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range sessions {
		sess := store.Session{ID: fmt.Sprint("s", i), OutpostID: "op", Status: api.StatusNew, CreatedAt: now, UpdatedAt: now}
		e := &store.QueueEntry{OutpostID: "op", Kind: api.KindNew, Platform: api.PlatformLinux, Phase: api.PhasePending}
		if err := s.CreateSession(t.Context(), sess, e, nil); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

// revoking begins a revocation of token id that holds its lock and has
// written its row, uncommitted; commit ends it.
func revoking(t *testing.T, s *Store, id string) (commit func()) {
	t.Helper()
	tx, err := s.pool.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	q, args := dialect.Lock.Token(id, sqlstore.TokenExclusive)
	if _, err := tx.Exec(t.Context(), q, args...); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(t.Context(), `UPDATE tokens SET revoked_at = $1 WHERE id = $2`, time.Now().UnixMilli(), id); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	commit = func() {
		once.Do(func() {
			if err := tx.Commit(context.WithoutCancel(t.Context())); err != nil {
				t.Error(err)
			}
		})
	}
	// A test that fails first must not leave claims waiting for it (the
	// store closes after this runs).
	t.Cleanup(commit)
	return commit
}

// claimAsync claims session id (the next of outpost op for "") with
// token tok and reports its error.
func claimAsync(s *Store, ctx context.Context, id, tok string, tokens *atomic.Int64) <-chan error {
	done := make(chan error, 1)
	go func() {
		f := claimFn("acc", tokens)
		fn := func(sess store.Session, e store.QueueEntry, _ store.OutpostLoad) (store.Mutation, error) {
			return f(sess, e)
		}
		var err error
		if id == "" {
			_, err = s.ClaimNext(ctx, "op", time.Now(), tok, store.NextFilter{}, fn)
		} else {
			_, err = s.ClaimSession(ctx, id, time.Now(), tok, fn)
		}
		done <- err
	}()
	return done
}

// A claim that comes while a revocation of its token is under way waits
// for it and then reads the token revoked: it claims nothing. Alone or
// in a group, where the claim leaves the group (it must not wait holding
// the group's locks) and the group's other claim commits meanwhile; by
// id and by ClaimNext.
func TestClaimWaitsForRevocation(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		group  int
		id     string
		params string
	}{
		{0, "s0", ""}, {32, "s0", ""}, {0, "", ""}, {32, "", ""},
		// The store's transactions are read committed whatever the
		// database's default.
		{0, "s0", "&default_transaction_isolation=repeatable%20read"},
	} {
		group := tc.group
		t.Run(fmt.Sprintf("group-%d-next-%v-rr-%v", group, tc.id == "", tc.params != ""), func(t *testing.T) {
			s := tokenStore(t, group, tc.params, 2, "tok", "other")
			ctx := t.Context()
			var tokens atomic.Int64
			commit := revoking(t, s, "tok")
			var refused, other <-chan error
			if group == 0 {
				refused = claimAsync(s, ctx, tc.id, "tok", &tokens)
			} else {
				queueInGroup(t, s, func() { refused = claimAsync(s, ctx, tc.id, "tok", &tokens) },
					func() { other = claimAsync(s, ctx, "s1", "other", &tokens) })
			}
			if other != nil {
				select {
				case err := <-other:
					if err != nil {
						t.Fatalf("the group's other claim: %v", err)
					}
				case <-time.After(10 * time.Second):
					t.Fatal("the group's other claim waited for the revocation of a token it does not use")
				}
			}
			select {
			case err := <-refused:
				t.Fatalf("the claim finished while the revocation held its token's lock: %v", err)
			case <-time.After(300 * time.Millisecond):
			}
			commit()
			select {
			case err := <-refused:
				if !errors.Is(err, store.ErrTokenRevoked) {
					t.Fatalf("claim after the revocation: %v, want ErrTokenRevoked", err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the claim did not finish after the revocation committed")
			}
			e, err := s.GetQueueEntry(ctx, "s0")
			if err != nil {
				t.Fatal(err)
			}
			if e.Phase != api.PhasePending {
				t.Errorf("s0 after the refused claim: %s, want pending", e.Phase)
			}
			if tc.id == "" && other == nil {
				// Alone, the pick could have taken either.
				if e, err := s.GetQueueEntry(ctx, "s1"); err != nil || e.Phase != api.PhasePending {
					t.Errorf("s1 after the refused claim-next: %s %v, want pending", e.Phase, err)
				}
			}
		})
	}
}

// Claims with one token share its lock: a claim in its transaction does
// not hold back another with the same token.
func TestClaimsShareTokenLock(t *testing.T) {
	t.Parallel()
	s := tokenStore(t, 0, "", 2, "tok")
	ctx := t.Context()
	var tokens atomic.Int64
	second := make(chan error, 1)
	fn := claimFn("acc", &tokens)
	_, err := s.ClaimSession(ctx, "s0", time.Now(), "tok", func(sess store.Session, e store.QueueEntry, _ store.OutpostLoad) (store.Mutation, error) {
		// Inside the first claim's transaction, holding the token's
		// lock: the second must still go through.
		select {
		case err := <-claimAsync(s, ctx, "s1", "tok", &tokens):
			second <- err
		case <-time.After(10 * time.Second):
			second <- errors.New("the second claim waited for the first one's transaction")
		}
		return fn(sess, e)
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := <-second; err != nil {
		t.Fatal(err)
	}
}

// A claim of a group whose token was revoked is refused (its reads find
// the token revoked, before fn) and undone alone; the group's other
// claims, with a valid token, commit in the group.
func TestGroupRevokedToken(t *testing.T) {
	t.Parallel()
	s := tokenStore(t, 32, "", 4, "good", "bad")
	ctx := t.Context()
	now := time.Now()
	if err := s.RevokeToken(ctx, "bad", now); err != nil {
		t.Fatal(err)
	}
	ids := []string{"s0", "s1", "s2", "s3"}
	var tokens atomic.Int64
	errs := make([]error, len(ids))
	ran := make([]atomic.Bool, len(ids))
	claims := make([]func(), len(ids))
	for i, id := range ids {
		tok := "good"
		if i%2 == 1 {
			tok = "bad"
		}
		claims[i] = func() {
			fn := claimFn("acc", &tokens)
			_, errs[i] = s.ClaimSession(ctx, id, now, tok, func(sess store.Session, e store.QueueEntry, _ store.OutpostLoad) (store.Mutation, error) {
				ran[i].Store(true)
				return fn(sess, e)
			})
		}
	}
	before, _ := s.ClaimGroups()
	queueInGroup(t, s, claims...)
	if after, _ := s.ClaimGroups(); after != before+1 {
		t.Errorf("%d groups committed; want 1", after-before)
	}
	for i, id := range ids {
		e, err := s.GetQueueEntry(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if i%2 == 1 {
			if !errors.Is(errs[i], store.ErrTokenRevoked) || ran[i].Load() || e.Phase != api.PhasePending {
				t.Errorf("%s with the revoked token: %v, fn ran %v, %s; want refused before fn, pending", id, errs[i], ran[i].Load(), e.Phase)
			}
			continue
		}
		if errs[i] != nil || e.Phase != api.PhaseClaimed {
			t.Errorf("%s with the valid token: %v, %s; want claimed", id, errs[i], e.Phase)
		}
	}
}
