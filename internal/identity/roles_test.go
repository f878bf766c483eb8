package identity

import (
	"reflect"
	"testing"

	"github.com/outpost-sh/outpost/api"
)

func TestResolve(t *testing.T) {
	t.Parallel()
	bindings := []Binding{
		{Role: api.RoleViewer, SubjectKind: api.SubjectGroup, Subject: "everyone"},
		{Role: api.RoleMember, SubjectKind: api.SubjectGroup, Subject: "eng", OutpostID: "op_gpu"},
		{Role: api.RoleViewer, SubjectKind: api.SubjectUser, Subject: "usr_a", OutpostID: "op_cpu"},
		{Role: api.RoleOperator, SubjectKind: api.SubjectUser, Subject: "usr_b"},
		{Role: "owner", SubjectKind: api.SubjectUser, Subject: "usr_a"},
	}
	for _, tc := range []struct {
		name   string
		user   string
		groups []string
		want   Grants
	}{
		{"nothing", "usr_x", nil, Grants{Outposts: map[string]string{}}},
		{"group role everywhere, a stronger one on one outpost, a weaker one dropped", "usr_a", []string{"everyone", "eng"},
			Grants{Role: api.RoleViewer, Outposts: map[string]string{"op_gpu": api.RoleMember}}},
		{"outpost role alone", "usr_c", []string{"eng"}, Grants{Outposts: map[string]string{"op_gpu": api.RoleMember}}},
		{"user role beats the groups'", "usr_b", []string{"everyone", "eng"}, Grants{Role: api.RoleOperator, Outposts: map[string]string{}}},
	} {
		if got := Resolve(bindings, tc.user, tc.groups); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: Resolve = %+v, want %+v", tc.name, got, tc.want)
		}
	}
}

func TestFromClaims(t *testing.T) {
	t.Parallel()
	got := fromClaims("s1", map[string]any{"email": "a@b.c", "preferred_username": "ann", "roles": []any{"b", "a", "b", 3}}, "roles")
	want := Identity{Subject: "s1", Email: "a@b.c", Name: "ann", Groups: []string{"a", "b"}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("fromClaims = %+v, want %+v", got, want)
	}
}
