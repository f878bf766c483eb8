package osservice

import "strings"

// Levels of a log record, as RecordLevel finds them.
const (
	LevelInfo  = "info"
	LevelWarn  = "warn"
	LevelError = "error"
)

// RecordLevel is the level of one record written by a log/slog text or
// JSON handler (level=WARN, "level":"ERROR"); LevelInfo when it names
// none. The Event Log files each entry under its level.
func RecordLevel(record string) string {
	for _, l := range []struct{ text, json, level string }{
		{"level=ERROR", `"level":"ERROR`, LevelError},
		{"level=WARN", `"level":"WARN`, LevelWarn},
	} {
		if strings.Contains(record, l.text) || strings.Contains(record, l.json) {
			return l.level
		}
	}
	return LevelInfo
}
