package netpolicy

import (
	"encoding/json"
	"errors"
)

// ErrAllowWithoutEnabled is CheckEnabledKey's error: a policy whose rules
// would be stored unenforced because it never says whether it applies.
var ErrAllowWithoutEnabled = errors.New(`network_policy has allow rules but no "enabled": set "enabled": true to enforce them, or false to store them unenforced`)

// CheckEnabledKey checks the JSON of a network policy as a person or a
// program wrote it (a request body's network_policy, a policy file): one
// with a non-empty "allow" list must also say "enabled", true or false.
// Decoded, a missing (or null) "enabled" is false, which stores the rules
// unrestricted, the opposite of what a writer who lists what may be
// reached almost always means; so such a policy is refused rather than
// read. Keys match as encoding/json matches them (case-insensitively), so
// the check sees what the decoder saw. JSON null, an empty object, a
// policy without rules and text that is not a policy object pass: the
// strict decode of the request says what is wrong with the last.
func CheckEnabledKey(raw []byte) error {
	var shape struct {
		Enabled *bool             `json:"enabled"`
		Allow   []json.RawMessage `json:"allow"`
	}
	if err := json.Unmarshal(raw, &shape); err != nil {
		return nil
	}
	if len(shape.Allow) > 0 && shape.Enabled == nil {
		return ErrAllowWithoutEnabled
	}
	return nil
}
