package storetest

import (
	"testing"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/store"
)

func testUsers(t *testing.T, s store.Store) {
	u := store.User{ID: "usr-a", Subject: "sub-a", Email: "a@example.com", Name: "A", Groups: []string{"eng"},
		CreatedAt: base, LastLoginAt: base, CheckedAt: base, RefreshToken: "rt1"}
	got, err := s.UpsertUser(ctx(t), u)
	must(t, "insert user", err)
	equal(t, "inserted user", got, u)

	// A second sign-in of the same subject keeps the id and creation time.
	again := store.User{ID: "usr-other", Subject: "sub-a", Email: "a2@example.com", Name: "A2", Groups: nil,
		CreatedAt: at(time.Hour), LastLoginAt: at(time.Hour), CheckedAt: at(time.Hour), RefreshToken: "rt2", DisabledAt: nil}
	got, err = s.UpsertUser(ctx(t), again)
	must(t, "upsert user", err)
	want := again
	want.ID, want.CreatedAt, want.Groups = "usr-a", base, []string{}
	equal(t, "upserted user", got, want)

	b := store.User{ID: "usr-b", Subject: "sub-b", Email: "b@example.com", Groups: []string{}, CreatedAt: at(time.Minute), LastLoginAt: at(time.Minute), CheckedAt: at(time.Minute)}
	_, err = s.UpsertUser(ctx(t), b)
	must(t, "insert b", err)
	list, err := s.ListUsers(ctx(t))
	must(t, "list users", err)
	equal(t, "users oldest first", list, []store.User{want, b})

	// A check keeps the refresh token when given none, and records a refusal.
	must(t, "check", s.SetUserChecked(ctx(t), "usr-a", at(2*time.Hour), "", ptr(at(2*time.Hour))))
	got, err = s.GetUser(ctx(t), "usr-a")
	must(t, "get user", err)
	want.CheckedAt, want.DisabledAt = at(2*time.Hour), ptr(at(2*time.Hour))
	equal(t, "checked user", got, want)
	must(t, "check again", s.SetUserChecked(ctx(t), "usr-a", at(3*time.Hour), "rt3", nil))
	got, err = s.GetUser(ctx(t), "usr-a")
	must(t, "get user again", err)
	want.CheckedAt, want.DisabledAt, want.RefreshToken = at(3*time.Hour), nil, "rt3"
	equal(t, "re-enabled user", got, want)
	wantErr(t, "check missing", s.SetUserChecked(ctx(t), "nope", base, "", nil), store.ErrNotFound)
	_, err = s.GetUser(ctx(t), "nope")
	wantErr(t, "get missing", err, store.ErrNotFound)

	r1 := store.RoleBinding{ID: "rb-1", Role: api.RoleMember, SubjectKind: api.SubjectUser, Subject: "usr-a", OutpostID: "op", CreatedAt: base}
	r2 := store.RoleBinding{ID: "rb-2", Role: api.RoleViewer, SubjectKind: api.SubjectGroup, Subject: "eng", CreatedAt: at(time.Minute)}
	must(t, "bind 1", s.CreateRoleBinding(ctx(t), r1))
	must(t, "bind 2", s.CreateRoleBinding(ctx(t), r2))
	dup := r1
	dup.ID = "rb-3"
	wantErr(t, "bind twice", s.CreateRoleBinding(ctx(t), dup), store.ErrConflict)
	bl, err := s.ListRoleBindings(ctx(t))
	must(t, "list bindings", err)
	equal(t, "bindings oldest first", bl, []store.RoleBinding{r1, r2})
	must(t, "unbind", s.DeleteRoleBinding(ctx(t), "rb-1"))
	wantErr(t, "unbind again", s.DeleteRoleBinding(ctx(t), "rb-1"), store.ErrNotFound)
	bl, err = s.ListRoleBindings(ctx(t))
	must(t, "list after unbind", err)
	equal(t, "bindings after unbind", bl, []store.RoleBinding{r2})

	// A token keeps its owner and role.
	tok := store.Token{ID: "t-u", Name: "mine", Hash: "hu", Scopes: []string{api.ScopeSessionsWrite}, CreatedAt: base, UserID: "usr-a", Role: api.RoleMember}
	must(t, "create user token", s.CreateToken(ctx(t), tok))
	gt, err := s.TokenByHash(ctx(t), "hu")
	must(t, "user token", err)
	equal(t, "user token", gt, tok)
}
