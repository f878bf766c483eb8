package postgres

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/outpost-sh/outpost/internal/store"
	"github.com/outpost-sh/outpost/internal/store/sqlstore"
)

// CreateOutpost inserts an outpost; store.ErrConflict when the id or name is
// taken.
func (s *Store) CreateOutpost(ctx context.Context, o store.Outpost) error {
	policy, err := sqlstore.EncodePolicy(o.NetworkPolicy)
	if err != nil {
		return fmt.Errorf("postgres: create outpost %s: %w", o.Name, err)
	}
	rules, err := sqlstore.EncodeApprovalRules(o.ApprovalRules)
	if err != nil {
		return fmt.Errorf("postgres: create outpost %s: %w", o.Name, err)
	}
	// The insert and its notification in one statement (notify.go).
	_, err = s.exec(ctx, `WITH o AS (INSERT INTO outposts (`+outpostCols+`)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $12, $13, $14, $15) RETURNING id)
		SELECT pg_notify('`+changesChannel+`', $11) FROM o`, o.ID, o.Name, o.Platform, o.Description, o.AllowedOrgIDs, sqlstore.MS(o.CreatedAt), o.RemoteBinarySHA,
		o.MaxRunning, o.MaxAttempts, o.MaxSnapshotBytes, s.outpostPayload(o.ID), policy, sqlstore.EncodeDesktop(o.Desktop), sqlstore.EncodeRequirements(o.Requirements), rules)
	if err != nil {
		return fmt.Errorf("postgres: create outpost %s: %w", o.Name, mapErr(err))
	}
	return nil
}

const outpostCols = `id, name, platform, description, allowed_org_ids, created_at, remote_binary_sha,
	max_running, max_attempts, max_snapshot_bytes, network_policy_json, desktop_json, requirements_json, approval_rules_json`

// scanOutpost reads outpostCols; a NULL allowed_org_ids scans as nil, an
// empty array as an empty list.
func scanOutpost(sc sqlstore.Scanner) (store.Outpost, error) {
	var o store.Outpost
	var created int64
	var policy, desk, reqs, rules sql.NullString
	if err := sc.Scan(&o.ID, &o.Name, &o.Platform, &o.Description, &o.AllowedOrgIDs, &created, &o.RemoteBinarySHA, &o.MaxRunning, &o.MaxAttempts, &o.MaxSnapshotBytes, &policy, &desk, &reqs, &rules); err != nil {
		return store.Outpost{}, err
	}
	o.CreatedAt = sqlstore.FromMS(created)
	var err error
	if o.Requirements, err = sqlstore.ScanRequirements(reqs); err != nil {
		return store.Outpost{}, fmt.Errorf("outpost %s requirements: %w", o.ID, err)
	}
	if o.ApprovalRules, err = sqlstore.ScanApprovalRules(rules); err != nil {
		return store.Outpost{}, fmt.Errorf("outpost %s approval rules: %w", o.ID, err)
	}
	if o.NetworkPolicy, err = sqlstore.ScanPolicy(policy); err != nil {
		return store.Outpost{}, fmt.Errorf("outpost %s network policy: %w", o.ID, err)
	}
	if o.Desktop, err = sqlstore.ScanDesktop(desk); err != nil {
		return store.Outpost{}, fmt.Errorf("outpost %s desktop: %w", o.ID, err)
	}
	return o, nil
}

// DeleteOutpost removes an outpost; store.ErrNotFound when absent. Its
// sessions and queue entries are left to the caller.
func (s *Store) DeleteOutpost(ctx context.Context, id string) error {
	// The delete and its notification in one statement (notify.go); the
	// SELECT's row count is the delete's.
	// In a transaction that a missing outpost rolls back, with the audit
	// entry ctx may carry.
	err := s.write(ctx, func(tx pgx.Tx) error {
		return mustAffect(tx.Exec(ctx, `WITH o AS (`+sqlstore.DeleteOutpostSQL+` RETURNING id)
		SELECT pg_notify('`+changesChannel+`', $2) FROM o`, id, s.outpostPayload(id)))
	})
	if err != nil {
		return fmt.Errorf("postgres: delete outpost %s: %w", id, mapErr(err))
	}
	return nil
}
