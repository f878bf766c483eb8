package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"

	"github.com/outpost-sh/outpost/internal/store"
	"github.com/outpost-sh/outpost/internal/store/sqlstore"
)

// CreateOutpost inserts an outpost; store.ErrConflict when the id or name is
// taken.
func (s *Store) CreateOutpost(ctx context.Context, o store.Outpost) error {
	var orgs any // NULL when unset
	if o.AllowedOrgIDs != nil {
		j, err := sqlstore.Marshal(o.AllowedOrgIDs)
		if err != nil {
			return fmt.Errorf("sqlite: create outpost %s: %w", o.Name, err)
		}
		orgs = j
	}
	policy, err := sqlstore.EncodePolicy(o.NetworkPolicy)
	if err != nil {
		return fmt.Errorf("sqlite: create outpost %s: %w", o.Name, err)
	}
	rules, err := sqlstore.EncodeApprovalRules(o.ApprovalRules)
	if err != nil {
		return fmt.Errorf("sqlite: create outpost %s: %w", o.Name, err)
	}
	err = s.write(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO outposts (`+outpostCols+`)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)`, o.ID, o.Name, o.Platform, o.Description, orgs, sqlstore.MS(o.CreatedAt), o.RemoteBinarySHA,
			o.MaxRunning, o.MaxAttempts, o.MaxSnapshotBytes, policy, sqlstore.EncodeDesktop(o.Desktop), sqlstore.EncodeRequirements(o.Requirements), rules)
		return err
	})
	if err != nil {
		return fmt.Errorf("sqlite: create outpost %s: %w", o.Name, mapErr(err))
	}
	return nil
}

const outpostCols = `id, name, platform, description, allowed_org_ids_json, created_at, remote_binary_sha,
	max_running, max_attempts, max_snapshot_bytes, network_policy_json, desktop_json, requirements_json, approval_rules_json`

// scanOutpost reads outpostCols.
func scanOutpost(sc sqlstore.Scanner) (store.Outpost, error) {
	var o store.Outpost
	var orgs, policy, desk, reqs, rules sql.NullString
	var created int64
	if err := sc.Scan(&o.ID, &o.Name, &o.Platform, &o.Description, &orgs, &created, &o.RemoteBinarySHA, &o.MaxRunning, &o.MaxAttempts, &o.MaxSnapshotBytes, &policy, &desk, &reqs, &rules); err != nil {
		return store.Outpost{}, err
	}
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
	o.CreatedAt = sqlstore.FromMS(created)
	if orgs.Valid {
		o.AllowedOrgIDs = []string{}
		if err := json.Unmarshal([]byte(orgs.String), &o.AllowedOrgIDs); err != nil {
			return store.Outpost{}, fmt.Errorf("outpost %s allowed org ids: %w", o.ID, err)
		}
	}
	return o, nil
}

// DeleteOutpost removes an outpost; store.ErrNotFound when absent. Its
// sessions and queue entries are left to the caller.
func (s *Store) DeleteOutpost(ctx context.Context, id string) error {
	err := s.write(ctx, func(tx *sql.Tx) error {
		return mustAffect(tx.ExecContext(ctx, sqlstore.DeleteOutpostSQL, id))
	})
	if err != nil {
		return fmt.Errorf("sqlite: delete outpost %s: %w", id, mapErr(err))
	}
	return nil
}
