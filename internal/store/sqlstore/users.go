package sqlstore

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/outpost-sh/outpost/internal/store"
)

// UserCols are the columns of a user, which ScanUser reads.
const UserCols = `id, subject, email, name, groups_json, created_at, last_login_at, checked_at, refresh_token, disabled_at`

// RoleBindingCols are the columns of a role binding, which ScanRoleBinding
// reads.
const RoleBindingCols = `id, role, subject_kind, subject, outpost_id, created_at`

const (
	// UpsertUserSQL inserts a user, or updates the one of the same
	// subject but for its id and creation time.
	UpsertUserSQL = `INSERT INTO users (` + UserCols + `) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
ON CONFLICT (subject) DO UPDATE SET email = excluded.email, name = excluded.name, groups_json = excluded.groups_json,
  last_login_at = excluded.last_login_at, checked_at = excluded.checked_at, refresh_token = excluded.refresh_token,
  disabled_at = excluded.disabled_at`
	// UserBySubjectSQL reads UserCols of the user of subject $1.
	UserBySubjectSQL = `SELECT ` + UserCols + ` FROM users WHERE subject = $1`
	// GetUserSQL reads UserCols of user $1.
	GetUserSQL = `SELECT ` + UserCols + ` FROM users WHERE id = $1`
	// ListUsersSQL reads UserCols of every user, oldest first.
	ListUsersSQL = `SELECT ` + UserCols + ` FROM users ORDER BY created_at, id`
	// SetUserCheckedSQL records a provider check of user $1.
	SetUserCheckedSQL = `UPDATE users SET checked_at = $2, refresh_token = CASE WHEN $3 = '' THEN refresh_token ELSE $3 END, disabled_at = $4 WHERE id = $1`
	// InsertRoleBindingSQL inserts RoleBindingCols.
	InsertRoleBindingSQL = `INSERT INTO role_bindings (` + RoleBindingCols + `) VALUES ($1, $2, $3, $4, $5, $6)`
	// ListRoleBindingsSQL reads every role binding, oldest first.
	ListRoleBindingsSQL = `SELECT ` + RoleBindingCols + ` FROM role_bindings ORDER BY created_at, id`
	// DeleteRoleBindingSQL deletes role binding $1.
	DeleteRoleBindingSQL = `DELETE FROM role_bindings WHERE id = $1`
)

// ScanUser reads UserCols.
func ScanUser(sc Scanner) (store.User, error) {
	var u store.User
	var groups string
	var created, login, checked int64
	var disabled nullInt64
	if err := sc.Scan(&u.ID, &u.Subject, &u.Email, &u.Name, &groups, &created, &login, &checked, &u.RefreshToken, &disabled); err != nil {
		return store.User{}, err
	}
	if err := json.Unmarshal([]byte(groups), &u.Groups); err != nil {
		return store.User{}, fmt.Errorf("user %s groups: %w", u.ID, err)
	}
	u.CreatedAt, u.LastLoginAt, u.CheckedAt, u.DisabledAt = FromMS(created), FromMS(login), FromMS(checked), disabled.timePtr()
	return u, nil
}

// ScanRoleBinding reads RoleBindingCols.
func ScanRoleBinding(sc Scanner) (store.RoleBinding, error) {
	var b store.RoleBinding
	var created int64
	if err := sc.Scan(&b.ID, &b.Role, &b.SubjectKind, &b.Subject, &b.OutpostID, &created); err != nil {
		return store.RoleBinding{}, err
	}
	b.CreatedAt = FromMS(created)
	return b, nil
}

// UpsertUser records a sign-in of u and returns the stored user.
func (s *Store) UpsertUser(ctx context.Context, u store.User) (store.User, error) {
	if u.Groups == nil {
		u.Groups = []string{}
	}
	groups, err := Marshal(u.Groups)
	if err != nil {
		return store.User{}, s.errorf(err, "upsert user %s", u.Subject)
	}
	// Not RETURNING: the SQLite store reads through connections that do
	// not write. A subject's id never changes, so the read cannot see
	// another user.
	if _, err := s.db.Exec(ctx, UpsertUserSQL, u.ID, u.Subject, u.Email, u.Name, groups,
		MS(u.CreatedAt), MS(u.LastLoginAt), MS(u.CheckedAt), u.RefreshToken, PtrMS(u.DisabledAt)); err != nil {
		return store.User{}, s.errorf(err, "upsert user %s", u.Subject)
	}
	out, err := ScanUser(s.db.QueryRow(ctx, UserBySubjectSQL, u.Subject))
	if err != nil {
		return store.User{}, s.errorf(err, "upsert user %s", u.Subject)
	}
	return out, nil
}

// GetUser finds a user by id.
func (s *Store) GetUser(ctx context.Context, id string) (store.User, error) {
	u, err := ScanUser(s.db.QueryRow(ctx, GetUserSQL, id))
	if err != nil {
		return store.User{}, s.errorf(err, "get user %s", id)
	}
	return u, nil
}

// ListUsers returns every user, oldest first.
func (s *Store) ListUsers(ctx context.Context) ([]store.User, error) {
	out, err := QueryAll(ctx, s.db, ScanUser, ListUsersSQL)
	if err != nil {
		return nil, s.errorf(err, "list users")
	}
	return out, nil
}

// SetUserChecked records the outcome of asking the provider about a user.
func (s *Store) SetUserChecked(ctx context.Context, id string, checkedAt time.Time, refreshToken string, disabledAt *time.Time) error {
	if err := s.execOne(ctx, SetUserCheckedSQL, id, MS(checkedAt), refreshToken, PtrMS(disabledAt)); err != nil {
		return s.errorf(err, "set user %s checked", id)
	}
	return nil
}

// CreateRoleBinding inserts a role binding.
func (s *Store) CreateRoleBinding(ctx context.Context, b store.RoleBinding) error {
	if _, err := s.db.Exec(ctx, InsertRoleBindingSQL, b.ID, b.Role, b.SubjectKind, b.Subject, b.OutpostID, MS(b.CreatedAt)); err != nil {
		return s.errorf(err, "create role binding %s", b.ID)
	}
	return nil
}

// ListRoleBindings returns every role binding, oldest first.
func (s *Store) ListRoleBindings(ctx context.Context) ([]store.RoleBinding, error) {
	out, err := QueryAll(ctx, s.db, ScanRoleBinding, ListRoleBindingsSQL)
	if err != nil {
		return nil, s.errorf(err, "list role bindings")
	}
	return out, nil
}

// DeleteRoleBinding removes a role binding.
func (s *Store) DeleteRoleBinding(ctx context.Context, id string) error {
	if err := s.execOne(ctx, DeleteRoleBindingSQL, id); err != nil {
		return s.errorf(err, "delete role binding %s", id)
	}
	return nil
}
