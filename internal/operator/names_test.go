//go:build !windows

package operator

import (
	"fmt"
	"hash/fnv"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"
)

func TestNames(t *testing.T) {
	t.Parallel()
	hash := func(s string) string {
		h := fnv.New32a()
		h.Write([]byte(s))
		return fmt.Sprintf("%08x", h.Sum32())
	}
	long := "ses_" + strings.Repeat("Ab9_", 30)
	for _, tc := range []struct {
		id, pod string
	}{
		{"ses_abc", "outpost-ses-abc-" + hash("ses_abc")},
		{"ses_AbC", "outpost-ses-abc-" + hash("ses_AbC")},
		{"__x__y__", "outpost-x-y-" + hash("__x__y__")},
		{"___", "outpost-" + hash("___")},
		{"", "outpost-" + hash("")},
	} {
		if got := PodName(tc.id); got != tc.pod {
			t.Errorf("PodName(%q) = %q, want %q", tc.id, got, tc.pod)
		}
	}
	for _, id := range []string{"ses_abc", "ses_AbC", long, "-x-", "ses.α.β", strings.Repeat("-", 80) + "z"} {
		for _, name := range []string{PodName(id), SecretName(id), VolumeName(id)} {
			if errs := validation.IsDNS1123Label(name); len(errs) > 0 {
				t.Errorf("name %q of session %q is no DNS-1123 label: %v", name, id, errs)
			}
			if !strings.HasSuffix(name, hash(id)) {
				t.Errorf("name %q does not end in the hash of %q", name, id)
			}
		}
	}
	if PodName("ses_abc") == PodName("ses_ABC") {
		t.Error("ids differing only in case share a pod name")
	}
	if !strings.HasPrefix(SecretName("ses_abc"), "outpost-token-ses-abc-") || !strings.HasPrefix(VolumeName("ses_abc"), "outpost-work-ses-abc-") {
		t.Errorf("SecretName, VolumeName = %q, %q", SecretName("ses_abc"), VolumeName("ses_abc"))
	}
	if n := len(SecretName(long)); n < 62 || n > 63 {
		t.Errorf("a long id's Secret name is %d characters, want 62 or 63 (cut to fit)", n)
	}
}

// TestNamesOfBothIDShapes: the session ids minted today ("devin-" and 16
// lower-case base32 characters) and those minted before ("ses_…") name
// objects that keep the whole id, and are valid label values as they are
// (LabelSessionID carries the raw id).
func TestNamesOfBothIDShapes(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ id, safe string }{
		{"devin-abcdefghij234567", "devin-abcdefghij234567"},
		{"devin-w46rf6ki6zjihjpc", "devin-w46rf6ki6zjihjpc"},
		{"ses_abcdefghij23", "ses-abcdefghij23"},
		{"ses_w46rf6ki6zjihjpc", "ses-w46rf6ki6zjihjpc"},
	} {
		if errs := validation.IsValidLabelValue(tc.id); len(errs) > 0 {
			t.Errorf("session id %q is no label value: %v", tc.id, errs)
		}
		for prefix, name := range map[string]string{"outpost-": PodName(tc.id), "outpost-token-": SecretName(tc.id), "outpost-work-": VolumeName(tc.id)} {
			if errs := validation.IsDNS1123Label(name); len(errs) > 0 || !strings.HasPrefix(name, prefix+tc.safe+"-") {
				t.Errorf("name %q of session %q: want %s%s-<hash>, a DNS-1123 label (%v)", name, tc.id, prefix, tc.safe, errs)
			}
		}
	}
}
