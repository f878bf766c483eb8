package machine

import (
	"strconv"
	"strings"
)

// parseOSRelease returns PRETTY_NAME of an os-release file, unquoted.
func parseOSRelease(s string) string {
	for line := range strings.Lines(s) {
		v, ok := strings.CutPrefix(strings.TrimSpace(line), "PRETTY_NAME=")
		if !ok {
			continue
		}
		if u, err := strconv.Unquote(v); err == nil {
			return u
		}
		return strings.Trim(v, `'"`)
	}
	return ""
}
