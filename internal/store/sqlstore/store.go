package sqlstore

import (
	"context"
	"fmt"

	"github.com/outpost-sh/outpost/internal/store/sealed"
)

// Store is the part of store.Store written once for both databases: a
// plugin's Store embeds it and adds what only its database does.
type Store struct {
	name string
	db   Plugin
	d    *Dialect
	keys *sealed.Keyring
	sql  statements
	// resealedOutpost counts the outpost secrets OpenKeys sealed anew.
	resealedOutpost int
}

// statements are the statements of the dialect the core sends, spelled
// once.
type statements struct {
	heldClaims, lapsedClaims, raiseHorizon, pruneQueue string
	claimsOfToken                                      string
	outpostStats, outpostCounts                        string
	// getStateLocked, outpostLimitLocked and sessionExistsLocked are
	// GetStateSQL, OutpostLimitSQL and SessionExistsSQL with the
	// dialect's row locks, joined once rather than on every write.
	getStateLocked, outpostLimitLocked, sessionExistsLocked string
}

// NewStore returns the core of the store named name ("sqlite",
// "postgres": the prefix of its errors) that runs its statements on db,
// spelled as d says, and seals session secrets with keys (nil: plaintext).
func NewStore(name string, db Plugin, d *Dialect, keys *sealed.Keyring) Store {
	return Store{name: name, db: db, d: d, keys: keys, sql: statements{
		heldClaims:    d.HeldClaimsSQL(),
		lapsedClaims:  d.LapsedClaimsSQL(),
		claimsOfToken: d.ClaimsOfTokenSQL(),
		raiseHorizon:  d.RaiseQueueHorizonSQL(),
		pruneQueue:    PruneQueueSQL(d.Tombstone),
		outpostStats:  d.OutpostStatsSQL(false),
		outpostCounts: d.OutpostStatsSQL(true),

		getStateLocked:      GetStateSQL + d.Lock.Row,
		outpostLimitLocked:  OutpostLimitSQL + d.Lock.Outpost,
		sessionExistsLocked: SessionExistsSQL + d.Lock.Row,
	}}
}

// errorf wraps err, mapped to a store error, with the store's name and
// what failed.
func (s *Store) errorf(err error, format string, args ...any) error {
	return fmt.Errorf("%s: %s: %w", s.name, fmt.Sprintf(format, args...), s.d.MapErr(err))
}

// QueryAll runs query on q and reads every row with scan.
func QueryAll[T any](ctx context.Context, q Querier, scan func(Scanner) (T, error), query string, args ...any) ([]T, error) {
	rows, err := q.Query(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	return Collect(rows, scan)
}
