package netpolicy

import (
	"errors"
	"testing"
)

func TestCheckEnabledKey(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		raw     string
		refused bool
	}{
		{`{"allow":[{"hostname":"a.example.test"}]}`, true},
		{`{"allow":[{"hostname":"a.example.test"}],"enabled":null}`, true},
		{` { "allow" : [ {} ] } `, true},
		{`{"allow":[{"hostname":"a.example.test"}],"enabled":true}`, false},
		{`{"allow":[{"hostname":"a.example.test"}],"enabled":false}`, false},
		// encoding/json matches keys case-insensitively; so does the check,
		// or it would refuse what the decoder reads as enabled.
		{`{"Allow":[{"hostname":"a.example.test"}],"ENABLED":true}`, false},
		{`{"ALLOW":[{"hostname":"a.example.test"}]}`, true},
		{`{"enabled":true}`, false},
		{`{"enabled":false}`, false},
		{`{"allow":[]}`, false},
		{`{"allow":null}`, false},
		{`{}`, false},
		{`null`, false},
		{`"not a policy"`, false},
		{`{"allow":"x"}`, false},
		{``, false},
	} {
		err := CheckEnabledKey([]byte(tc.raw))
		if got := err != nil; got != tc.refused {
			t.Errorf("CheckEnabledKey(%s) = %v, want refused %v", tc.raw, err, tc.refused)
		}
		if err != nil && !errors.Is(err, ErrAllowWithoutEnabled) {
			t.Errorf("CheckEnabledKey(%s) = %v, not ErrAllowWithoutEnabled", tc.raw, err)
		}
	}
}
