package migration

import (
	"strings"
	"testing"
	"testing/fstest"
)

func TestLoad(t *testing.T) {
	ms, err := Load(fstest.MapFS{
		"m/0010_later.sql": {Data: []byte("B")},
		"m/0002_first.sql": {Data: []byte("A")},
		"m/README":         {Data: []byte("not a migration")},
	}, "m")
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != 2 || ms[0] != (Migration{2, "0002_first", "A"}) || ms[1] != (Migration{10, "0010_later", "B"}) {
		t.Fatalf("Load = %+v", ms)
	}
	for name, fsys := range map[string]fstest.MapFS{
		"no version":     {"m/init.sql": {}},
		"zero version":   {"m/0000_x.sql": {}},
		"shared version": {"m/0001_a.sql": {}, "m/1_b.sql": {}},
	} {
		if _, err := Load(fsys, "m"); err == nil || !strings.Contains(err.Error(), "migration") {
			t.Errorf("%s: Load error %v", name, err)
		}
	}
}
