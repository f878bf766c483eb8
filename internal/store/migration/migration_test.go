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

func TestPending(t *testing.T) {
	all := []Migration{{Version: 1, Name: "0001_init"}, {Version: 4, Name: "0004_more"}}
	for _, tc := range []struct {
		name string
		recs []Record
		m    Migration
		want bool
	}{
		{"empty database", nil, all[0], true},
		{"recorded", []Record{{1, "0001_init"}}, all[0], false},
		{"later one recorded first", []Record{{4, "0004_more"}}, all[0], true},
	} {
		got, err := Pending(all, tc.recs, tc.m)
		if err != nil || got != tc.want {
			t.Errorf("%s: Pending = %v, %v; want %v", tc.name, got, err, tc.want)
		}
	}
	_, err := Pending(all, []Record{{1, "0001_init"}, {7, "0007_future"}}, all[1])
	if err == nil || !strings.Contains(err.Error(), "0007_future") || !strings.Contains(err.Error(), "newer version") {
		t.Errorf("a version this build lacks: err = %v", err)
	}
}
