package orchestrator

import (
	"os"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// TestMetricsDocumented keeps docs/metrics.md complete: every metric of
// Metrics is named there.
func TestMetricsDocumented(t *testing.T) {
	doc, err := os.ReadFile("../../docs/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	m := NewMetrics()
	fq := regexp.MustCompile(`fqName: "([^"]+)"`)
	v := reflect.ValueOf(m).Elem()
	n := 0
	for i := range v.NumField() {
		if !v.Field(i).CanInterface() { // the registry
			continue
		}
		c, ok := v.Field(i).Interface().(prometheus.Collector)
		if !ok {
			t.Fatalf("Metrics.%s is not a collector", v.Type().Field(i).Name)
		}
		ch := make(chan *prometheus.Desc, 16)
		c.Describe(ch)
		close(ch)
		for d := range ch {
			sub := fq.FindStringSubmatch(d.String())
			if sub == nil {
				t.Fatalf("cannot read the name of %s", d)
			}
			n++
			if !strings.Contains(string(doc), "`"+sub[1]+"`") {
				t.Errorf("docs/metrics.md does not list %s", sub[1])
			}
		}
	}
	if n != v.NumField()-1 {
		t.Errorf("described %d metrics of %d fields", n, v.NumField()-1)
	}
}
