package storetest

import (
	"strings"
	"testing"
	"time"

	"github.com/outpost-sh/outpost/internal/store"
)

func testOutpostSecrets(t *testing.T, s store.Store) {
	a, b := newOutpost("op-sa", "sa"), newOutpost("op-sb", "sb")
	must(t, "create outpost a", s.CreateOutpost(ctx(t), a))
	must(t, "create outpost b", s.CreateOutpost(ctx(t), b))

	created, err := s.PutOutpostSecret(ctx(t), store.OutpostSecret{OutpostID: a.ID, Name: "API_KEY", Value: "v1", SetBy: "tok1", UpdatedAt: at(time.Second)})
	must(t, "put", err)
	if !created {
		t.Error("the first put did not report a new secret")
	}
	created, err = s.PutOutpostSecret(ctx(t), store.OutpostSecret{OutpostID: a.ID, Name: "API_KEY", Value: "v2", SetBy: "tok2", UpdatedAt: at(2 * time.Second)})
	must(t, "replace", err)
	if created {
		t.Error("replacing a value reported a new secret")
	}
	_, err = s.PutOutpostSecret(ctx(t), store.OutpostSecret{OutpostID: a.ID, Name: "DB_URL", Value: "postgres://x", UpdatedAt: at(3 * time.Second)})
	must(t, "put another", err)
	_, err = s.PutOutpostSecret(ctx(t), store.OutpostSecret{OutpostID: b.ID, Name: "API_KEY", Value: "b-value", UpdatedAt: at(time.Second)})
	must(t, "put on b", err)

	list, err := s.ListOutpostSecrets(ctx(t), a.ID)
	must(t, "list", err)
	equal(t, "listed", list, []store.OutpostSecret{
		{OutpostID: a.ID, Name: "API_KEY", SetBy: "tok2", CreatedAt: at(time.Second), UpdatedAt: at(2 * time.Second)},
		{OutpostID: a.ID, Name: "DB_URL", CreatedAt: at(3 * time.Second), UpdatedAt: at(3 * time.Second)},
	})

	vals, err := s.OutpostSecretValues(ctx(t), a.ID, []string{"API_KEY", "MISSING"})
	must(t, "values", err)
	equal(t, "values", vals, map[string]string{"API_KEY": "v2"})
	vals, err = s.OutpostSecretValues(ctx(t), b.ID, []string{"API_KEY", "DB_URL"})
	must(t, "values of b", err)
	equal(t, "values of b", vals, map[string]string{"API_KEY": "b-value"})
	vals, err = s.OutpostSecretValues(ctx(t), a.ID, nil)
	must(t, "no names", err)
	equal(t, "no names", vals, map[string]string{})

	_, err = s.PutOutpostSecret(ctx(t), store.OutpostSecret{OutpostID: "op-none", Name: "X", Value: "x", UpdatedAt: base})
	wantErr(t, "put on a missing outpost", err, store.ErrNotFound)

	must(t, "delete", s.DeleteOutpostSecret(ctx(t), a.ID, "DB_URL"))
	wantErr(t, "delete again", s.DeleteOutpostSecret(ctx(t), a.ID, "DB_URL"), store.ErrNotFound)
	wantErr(t, "delete b's through a", s.DeleteOutpostSecret(ctx(t), a.ID, "NOPE"), store.ErrNotFound)
	list, err = s.ListOutpostSecrets(ctx(t), a.ID)
	must(t, "list after delete", err)
	if len(list) != 1 || list[0].Name != "API_KEY" {
		t.Errorf("after delete: %+v", list)
	}

	// The secrets go with their outpost.
	must(t, "delete outpost a", s.DeleteOutpost(ctx(t), a.ID))
	list, err = s.ListOutpostSecrets(ctx(t), a.ID)
	must(t, "list of a deleted outpost", err)
	if len(list) != 0 {
		t.Errorf("a deleted outpost still lists %+v", list)
	}
	must(t, "recreate outpost a", s.CreateOutpost(ctx(t), a))
	vals, err = s.OutpostSecretValues(ctx(t), a.ID, []string{"API_KEY"})
	must(t, "values of the new outpost", err)
	equal(t, "a new outpost of the same id", vals, map[string]string{})
}

// testSealedOutpostSecrets checks that outpost secrets are sealed at rest,
// bound to their outpost and name, and sealed anew under a new key.
func testSealedOutpostSecrets(t *testing.T, db SealedDB) {
	oldKey := newKey(t)
	before := newKeyring(t, oldKey)
	s, closeS := openSealed(t, db, before)
	must(t, "create outpost", s.CreateOutpost(ctx(t), newOutpost("op", "op")))
	must(t, "create outpost 2", s.CreateOutpost(ctx(t), newOutpost("op2", "op2")))
	for _, o := range []string{"op", "op2"} {
		_, err := s.PutOutpostSecret(ctx(t), store.OutpostSecret{OutpostID: o, Name: "API_TOKEN", Value: secretValue + "-" + o, UpdatedAt: base})
		must(t, "put", err)
	}
	raw := db.RawOutpostSecret(t, "op", "API_TOKEN")
	if strings.Contains(raw, secretValue) || !before.Current(raw) {
		t.Errorf("the raw value is not sealed under key %s: %q", before.ID(), raw)
	}
	// A sealed value copied to another outpost does not open there.
	db.SetRawOutpostSecret(t, "op2", "API_TOKEN", raw)
	_, err := s.OutpostSecretValues(ctx(t), "op2", []string{"API_TOKEN"})
	if err == nil {
		t.Error("a value copied from another outpost opened")
	}
	must(t, "delete the copied one", s.DeleteOutpostSecret(ctx(t), "op2", "API_TOKEN"))
	closeS()

	// A new key: the value is sealed anew at Open and still opens once
	// the old key is gone.
	newKeyBytes := newKey(t)
	during := newKeyring(t, newKeyBytes, oldKey)
	_, closeS = openSealed(t, db, during)
	if raw := db.RawOutpostSecret(t, "op", "API_TOKEN"); !during.Current(raw) || strings.Contains(raw, secretValue) {
		t.Errorf("after a key change the value is not sealed under key %s: %.20q…", during.ID(), raw)
	}
	closeS()
	s, _ = openSealed(t, db, newKeyring(t, newKeyBytes))
	vals, err := s.OutpostSecretValues(ctx(t), "op", []string{"API_TOKEN"})
	must(t, "values after rotation", err)
	equal(t, "values after rotation", vals, map[string]string{"API_TOKEN": secretValue + "-op"})
}
