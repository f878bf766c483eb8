// Package storetest is the conformance suite every store.Store
// implementation must pass. An implementation's tests call Run with a
// function that opens a fresh, empty store, and RunSealed (session secrets
// sealed at rest) with one that gives a fresh database to open with keys.
//
// Times are compared at millisecond precision, the coarsest any
// implementation keeps, and are expected back in UTC.
package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/store"
)

// Run runs the conformance suite. open must return a new, empty store each
// time it is called; subtests run in parallel, each on its own store, and Run
// closes every store when its subtest ends.
func Run(t *testing.T, open func(t *testing.T) store.Store) {
	tests := []struct {
		name string
		fn   func(t *testing.T, s store.Store)
	}{
		{"Outposts", testOutposts},
		{"OutpostStats", testOutpostStats},
		{"OutpostAllowedOrgIDs", testOutpostAllowedOrgIDs},
		{"SessionRoundTrip", testSessionRoundTrip},
		{"CreateSessionAssigns", testCreateSessionAssigns},
		{"ListSessions", testListSessions},
		{"MixedIDShapes", testMixedIDShapes},
		{"UpdateSessionWrites", testUpdateSessionWrites},
		{"UpdateSessionWithoutEntry", testUpdateSessionWithoutEntry},
		{"ClaimSessionWithoutEntry", testClaimSessionWithoutEntry},
		{"UpdateSessionNotFound", testUpdateSessionNotFound},
		{"UpdateSessionFnError", testUpdateSessionFnError},
		{"UpdateSessionRollsBack", testUpdateSessionRollsBack},
		{"Revs", testRevs},
		{"ListQueue", testListQueue},
		{"PruneQueue", testPruneQueue},
		{"LapsedClaims", testLapsedClaims},
		{"ClaimsOfToken", testClaimsOfToken},
		{"ClaimToken", testClaimToken},
		{"ClaimTokenRevokeOrder", testClaimTokenRevokeOrder},
		{"KeepAlive", testKeepAlive},
		{"ActiveSessions", testActiveSessions},
		{"ArtifactRetention", testArtifactRetention},
		{"Snapshots", testSnapshots},
		{"RemoteBinarySHA", testRemoteBinarySHA},
		{"Events", testEvents},
		{"Calls", testCalls},
		{"ConnectTokens", testConnectTokens},
		{"Tokens", testTokens},
		{"Users", testUsers},
		{"DeviceGrants", testDeviceGrants},
		{"OutpostLimits", testOutpostLimits},
		{"NetworkPolicy", testNetworkPolicy},
		{"OutpostDesktop", testOutpostDesktop},
		{"OutpostBudget", testOutpostBudget},
		{"Requirements", testRequirements},
		{"OutpostSecrets", testOutpostSecrets},
		{"Approvals", testApprovals},
		{"QueuePriority", testQueuePriority},
		{"ClaimLoad", testClaimLoad},
		{"OutpostCounts", testOutpostCounts},
		{"ConcurrentClaim", testConcurrentClaim},
		{"ConcurrentCapacity", testConcurrentCapacity},
		{"ConcurrentUpdates", testConcurrentUpdates},
		{"ConcurrentAppendEvents", testConcurrentAppendEvents},
		{"ConcurrentMixedAppends", testConcurrentMixedAppends},
		// Locks and worker presence, shared by every server on the store.
		{"Locks", testLocks},
		{"LockCounter", testLockCounter},
		{"Presence", testPresence},
		{"ConcurrentPresence", testConcurrentPresence},
		// Stores that are a ChangeFeed (several servers on one database).
		{"ChangeFeed", testChangeFeed},
		{"Replicas", testReplicas},
		// Server-assigned claims.
		{"ClaimNext", testClaimNext},
		{"ClaimNextConcurrent", testClaimNextConcurrent},
		// Entries of ended sessions stay listed until a sweep.
		{"TombstoneEnded", testTombstoneEnded},
		{"TombstoneEndedConcurrent", testTombstoneEndedConcurrent},
		// The audit log: entries in the transaction of their change.
		{"AuditInTransaction", testAuditInTransaction},
		{"AuditList", testAuditList},
		{"AuditPrune", testAuditPrune},
		{"AuditConcurrent", testAuditConcurrent},
		{"Webhooks", testWebhooks},
		{"WebhooksConcurrentClaim", testWebhooksConcurrentClaim},
		// The fleet dashboard's series.
		{"FleetStats", testFleetStats},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := open(t)
			t.Cleanup(func() {
				if err := s.Close(); err != nil {
					t.Errorf("Close: %v", err)
				}
			})
			if err := s.Ping(t.Context()); err != nil {
				t.Fatalf("Ping: %v", err)
			}
			tc.fn(t, s)
		})
	}
}

// base is the suite's clock: a UTC time with whole milliseconds.
var base = time.Date(2025, 3, 4, 5, 6, 7, 890_000_000, time.UTC)

// at returns base plus d.
func at(d time.Duration) time.Time { return base.Add(d) }

// ptr returns a pointer to v.
func ptr[T any](v T) *T { return &v }

// errBoom is what failing fns return.
var errBoom = errors.New("boom")

// equal fails t unless got and want are deeply equal.
func equal[T any](t *testing.T, what string, got, want T) {
	t.Helper()
	if !reflect.DeepEqual(got, want) {
		t.Errorf("%s:\n got  %s\n want %s", what, dump(got), dump(want))
	}
}

// dump renders v as JSON for failure messages.
func dump(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprintf("%+v", v)
	}
	return string(b)
}

// must fails t now when err is not nil.
func must(t *testing.T, what string, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// wantErr fails t unless errors.Is(err, target).
func wantErr(t *testing.T, what string, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Errorf("%s: error %v, want %v", what, err, target)
	}
}

// newOutpost returns an outpost fixture.
func newOutpost(id, name string) store.Outpost {
	return store.Outpost{ID: id, Name: name, Platform: api.PlatformLinux, Description: "outpost " + name, CreatedAt: base}
}

// newSession returns a minimal session fixture of outpost created at base+d.
func newSession(id, outpost, title string, d time.Duration) store.Session {
	return store.Session{
		ID:        id,
		OutpostID: outpost,
		Spec:      api.SessionSpec{Outpost: outpost, Title: title, Agent: api.Agent{Kind: api.AgentScript}},
		Status:    api.StatusNew,
		CreatedAt: at(d),
		UpdatedAt: at(d),
	}
}

// newEntry returns a pending queue entry fixture for s.
func newEntry(s store.Session) *store.QueueEntry {
	return &store.QueueEntry{
		SessionID:     s.ID,
		OutpostID:     s.OutpostID,
		Kind:          api.KindNew,
		Platform:      api.PlatformLinux,
		Phase:         api.PhasePending,
		SessionStatus: api.QueueSessionPending,
		CreatedAt:     s.CreatedAt,
		UpdatedAt:     s.CreatedAt,
	}
}

// create stores a session with a pending entry and returns the entry.
func create(t *testing.T, s store.Store, sess store.Session) store.QueueEntry {
	t.Helper()
	e := newEntry(sess)
	must(t, "CreateSession "+sess.ID, s.CreateSession(t.Context(), sess, e, nil))
	return *e
}

// setEntry replaces a session's queue entry through UpdateSession and
// returns it with its new rev.
func setEntry(t *testing.T, s store.Store, id string, change func(e *store.QueueEntry)) store.QueueEntry {
	t.Helper()
	m, err := s.UpdateSession(t.Context(), id, func(_ store.Session, e store.QueueEntry) (store.Mutation, error) {
		change(&e)
		return store.Mutation{Entry: &e}, nil
	})
	must(t, "UpdateSession "+id, err)
	return *m.Entry
}

// claim makes e claimed by acceptor until deadline, in a new epoch.
func claim(acceptor string, deadline time.Time) func(e *store.QueueEntry) {
	return func(e *store.QueueEntry) {
		e.Phase, e.AcceptorID, e.ClaimDeadline = api.PhaseClaimed, acceptor, deadline
		e.Epoch++
		e.SessionStatus = api.QueueSessionRunning
	}
}

// ctx is shorthand for the test's context.
func ctx(t *testing.T) context.Context { return t.Context() }
